"""MkDocs hook: lets mkdocstrings find `graphtier.*` where the import names map onto other folders.

The import names are mapped onto top-level folders (`graphtier.service` is `service/`, see
setup.py), and an editable install resolves them with a meta-path finder, which griffe (the
docstring collector) does not follow. Before the build this hook makes a temporary tree,
`graphtier/<name>` -> the folder Python imports `graphtier.<name>` from, beside the modules of the
package `graphtier` itself (`graphtier/`), and gives it to the Python handler as its search path;
the tree is removed when the build ends.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

SUBPACKAGES = ("contract", "launcher", "service", "v1")
_tree: Path | None = None


@event_priority(100)  # before mkdocstrings reads its handler options
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    on_shutdown()  # `mkdocs serve` reloads the config on every rebuild: one tree at a time
    global _tree
    _tree = Path(tempfile.mkdtemp(prefix="graphtier-api-"))
    package = _tree / "graphtier"
    package.mkdir()
    top = importlib.util.find_spec("graphtier")
    for module in Path(list(top.submodule_search_locations)[0]).glob("*.py"):
        (package / module.name).symlink_to(module)
    for name in SUBPACKAGES:
        spec = importlib.util.find_spec(f"graphtier.{name}")
        if spec is None or not spec.submodule_search_locations:
            raise PluginError(f"docs: graphtier.{name} is not importable: install the package (pip install -e .)")
        (package / name).symlink_to(Path(list(spec.submodule_search_locations)[0]), target_is_directory=True)
    handler = config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})
    handler["paths"] = [str(_tree)]
    return config


def on_shutdown() -> None:
    global _tree
    if _tree is not None:
        shutil.rmtree(_tree, ignore_errors=True)
        _tree = None
