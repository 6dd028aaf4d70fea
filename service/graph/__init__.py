"""In-memory graph types shared by sources, scoring, preparation and sampling."""

from graphtier.service.graph.csc import CSCGraph, build_csc
from graphtier.service.graph.graph_data import GraphData

__all__ = ["CSCGraph", "GraphData", "build_csc"]
