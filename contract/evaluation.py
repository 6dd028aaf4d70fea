"""A job's evaluation at its best validation epoch: the figures papers report (model selection on
validation), carried from the trainer ranks' progress reports to the job's result and the status page."""

from __future__ import annotations

from dataclasses import dataclass, field

NODE_SPLIT_FIGURES = {"val": "val_accuracy", "test": "test_accuracy"}  # a node job's evaluated split -> its figure


@dataclass(frozen=True)
class BestEvaluation:
    """The evaluation at the epoch of the highest validation figure (ties: the earlier epoch), the figures
    papers report beside the last epoch's. `selected_by` names that figure: val_accuracy (node
    classification) or val_hits@50 (link prediction); `metrics` holds a link job's figures by name."""

    epoch: int = 0
    selected_by: str = ""
    val_accuracy: float = 0.0
    test_accuracy: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, epoch: int, evaluation: dict[str, float], selected_by: str) -> BestEvaluation:
        """From one evaluation as a trainer computes it: accuracy by split ("val", "test") for node
        classification, metrics by name (val_auc, test_hits@50, ...) for link prediction; `selected_by`
        is the key that picked it, named as the result names it."""
        return cls(
            epoch=epoch,
            selected_by=NODE_SPLIT_FIGURES.get(selected_by, selected_by),
            val_accuracy=evaluation.get("val", 0.0),
            test_accuracy=evaluation.get("test", 0.0),
            metrics={k: v for k, v in evaluation.items() if k not in NODE_SPLIT_FIGURES},
        )
