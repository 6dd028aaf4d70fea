"""MkDocs hook: lets mkdocstrings find `graphtier.*` where the import names map onto other folders.

The import names are mapped onto top-level folders (`graphtier.service` is `service/`, see
setup.py), and an editable install resolves them with a meta-path finder, which griffe (the
docstring collector) does not follow. Before the build this hook makes a temporary tree,
`graphtier/<name>` -> the folder Python imports `graphtier.<name>` from, beside the modules of the
package `graphtier` itself (`graphtier/`), and gives it to the Python handler as its search path;
the tree is removed when the build ends.

Where the package is not installed (the site built from a checkout, without compiling the ops an
install builds), the folders are the checkout's own, next to mkdocs.yml, and the tree is put on
`sys.path` too, so the pages' other hooks import `graphtier.*` from it (nothing they import needs
the compiled ops).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.plugins import event_priority

# graphtier.<name> -> its folder in a checkout, as setup.py maps them ("" is the package itself)
CHECKOUT_FOLDERS = {
    "": "graphtier",
    "contract": "contract",
    "launcher": "launcher",
    "service": "service",
    "v1": "proto/graphtier/v1",
}
_tree: Path | None = None


def _installed_folders() -> dict[str, Path] | None:
    """Where the installed package imports each part from; None when graphtier is not installed."""
    if importlib.util.find_spec("graphtier") is None:
        return None
    folders = {}
    for name in CHECKOUT_FOLDERS:
        spec = importlib.util.find_spec(f"graphtier.{name}" if name else "graphtier")
        if spec is None or not spec.submodule_search_locations:
            return None
        folders[name] = Path(list(spec.submodule_search_locations)[0])
    return folders


@event_priority(100)  # before mkdocstrings reads its handler options
def on_config(config: MkDocsConfig) -> MkDocsConfig:
    on_shutdown()  # `mkdocs serve` reloads the config on every rebuild: one tree at a time
    global _tree
    _tree = Path(tempfile.mkdtemp(prefix="graphtier-api-"))
    folders = _installed_folders()
    if folders is None:
        checkout = Path(config.config_file_path).resolve().parent
        folders = {name: checkout / folder for name, folder in CHECKOUT_FOLDERS.items()}
        sys.path.insert(0, str(_tree))
    package = _tree / "graphtier"
    package.mkdir()
    for module in folders[""].glob("*.py"):
        (package / module.name).symlink_to(module)
    for name, folder in folders.items():
        if name:
            (package / name).symlink_to(folder, target_is_directory=True)
    handler = config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})
    handler["paths"] = [str(_tree)]
    return config


def on_shutdown() -> None:
    global _tree
    if _tree is not None:
        if str(_tree) in sys.path:
            sys.path.remove(str(_tree))
        shutil.rmtree(_tree, ignore_errors=True)
        _tree = None
