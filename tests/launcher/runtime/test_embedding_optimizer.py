"""The featureless types' embeddings and their own row-wise AdamW: only the rows a batch touched are
updated (and decayed), two torchrun ranks keep identical tables, the state stays out of exports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from embedding_optimizer_script import DECAY, LR, NUM_NODES, STEPS, WIDTH, step_ids, step_loss
from test_runtime_torchrun import _free_port

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema, NeighbourMean, NodeTypeInfo, RelationInfo, check_neighbour_means
from graphtier.launcher.runtime.embedding_optimizer import EmbeddingOptimizer
from graphtier.launcher.runtime.exported_model import snapshot
from graphtier.launcher.runtime.models import build_hetero_model
from graphtier.launcher.runtime.models.featureless import FeaturelessOptions, SparseEmbedding, rank_local_state
from graphtier.launcher.runtime.models.rgcn import hetero_param_groups

SCRIPT = Path(__file__).with_name("embedding_optimizer_script.py")


def _adamw_reference(steps: list[list[torch.Tensor]]) -> torch.Tensor:
    """A dense AdamW on a plain tensor, rows moved only when touched: the optimizer's update written out."""
    weight, m, v = torch.zeros(NUM_NODES, WIDTH), torch.zeros(NUM_NODES, WIDTH), torch.zeros(NUM_NODES, WIDTH)
    count = torch.zeros(NUM_NODES)
    for rank_ids in steps:
        grad = torch.zeros(NUM_NODES, WIDTH)
        for ids in rank_ids:
            rows = weight[ids].clone().requires_grad_(True)
            step_loss(rows, ids).backward()
            grad.index_add_(0, ids, rows.grad)
        grad /= len(rank_ids)
        touched = torch.unique(torch.cat(rank_ids))
        count[touched] += 1
        g = grad[touched]
        m[touched] = 0.9 * m[touched] + 0.1 * g
        v[touched] = 0.999 * v[touched] + 0.001 * g * g
        t = count[touched].unsqueeze(1)
        update = (m[touched] / (1 - 0.9**t)) / ((v[touched] / (1 - 0.999**t)).sqrt() + 1e-8)
        weight[touched] = weight[touched] * (1 - LR * DECAY) - LR * update
    return weight


def test_a_step_updates_and_decays_only_the_rows_the_batch_touched():
    table = SparseEmbedding(NUM_NODES, WIDTH)
    optimizer = EmbeddingOptimizer([("table", table)], lr=LR, weight_decay=DECAY)
    with torch.no_grad():
        table.weight.fill_(1.0)  # decay shows on every row it reaches
    ids = torch.tensor([3, 7, 7, 20])
    optimizer.zero_grad()
    (table(ids) * 0).sum().backward()  # a zero gradient: the touched rows move by the decay alone
    assert table.weight.grad is not None and table.weight.grad.is_sparse
    assert optimizer.step() == 3
    touched = torch.zeros(NUM_NODES, dtype=torch.bool)
    touched[ids] = True
    assert torch.allclose(table.weight[touched], torch.full((3, WIDTH), 1 - LR * DECAY))
    assert torch.equal(table.weight[~touched], torch.ones(NUM_NODES - 3, WIDTH))  # untouched: not read, not decayed
    assert table.steps[touched].tolist() == [1, 1, 1] and int(table.steps[~touched].sum()) == 0

    with torch.no_grad():
        table.weight.zero_()
    expected = _adamw_reference([[step_ids(s, 0)] for s in range(STEPS)])
    table.steps.zero_(), table.exp_avg.zero_(), table.exp_avg_sq.zero_()
    for step in range(STEPS):
        ids = step_ids(step, 0)
        optimizer.zero_grad()
        step_loss(table(ids), ids).backward()
        optimizer.step()
    assert torch.allclose(table.weight.detach(), expected, atol=1e-6)


def test_bad_settings_are_refused_by_name():
    table = SparseEmbedding(4, 2)
    with pytest.raises(GraphtierError, match=r"embedding_lr must be > 0"):
        EmbeddingOptimizer([("t", table)], lr=0.0)
    with pytest.raises(GraphtierError, match=r"embedding_weight_decay must be in \[0, 1\]"):
        EmbeddingOptimizer([("t", table)], lr=0.1, weight_decay=1.5)
    with pytest.raises(GraphtierError, match=r"embedding_dropout must be in \[0, 1\)"):
        FeaturelessOptions(dropout=1.0)
    with pytest.raises(GraphtierError, match=r"featureless_init must be auto, zero or neighbour-mean"):
        FeaturelessOptions(init="mean")  # type: ignore[arg-type]  # a value it refuses, on purpose


def _schema(featured: bool) -> HeteroSchema:
    return HeteroSchema(
        node_types=[
            NodeTypeInfo(name="book", count=5, offset=0, feature_dim=3 if featured else 0),
            NodeTypeInfo(name="film", count=4, offset=5, feature_dim=0),
        ],
        relations=[RelationInfo(head="book", name="about", tail="film", num_edges=6)],
        target_type="book",
    )


