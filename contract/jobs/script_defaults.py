"""A training script's own job defaults: a module-level `JOB_DEFAULTS = {...}` literal.

A script that ships its hyper-parameters (`examples/`) declares them once:

    JOB_DEFAULTS = {"fanouts": [25, 10], "batch_size": 64, "epochs": 30, "lr": 0.003}
    ...
    with graphtier.connect(args.dataset, **JOB_DEFAULTS) as job:     # a launch of your own

and `graphtier job submit --script train.py` takes the same values for every field the command
line or YAML spec leaves unset, so the script trains alike either way. The file is parsed, never
run (the literal is read with `ast.literal_eval`); the job's identity -- dataset, script, args,
nodes -- cannot be defaulted.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from graphtier.contract.errors import InvalidRequestError

DEFAULTS_NAME = "JOB_DEFAULTS"
NOT_DEFAULTED = frozenset({"dataset", "script", "args", "nodes", "nnodes", "name"})


def script_defaults(script: Path) -> dict[str, Any]:
    """The `JOB_DEFAULTS` literal of `script` ({} without one); InvalidRequestError naming the file and
    line when it is not a literal dict of job spec fields."""
    try:
        tree = ast.parse(Path(script).read_bytes(), filename=str(script))
    except (OSError, SyntaxError, ValueError):
        return {}  # the script's own problem; it surfaces when the script runs
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
        try:
            values = ast.literal_eval(value)
        except ValueError:
            raise InvalidRequestError(f"{where} must be a literal dict (numbers, strings, lists)") from None
        if not isinstance(values, dict) or not all(isinstance(key, str) for key in values):
            raise InvalidRequestError(f"{where} must be a dict of job spec fields, got {type(values).__name__}")
        fixed = sorted(NOT_DEFAULTED & values.keys())
        if fixed:
            raise InvalidRequestError(f"{where} sets {fixed}: a job's identity is given when it is submitted")
        return values
    return {}
