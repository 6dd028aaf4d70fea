"""What runs inside a torchrun rank: built-in models over sampled blocks, the DDP train loop,
checkpoints, evaluation, and an in-process batch source.

`pyg_stores` (PyG FeatureStore/GraphStore adapters) is imported explicitly, since it needs
torch_geometric.
"""

from graphtier.launcher.runtime.checkpoint import TrainPosition, latest_checkpoint, load_checkpoint, save_checkpoint
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.evaluation import evaluate_splits
from graphtier.launcher.runtime.local_batches import LocalBatchSource
from graphtier.launcher.runtime.models import MODEL_NAMES, ModelName, build_model
from graphtier.launcher.runtime.train_config import TrainConfig, TrainProgress, TrainResult
from graphtier.launcher.runtime.train_loop import run_training
from graphtier.service.pipeline.batch import Batch

__all__ = [
    "MODEL_NAMES",
    "Batch",
    "DistContext",
    "LocalBatchSource",
    "ModelName",
    "TrainConfig",
    "TrainPosition",
    "TrainProgress",
    "TrainResult",
    "build_model",
    "evaluate_splits",
    "latest_checkpoint",
    "load_checkpoint",
    "run_training",
    "save_checkpoint",
]
