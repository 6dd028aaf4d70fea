"""A link job's kept test scores (`link_scores: true`): written at its best validation epoch, read back.

`write_link_scores` saves the test split's `SplitScores` -- the positives' and the negative pool's
scores, each positive's MRR tails and their scores -- as npy files with every pair in the source's
ids, and a manifest (`graphtier.contract.inference.LinkScores`) naming the files and the figures
the job reported from them. `read_link_scores` maps them back. With them anyone can recompute the
job's Hits@K and MRR, e.g. with OGB's `Evaluator`:

    manifest, arrays = read_link_scores(job_dir / "link-scores")
    Evaluator("ogbl-collab").eval({"y_pred_pos": torch.from_numpy(arrays["positive_scores"]),
                                   "y_pred_neg": torch.from_numpy(arrays["negative_scores"])})  # hits@50
    Evaluator("ogbl-citation2").eval({"y_pred_pos": ..., "y_pred_neg": torch.from_numpy(arrays["tail_scores"])})
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
from torch import Tensor

from graphtier.contract.errors import GraphtierError
from graphtier.contract.inference import MANIFEST_FILE, LinkScores
from graphtier.launcher.runtime.link_eval import SplitScores

ARRAYS = ("positive_scores", "positive_pairs", "negative_scores", "negative_pairs", "tail_scores", "tails")


def write_link_scores(
    directory: Path,
    scores: SplitScores,
    *,
    epoch: int,
    hits_k: int,
    metrics: dict[str, float],
    source_ids: Callable[[Tensor], Tensor],
    split: str = "test",
) -> Path:
    """Write `scores` of `split` (module docstring); `source_ids(ids)` maps graphtier ids to the source's.
    The manifest is written last, so a reader that finds it finds every array."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    values = {
        "positive_scores": scores.positive.float(),
        "positive_pairs": source_ids(scores.positive_pairs.reshape(-1)).reshape(scores.positive_pairs.shape),
        "negative_scores": scores.negative.float(),
        "negative_pairs": source_ids(scores.negative_pairs.reshape(-1)).reshape(scores.negative_pairs.shape),
        "tail_scores": scores.tail_scores.float(),
        "tails": source_ids(scores.tails.reshape(-1)).reshape(scores.tails.shape),
    }
    files = {}
    for name, value in values.items():
        files[name] = f"{split}_{name}.npy"
        np.save(directory / files[name], value.cpu().numpy())
    manifest = LinkScores(split=split, epoch=epoch, hits_k=hits_k, metrics=metrics, arrays=files)
    path = directory / MANIFEST_FILE
    partial = path.with_name(f".{MANIFEST_FILE}.{os.getpid()}")
    partial.write_text(manifest.model_dump_json(indent=2))
    os.replace(partial, path)
    return path


def read_link_scores(directory: Path) -> tuple[LinkScores, dict[str, np.ndarray]]:
    """The manifest and arrays of a link job's kept scores; GraphtierError naming the folder when absent."""
    path = Path(directory) / MANIFEST_FILE
    try:
        manifest = LinkScores.model_validate_json(path.read_text())
    except OSError as exc:
        raise GraphtierError(
            f"{path}: no kept link scores ({exc.strerror}); submit the link job with --link-scores"
        ) from None
    except ValueError as exc:
        raise GraphtierError(f"{path}: not a link scores manifest ({exc})") from None
    return manifest, {name: np.load(Path(directory) / file) for name, file in manifest.arrays.items()}
