"""Readers that turn raw dataset files (or a generator spec) into a validated `GraphData`.

`load_source("planetoid:/data/cora")` picks the reader by scheme; the readers are also
usable directly. The synthetic generator is imported only when asked for.
"""

from typing import Any

from graphtier.service.sources.edge_list import load_edge_list
from graphtier.service.sources.npz import load_npz
from graphtier.service.sources.ogb import load_ogb
from graphtier.service.sources.planetoid import load_planetoid
from graphtier.service.sources.registry import SOURCE_SCHEMES, load_source, reader_options
from graphtier.service.sources.split import ensure_split

__all__ = [
    "SOURCE_SCHEMES",
    "ensure_split",
    "generate_rmat",
    "load_edge_list",
    "load_npz",
    "load_ogb",
    "load_planetoid",
    "load_source",
    "reader_options",
]


def __getattr__(name: str) -> Any:
    if name == "generate_rmat":  # lazy, so this package imports even without the generator module
        from graphtier.service.sources.synthetic import generate_rmat

        return generate_rmat
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
