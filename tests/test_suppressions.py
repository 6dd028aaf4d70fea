"""Every silenced check says which and why: `# type: ignore[code]  # reason`, and `# noqa: CODE  reason`
only for a rule ruff enables (pyproject.toml's `[tool.ruff.lint] select`), as a noqa for a rule ruff
does not run silences nothing and a bare suppression hides what it silences. Read from the comments
of every Python file of the repository (no type checker or linter runs here: `.ci/run` runs those);
failures name each comment as `path:line: comment` with what is missing.
"""

from __future__ import annotations

import functools
import io
import re
import sys
import tokenize
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: pytest's own TOML reader
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
NOT_SOURCES = {".git", "build", "out", ".bench-env", ".graphtier-home", ".mypy_cache", "node_modules"}

TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)")
NOQA = re.compile(r"#\s*(?:ruff:\s*)?noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?(?P<rest>.*)", re.I)
RULE = re.compile(r"([A-Z]+)([0-9]*)$")


def _python_files() -> list[Path]:
    return [
        path
        for path in sorted(ROOT.rglob("*.py"))
        if not any(part in NOT_SOURCES or part.endswith(".egg-info") for part in path.relative_to(ROOT).parts)
    ]


def _comments(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the comments of `path` that may suppress something (tokenized: no string is one)."""
    source = path.read_bytes()
    if b"noqa" not in source.lower() and b"ignore" not in source:
        return []
    tokens = tokenize.tokenize(io.BytesIO(source).readline)
    return [(token.start[0], token.string) for token in tokens if token.type == tokenize.COMMENT]


def _said(rest: str) -> bool:
    """Whether the text after a suppression's codes gives a reason (not only separators)."""
    return bool(re.sub(r"^[\s#:()\-\u2014,;]*", "", rest).strip())


def _selected(code: str, selectors: list[str]) -> bool:
    rule = RULE.match(code)
    assert rule is not None, code
    for selector in selectors:
        wanted = RULE.match(selector)
        if selector == "ALL" or (wanted and wanted[1] == rule[1] and rule[2].startswith(wanted[2])):
            return True
    return False


def _enabled_rules() -> tuple[list[str], list[str]]:
    """(selected, ignored) rule selectors of ruff's configuration."""
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    return [*lint.get("select", []), *lint.get("extend-select", [])], lint.get("ignore", [])


def _where(path: Path, line: int, comment: str) -> str:
    return f"{path.relative_to(ROOT)}:{line}: {comment}"


@functools.cache
def _unexplained() -> tuple[list[str], list[str]]:
    """(type: ignores without a code or a reason, noqas without an enabled rule's code or a reason)."""
    selected, ignored = _enabled_rules()
    ignores, noqas = [], []
    for path in _python_files():
        for line, comment in _comments(path):
            ignore = TYPE_IGNORE.search(comment)
            if ignore and not (ignore["codes"] and re.match(r"\s*#", ignore["rest"]) and _said(ignore["rest"])):
                ignores.append(_where(path, line, comment))
            noqa = NOQA.search(comment)
            if noqa is None:
                continue
            codes = re.split(r"[\s,]+", noqa["codes"].upper()) if noqa["codes"] else []
            off = [c for c in codes if not _selected(c, selected) or _selected(c, ignored)]
            if not codes or off or not _said(noqa["rest"]):
                why = "no code" if not codes else f"not enabled: {', '.join(off)}" if off else "no reason"
                noqas.append(f"{_where(path, line, comment)}  ({why})")
    return ignores, noqas


def test_the_rule_reader_knows_ruffs_prefixes() -> None:
    assert _selected("E402", ["E", "F"]) and _selected("B027", ["B"]) and _selected("UP006", ["UP"])
    assert not _selected("BLE001", ["B"]) and not _selected("ANN001", ["A"]) and not _selected("E731", ["E4"])
    assert _selected("C901", ["C90"]) and _selected("E501", ["ALL"])


def test_the_comment_reader_finds_what_it_must_refuse(tmp_path: Path) -> None:
    text = 'x = "# noqa: BLE001"  # type: ignore\ny = 1  # type: ignore[misc]  # a reason\n'
    (tmp_path / "sample.py").write_text(text)
    found = _comments(tmp_path / "sample.py")
    assert found == [(1, "# type: ignore"), (2, "# type: ignore[misc]  # a reason")]  # the string is no comment
    assert not _said("  ") and not _said(" -- ") and _said("  (re-exported)") and _said(" -- a default")


def test_every_type_ignore_names_its_code_and_says_why() -> None:
    ignores, _ = _unexplained()
    assert not ignores, "type: ignore without `[code]  # reason`:\n  " + "\n  ".join(ignores)


def test_every_noqa_names_an_enabled_rule_and_says_why() -> None:
    _, noqas = _unexplained()
    assert not noqas, (
        "noqa without an enabled rule's code and a reason (ruff runs the rules of pyproject.toml's "
        "[tool.ruff.lint] select; a noqa for any other silences nothing):\n  " + "\n  ".join(noqas)
    )
