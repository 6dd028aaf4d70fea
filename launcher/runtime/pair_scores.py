"""Scores of candidate pairs from a link model's inference output: `graphtier job score ID --pairs FILE`.

An inference job of a link model (`job predict` of a link job) leaves every node's embeddings in the
source's ids; a pair is scored by the trained model's decoder from its two ends' embeddings -- and,
for a decoder that reads them (mlp+cn, mlp+cn+aa), the pair's common-neighbour features over the
training graph -- exactly as the job's evaluation scores its test pairs. Pairs come in the source's
ids (on a heterogeneous graph: the target relation's head type's and tail type's own ids), one pair a line
(`u v`) or as an [P, 2] integer .npy; the scores are the decoder's logits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.jobs.directory import job_directory, predictions_dir
from graphtier.launcher.runtime.inference_output import read_manifest, read_output
from graphtier.launcher.runtime.link_model import LinkModel
from graphtier.launcher.runtime.trained_model import load_trained_model
from graphtier.service.graph.common_neighbours import PairStructure
from graphtier.service.prepared import PreparedDataset
from graphtier.service.prepared.digests import dataset_version
from graphtier.service.prepared.edge_split import link_array
from graphtier.service.sampling.link import pair_end_types

MAX_LISTED = 5


def read_pairs_file(path: Path) -> Tensor:
    """int64 [P, 2] pairs from `path`: an integer .npy of shape [P, 2], or text with two ids a line."""
    path = Path(path)
    if not path.is_file():
        raise GraphtierError(f"pairs file {path}: {'not a file' if path.exists() else 'no such file'}")
    if path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise GraphtierError(f"pairs file {path}: not a readable .npy ({exc})") from None
        if array.ndim != 2 or array.shape[1] != 2 or not np.issubdtype(array.dtype, np.integer):
            raise GraphtierError(f"pairs file {path}: holds {array.dtype} {array.shape}; give an integer [P, 2] array")
        if array.size == 0:
            raise GraphtierError(f"pairs file {path}: holds no pairs")
        return torch.from_numpy(array.astype(np.int64))
    pairs = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        words = line.split()
        if not words:
            continue
        try:
            if len(words) != 2:
                raise ValueError
            pairs.append((int(words[0]), int(words[1])))
        except ValueError:
            raise GraphtierError(f"pairs file {path}, line {number}: {line!r} is not two integer ids") from None
    if not pairs:
        raise GraphtierError(f"pairs file {path}: holds no pairs")
    return torch.tensor(pairs, dtype=torch.int64)


def _rows_of(ids: np.ndarray, wanted: Tensor, what: str) -> Tensor:
    """Positions in the output's `ids` of source ids `wanted`; GraphtierError naming ids it does not hold."""
    known = torch.from_numpy(np.asarray(ids, dtype=np.int64))
    order = torch.argsort(known)
    position = torch.searchsorted(known[order], wanted.contiguous()).clamp(max=max(known.numel() - 1, 0))
    found = known[order][position] == wanted
    if not bool(found.all()):
        raise GraphtierError(f"{what}: ids {wanted[~found][:MAX_LISTED].tolist()} have no row in the inference output")
    return order[position]


@torch.no_grad()
def score_pairs(runtime_dir: Path, dataset_root: Path, job_id: str, pairs: Tensor) -> Tensor:
    """float32 [P] scores of `pairs` (the source's ids) by inference job `job_id`'s link model (module docstring)."""
    out = predictions_dir(job_directory(runtime_dir, job_id))
    manifest = read_manifest(out)
    trained_info = manifest.trained
    if trained_info is None or trained_info.task != "link":
        what = "a script's own model" if trained_info is None else f"job {trained_info.job_id}'s classifier"
        raise GraphtierError(f"{out} holds {what}'s rows: pairs are scored by a link model's inference output")
    prepared = PreparedDataset.open(manifest.dataset, dataset_root)
    if (dataset_version(prepared.directory) or "") != manifest.dataset_version:
        raise GraphtierError(
            f"dataset {manifest.dataset!r} was prepared again since job {job_id} ran: its ids no longer line up"
        )
    schema = prepared.manifest.hetero
    trained = load_trained_model(job_directory(runtime_dir, trained_info.job_id), torch.device("cpu"))
    decoder = trained.module.decoder
    assert isinstance(decoder, nn.Module)  # a link model's
    if schema is None:
        arrays = read_output(out)
        rows = _rows_of(arrays["ids"], pairs.reshape(-1), "pairs").view(-1, 2)
        z = torch.from_numpy(np.ascontiguousarray(arrays["embeddings"]))
        features = None
        if isinstance(trained.module, LinkModel) and trained.module.reads_pair_features:
            old = (
                pairs
                if not prepared.has("original_ids")
                else _rows_of(prepared.array("original_ids").numpy(), pairs.reshape(-1), "pairs").view(-1, 2)
            )
            features = PairStructure(prepared.graph).features(prepared.old_to_new[old])
        return decoder(z[rows[:, 0]], z[rows[:, 1]], features).float()
    head, tail = pair_end_types(schema, prepared.array(link_array("train")))
    ends = []
    for column, info in ((0, head), (1, tail)):
        arrays = read_output(out, info.name)
        rows = _rows_of(arrays["ids"], pairs[:, column], f"pairs' {info.name} ends")
        ends.append(torch.from_numpy(np.ascontiguousarray(arrays["embeddings"]))[rows])
    return decoder(ends[0], ends[1]).float()
