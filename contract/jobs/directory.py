"""A job's directory, `<runtime_dir>/jobs/<job_id>/`: the layout the daemon and a job's ranks share.

The daemon creates it and writes the job's spec and log there; the ranks write their
checkpoints into `checkpoints/` (one file per step, `ckpt-000000120.pt`) and, when one dies
of an exception, its cause into `failures/` (see `rank_failures`), which the daemon reads.
Each node's first rank writes the job's curves there -- `history.csv` and TensorBoard's event
files under `tensorboard/` (`contract.jobs.history`) -- and, when the job succeeds, its exported
model under `artifact/` (`contract.jobs.artifact`), which the daemon keeps under its retention.
An inference job's rank 0 writes its embeddings and predictions into `predictions/` (its
ranks keep each layer's rows in `layers/` while it runs); a link job that keeps its test
scores writes them into `link-scores/`.
"""

from __future__ import annotations

from pathlib import Path

JOBS_DIR = "jobs"
SPEC_FILE = "spec.json"
LOG_FILE = "job.log"
CHECKPOINTS_DIR = "checkpoints"
FAILURES_DIR = "failures"
HISTORY_CSV = "history.csv"
TENSORBOARD_DIR = "tensorboard"
CHECKPOINT_GLOB = "ckpt-*.pt"  # names carry the zero-padded step: sorted by name is oldest first
PREDICTIONS_DIR = "predictions"
LINK_SCORES_DIR = "link-scores"
LAYERS_DIR = "layers"


def job_directory(runtime_dir: Path, job_id: str) -> Path:
    """The directory of job `job_id` of the daemon whose runtime directory is `runtime_dir`."""
    return Path(runtime_dir) / JOBS_DIR / job_id


def job_spec_path(directory: Path) -> Path:
    """The spec the job was submitted with (JSON), in the job's directory."""
    return Path(directory) / SPEC_FILE


def job_log_path(directory: Path) -> Path:
    """The job's log: torchrun's and every rank's output."""
    return Path(directory) / LOG_FILE


def checkpoint_dir(directory: Path) -> Path:
    """Where the job's ranks write their checkpoints."""
    return Path(directory) / CHECKPOINTS_DIR


def history_csv_path(directory: Path) -> Path:
    """The job's per-epoch history as CSV (one row per epoch)."""
    return Path(directory) / HISTORY_CSV


def tensorboard_dir(directory: Path) -> Path:
    """Where the job's TensorBoard event files are (`tensorboard --logdir` it)."""
    return Path(directory) / TENSORBOARD_DIR


def checkpoint_file(checkpoints: Path, step: int) -> Path:
    """The checkpoint written after optimizer step `step`, in the directory `checkpoints`."""
    return Path(checkpoints) / f"ckpt-{step:09d}.pt"


def checkpoint_step(path: Path) -> int | None:
    """The optimizer step a checkpoint file was written after (from its name), or None for another file."""
    name = Path(path).name
    digits = name[len("ckpt-") : -len(".pt")]
    if not (name.startswith("ckpt-") and name.endswith(".pt") and len(digits) == 9 and digits.isdigit()):
        return None
    return int(digits)


def rank_failure_dir(directory: Path) -> Path:
    """Where a dying rank records why (see `rank_failures`)."""
    return Path(directory) / FAILURES_DIR


def predictions_dir(directory: Path) -> Path:
    """An inference job's output: npy shards and their manifest (`graphtier.contract.inference`)."""
    return Path(directory) / PREDICTIONS_DIR


def link_scores_dir(directory: Path) -> Path:
    """A link job's test pair scores and pairs (`graphtier.contract.inference.LinkScores`)."""
    return Path(directory) / LINK_SCORES_DIR


def layer_rows_dir(directory: Path) -> Path:
    """An inference job's layer rows while it runs (see `launcher/runtime/layerwise.py`)."""
    return Path(directory) / LAYERS_DIR
