"""Type-checks graphtier with mypy, each module under its import name; `.ci/run` runs it.

setup.py maps the import names onto top-level folders (`graphtier.service` is `service/`,
`graphtier.v1` is `proto/graphtier/v1/`, ...) and an editable install resolves them through an
import hook, which mypy cannot follow: `mypy -p graphtier` would find `graphtier/` alone. So this
hands mypy every source file together with its module name, which is what mypy's own module finder
would have produced for an installed tree; findings name the repository's files. Everything else
is pyproject.toml's `[tool.mypy]`: the packages checked (`packages`: all of `graphtier`, as a part
alone would not find the other parts it imports), the third-party modules without type
information, and the strictness.

Usage, from anywhere: `python tests/typecheck.py [mypy options]`; exit status 1 on findings, 2 on
bad options or a crash, as mypy's. The cache is `.mypy_cache/` at the repository's root.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {  # import name -> folder, as setup.py maps them (`graphtier` itself: its own modules only)
    "graphtier": ROOT / "graphtier",
    "graphtier.contract": ROOT / "contract",
    "graphtier.service": ROOT / "service",
    "graphtier.launcher": ROOT / "launcher",
    "graphtier.v1": ROOT / "proto" / "graphtier" / "v1",
}


def sources(packages: list[str]) -> list[BuildSource]:
    """Every module of `packages` (import names; a package includes its sub-packages) with its file,
    relative to the root; a stub (`.pyi`) stands in for its module, as it does on import."""
    found = []
    for name, folder in FOLDERS.items():
        for path in sorted(folder.glob("*.py*") if name == "graphtier" else folder.rglob("*.py*")):
            if path.suffix not in (".py", ".pyi") or (path.suffix == ".py" and path.with_suffix(".pyi").exists()):
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            module = ".".join([name, *(parts[:-1] if parts[-1] == "__init__" else parts)])
            if any(module == p or module.startswith(p + ".") for p in packages):
                found.append(BuildSource(str(path.relative_to(ROOT)), module))
    return found


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def main(argv: list[str]) -> int:
    os.chdir(ROOT)  # the files are named relative to it, and the cache lies there
    config = ["--config-file", str(ROOT / "pyproject.toml")]
    _, options = process_options([*config, *argv], require_targets=False)
    if not options.packages:
        print("typecheck: pyproject.toml's [tool.mypy] names no packages", file=sys.stderr)
        return 2
    checked = sources(options.packages)
    options.packages = []  # checked by file, under the names above
    started = time.monotonic()
    try:
        result = build.build(checked, options, stdout=sys.stdout, stderr=sys.stderr)
    except CompileError as blocking:  # a syntax error or the like: mypy stops at it
        print("\n".join(blocking.messages), file=sys.stderr)
        return 2
    if result.errors:
        print("\n".join(result.errors))
    errors = [line for line in result.errors if ": error:" in line]
    files = {line.split(":", 1)[0] for line in errors}
    verdict = f"{_count(len(errors), 'error')} in {_count(len(files), 'file')}" if errors else "no issues"
    print(f"typecheck: {verdict} ({len(checked)} modules, {time.monotonic() - started:.0f} s)")
    return 1 if errors else 0


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # as mypy's own command exits: without tearing down the checked program's objects
