"""The tiered feature gather: tier layout (`FeatureTiers`), exact per-source accounting
(`TrafficCounts`) and `tiered_gather`, native (C++) or an identical torch fallback."""

from graphtier.contract.traffic import SOURCES, SourceTraffic, TrafficCounts
from graphtier.service.gather.tiered_gather import tiered_gather
from graphtier.service.gather.tiers import FeatureTiers

__all__ = ["SOURCES", "FeatureTiers", "SourceTraffic", "TrafficCounts", "tiered_gather"]
