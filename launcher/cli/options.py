"""The options several `graphtier` commands share, defined once so their flags and help agree."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from graphtier.launcher.cli.plain import runtime_directory  # noqa: F401 (re-exported beside the option)

RuntimeDirOption = Annotated[
    Path | None, typer.Option("--runtime-dir", help="the daemon's runtime directory (default $GRAPHTIER_HOME/run)")
]
JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output on stdout")]
