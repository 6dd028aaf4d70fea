"""The tiering report's figure: cumulative read share against fraction of nodes (the seed's Figure 7).

Drawn with matplotlib, the optional `plots` extra: the report itself needs none of it, so an
install without it (the container image) writes the report and says how to get the figure.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from graphtier.service.tiering.report import TieringReport


class PlotsNotInstalled(RuntimeError):
    """matplotlib (the `plots` extra) is not installed, so the figure cannot be drawn."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"figure skipped ({path}): matplotlib is not installed; pip install 'graphtier[plots]' draws it"
        )


def write_cumulative_access_png(report: TieringReport, path: Path) -> Path:
    """Draw the figure into `path` (written whole or not at all); PlotsNotInstalled without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        raise PlotsNotInstalled(path) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for outcome in report.outcomes:
        share = outcome.cumulative_share
        xs = [i / (len(share) - 1) for i in range(len(share))]
        style: dict[str, Any] = {"color": "black", "linestyle": "--"} if outcome.score == "oracle" else {}
        ax.plot(xs, share, label=f"{outcome.score} ({outcome.hit_ratio:.1%} at budget)", **style)
    budget_fraction = report.budget_rows / report.num_nodes
    ax.axvline(budget_fraction, color="grey", linewidth=0.8)
    ax.set_xlabel("fraction of nodes, hottest first")
    ax.set_ylabel("cumulative share of feature reads")
    ax.set_title(
        f"{report.dataset}: fanout {','.join(map(str, report.fanouts))}, batch {report.batch_size}, "
        f"{report.epochs} epoch(s)"
    )
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    if path.is_dir():
        plt.close(fig)
        raise IsADirectoryError(errno.EISDIR, "a directory, not a file to write the figure to", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fig.savefig(tmp, format="png")
        tmp.replace(path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)  # gone once renamed; left by nothing that failed
    return path
