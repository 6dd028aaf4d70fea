"""The options several `graphtier` commands share, defined once so their flags and help agree."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

RuntimeDirOption = Annotated[
    Path | None, typer.Option("--runtime-dir", help="the daemon's runtime directory (default $GRAPHTIER_HOME/run)")
]
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output on stdout")]


def runtime_directory(runtime_dir: Path | None) -> Path | None:
    """`--runtime-dir` made absolute (the daemon may resolve it from another working directory);
    None keeps the client's default lookup."""
    return Path(os.path.abspath(runtime_dir)) if runtime_dir else None
