"""The tiering report: how well each hotness score would place rows, measured by replaying epochs."""

from graphtier.service.tiering.replay import AccessReplay, replay_access_counts
from graphtier.service.tiering.report import ScoreOutcome, TieringReport, build_tiering_report
from graphtier.service.tiering.storage_outlook import StorageOutlook, WindowOutcome

__all__ = [
    "AccessReplay",
    "ScoreOutcome",
    "StorageOutlook",
    "TieringReport",
    "WindowOutcome",
    "build_tiering_report",
    "replay_access_counts",
]