def test_neighbour_mean_is_refused_naming_the_types_where_nothing_has_means():
    with pytest.raises(GraphtierError, match=r"featureless type\(s\) book, film have no neighbour means: no node type"):
        check_neighbour_means(_schema(featured=False))
    with pytest.raises(GraphtierError, match=r"featureless type\(s\) film have no neighbour means"):
        build_hetero_model("rgcn", _schema(featured=True), 8, 2, 1, featureless=FeaturelessOptions("neighbour-mean"))


def test_auto_starts_from_the_means_where_there_are_means_and_at_zero_elsewhere():
    auto = FeaturelessOptions("auto")  # the jobs' default
    nothing_featured = build_hetero_model("rgcn", _schema(featured=False), 8, 2, 1, featureless=auto)  # accepted
    assert not nothing_featured.input.neighbour and set(nothing_featured.input.embed) == {"book", "film"}
    schema = _schema(featured=True)
    film = schema.type_named("film").model_copy(
        update={
            "neighbour_means": [NeighbourMean(relation="book-about-film", source_type="book", feature_dim=3, array="m")]
        }
    )
    schema = schema.model_copy(update={"node_types": [schema.node_types[0], film]})
    for init, starts in (("auto", True), ("neighbour-mean", True), ("zero", False)):
        model = build_hetero_model("rgcn", schema, 8, 2, 1, featureless=FeaturelessOptions(init))
        assert ("film" in model.input.neighbour) is starts, init
        # attention models normalise learned rows that are a type's whole input, not a residual beside means
        hgt = build_hetero_model("hgt", schema, 8, 2, 1, featureless=FeaturelessOptions(init))
        assert ("film" in hgt.input.embed_norm) is not starts and "film" in hgt.input.embed, init
        assert not model.input.embed_norm  # R-GCN: no normalisation
        rgat = build_hetero_model("rgat", schema, 8, 2, 1, featureless=FeaturelessOptions(init))
        assert not rgat.input.embed_norm and "book" in rgat.input.norm  # R-GAT: its featured types only


@pytest.mark.long  # two interpreters importing torch: 3 s or more on 2 cores
def test_normalised_embeddings_keep_one_parameter_order_in_every_process():
    """DDP pairs the ranks' gradients by parameter order: it must not follow string hashing, which
    differs per process (ranks' LayerNorms of the same shape would be averaged across types)."""
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from test_embedding_optimizer import _schema\n"
        "from graphtier.launcher.runtime.models import build_hetero_model\n"
        "model = build_hetero_model('hgt', _schema(featured=False), 8, 2, 1)\n"
        "print([name for name, _ in model.named_parameters()])\n"
    )
    orders = {
        subprocess.run(
            [sys.executable, "-c", script, str(Path(__file__).parent)],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (1, 2)  # string hashes that ordered book and film differently
    }
    assert len(orders) == 1, orders
    assert "input.embed_norm.book.weight" in orders.pop()


def test_row_mode_embeddings_leave_the_dense_optimizer_ddp_and_the_export():
    model = build_hetero_model("rgcn", _schema(featured=True), 8, 2, 2)
    dense = hetero_param_groups(model, 0.01)
    assert len(dense) == 2 and dense[1]["lr"] == pytest.approx(0.001)  # a script's optimizer: today's groups
    optimizer = EmbeddingOptimizer.for_model(model, lr=0.01)
    assert optimizer is not None and [name for name, _ in optimizer.tables] == ["input.embed.film"]
    groups = hetero_param_groups(model, 0.01)
    assert len(groups) == 1 and all(p is not model.input.embed["film"].weight for p in groups[0]["params"])
    assert rank_local_state(model) == [f"input.embed.film.{n}" for n in ("weight", "exp_avg", "exp_avg_sq", "steps")]
    state = model.state_dict()
    assert "input.embed.film.exp_avg" in state  # checkpointed with the model
    assert "input.embed.film.weight" in snapshot(model) and "input.embed.film.exp_avg" not in snapshot(model)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_two_ranks_keep_identical_embeddings_updated_as_one_process_would(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "--rdzv-id", tmp_path.name,
           str(SCRIPT), str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    assert torch.equal(ranks[0]["weight"], ranks[1]["weight"])  # bit for bit: the same rows, the same update
    assert torch.equal(ranks[0]["steps"], ranks[1]["steps"])
    expected = _adamw_reference([[step_ids(s, 0), step_ids(s, 1)] for s in range(STEPS)])
    assert torch.allclose(ranks[0]["weight"], expected, atol=1e-6)
    untouched = ranks[0]["steps"] == 0
    assert bool(untouched.any()) and not bool(ranks[0]["weight"][untouched].any())  # never read, never moved
