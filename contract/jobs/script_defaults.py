"""A training script's own job defaults: a module-level `JOB_DEFAULTS = {...}` literal.

A script that ships its hyper-parameters (`examples/`) declares them once:

    JOB_DEFAULTS = {"fanouts": [25, 10], "batch_size": 64, "epochs": 30, "lr": 0.003}
    ...
    with graphtier.connect(args.dataset, **JOB_DEFAULTS) as job:     # a launch of your own

and `graphtier job submit --script train.py` takes the same values for every field the command
line or YAML spec leaves unset, so the script trains alike either way. The file is parsed, never
run (the literal is read with `ast.literal_eval`); the job's identity -- dataset, script, args,
nodes -- cannot be defaulted. A script that does not parse, one too large to parse at once (over
MAX_SCRIPT_BYTES: keep large data out of it), and a literal that is not a dict of a few values
(at most MAX_DEFAULT_VALUES) are refused naming the file and line, never dropped or waited on.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from graphtier.contract.errors import InvalidRequestError

DEFAULTS_NAME = "JOB_DEFAULTS"
NOT_DEFAULTED = frozenset({"dataset", "script", "args", "nodes", "nnodes", "name"})
MAX_SCRIPT_BYTES = 1 << 20  # parsed whole in about a second at worst; larger scripts carry data, not code
MAX_DEFAULT_VALUES = 10_000  # syntax nodes of the literal: a job's defaults are a few fields and lists


def _parse(script: Path) -> ast.Module:
    """The script's syntax tree; InvalidRequestError naming the file (and line) when there is none."""
    try:
        size = script.stat().st_size
        if size > MAX_SCRIPT_BYTES:
            raise InvalidRequestError(
                f"{script}: {size / (1 << 20):.1f} MiB is more than the {MAX_SCRIPT_BYTES >> 20} MiB of a script "
                f"whose {DEFAULTS_NAME} graphtier reads; load large data from a file of its own"
            )
        source = script.read_bytes()
    except OSError as exc:
        raise InvalidRequestError(f"{script}: cannot read the script ({exc.strerror or exc})") from None
    try:
        return ast.parse(source, filename=str(script))
    except SyntaxError as exc:
        where = f"{script}:{exc.lineno}" if exc.lineno else str(script)
        raise InvalidRequestError(
            f"{where}: the script does not parse ({exc.msg}), so its {DEFAULTS_NAME} cannot be read"
        ) from None
    except (ValueError, MemoryError, RecursionError) as exc:  # NUL bytes; nesting deeper than the parser goes
        why = "nested too deeply" if isinstance(exc, MemoryError | RecursionError) else str(exc)
        raise InvalidRequestError(
            f"{script}: the script does not parse ({why}), so its {DEFAULTS_NAME} cannot be read"
        ) from None


def script_defaults(script: Path) -> dict[str, Any]:
    """The `JOB_DEFAULTS` literal of `script` ({} without one); InvalidRequestError naming the file and
    line when the script does not parse or the literal is not a dict of a few job spec fields."""
    tree = _parse(Path(script))
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target: ast.expr = node.targets[0]
            value: ast.expr | None = node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name) or target.id != DEFAULTS_NAME or value is None:
            continue
        where = f"{script}:{node.lineno}: {DEFAULTS_NAME}"
        size = sum(1 for _ in zip(ast.walk(value), range(MAX_DEFAULT_VALUES + 1), strict=False))
        if size > MAX_DEFAULT_VALUES:
            raise InvalidRequestError(
                f"{where} holds more than {MAX_DEFAULT_VALUES:,} values; a job's defaults are a few fields"
            )
        try:
            values = ast.literal_eval(value)
        except (ValueError, TypeError, MemoryError, RecursionError):  # TypeError: {[1]: 2}, an unhashable key
            raise InvalidRequestError(
                f"{where} must be a literal dict of job spec fields (numbers, strings, lists; string keys)"
            ) from None
        if not isinstance(values, dict) or not all(isinstance(key, str) for key in values):
            raise InvalidRequestError(f"{where} must be a dict of job spec fields, got {type(values).__name__}")
        fixed = sorted(NOT_DEFAULTED & values.keys())
        if fixed:
            raise InvalidRequestError(f"{where} sets {fixed}: a job's identity is given when it is submitted")
        return values
    return {}
