"""Edge splits for link prediction at prepare: val and test edges leave the graph, by pair."""

import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest
import torch

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.errors import DatasetSourceError
from graphtier.service.prepared.edge_split import EdgeSplitSpec, split_edges
from graphtier.service.sources import load_source
from graphtier.service.store import SharedDatasetStore, attach_dataset
from graphtier.service.store.wire import DatasetLayoutInfo, layout_from_proto, layout_to_proto


def _edge_keys(ds):
    graph = ds.graph
    dst = graph.dst_of_edges()
    return set((graph.row * graph.num_nodes + dst).tolist())


def test_cora_split_removes_val_and_test_pairs_both_ways(cora_link):
    split = cora_link.manifest.link_split
    assert split["pairs"] == "undirected" and split["node_inputs"] == "features"
    sizes = split["sizes"]
    assert sizes == {"train": 4488, "val": 263, "test": 527}  # Cora's 5278 undirected pairs, floor(5%), floor(10%)
    n, edges = cora_link.manifest.num_nodes, _edge_keys(cora_link)
    assert cora_link.manifest.num_edges == 2 * sizes["train"]  # the graph is the train pairs, both ways
    for name in ("link_val", "link_test"):
        pairs = cora_link.array(name)
        assert pairs.shape == (sizes[name.removeprefix("link_")], 2)
        forward = (pairs[:, 0] * n + pairs[:, 1]).tolist()
        backward = (pairs[:, 1] * n + pairs[:, 0]).tolist()
        assert not edges.intersection(forward) and not edges.intersection(backward), name
    train = cora_link.array("link_train")
    assert set((train[:, 0] * n + train[:, 1]).tolist()) <= edges
    assert set((train[:, 1] * n + train[:, 0]).tolist()) <= edges
    positives = {
        tuple(sorted(p)) for name in ("link_train", "link_val", "link_test") for p in cora_link.array(name).tolist()
    }
    assert len(positives) == sum(sizes.values())  # disjoint splits
    for name in ("link_val_neg", "link_test_neg"):
        negatives = cora_link.array(name)
        assert negatives.shape == (10_000, 2)
        assert bool((negatives[:, 0] != negatives[:, 1]).all())
        assert not positives.intersection(tuple(sorted(p)) for p in negatives.tolist())


def test_split_is_seeded_and_directed_graphs_split_by_edge(shared_datasets):
    data = load_source(f"planetoid:{shared_datasets / 'planetoid_cora'}")
    spec = EdgeSplitSpec(fractions=(0.8, 0.1, 0.1), seed=7, eval_negatives=100)
    one = split_edges(data.num_nodes, data.src, data.dst, spec, undirected=False)
    two = split_edges(data.num_nodes, data.src, data.dst, spec, undirected=False)
    assert one.undirected_pairs  # Cora's edge list holds every reverse: split by pair
    assert all(torch.equal(one.pairs[s], two.pairs[s]) for s in one.pairs)
    other = split_edges(data.num_nodes, data.src, data.dst, spec.model_copy(update={"seed": 8}), undirected=False)
    assert not torch.equal(one.pairs["test"], other.pairs["test"])
    keep = data.src < data.dst  # one direction only: a directed graph, split edge by edge
    directed = split_edges(data.num_nodes, data.src[keep], data.dst[keep], spec, undirected=False)
    assert not directed.undirected_pairs
    src, dst = directed.message_edges()
    assert src.numel() == directed.pairs["train"].shape[0]


@pytest.mark.parametrize(
    ("text", "problem"),
    [("0.9,0.2", "three shares"), ("0.5,0.2,0.2", "sum to 1"), ("0,0.5,0.5", "no train edges"), ("a,b,c", "0.85")],
)
def test_bad_edge_split_is_refused_naming_the_flag(text, problem):
    with pytest.raises(ValueError, match=problem):
        EdgeSplitSpec.parse(text)


def test_a_split_too_small_for_its_shares_names_the_graph():
    src, dst = torch.tensor([0, 1]), torch.tensor([1, 2])
    with pytest.raises(DatasetSourceError, match="leaves a split empty"):
        split_edges(3, src, dst, EdgeSplitSpec(fractions=(0.8, 0.1, 0.1)), undirected=True, origin="tiny")


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_cli_bad_edge_split_exits_2_and_writes_nothing(tmp_path, shared_datasets):
    result = subprocess.run(
        [sys.executable, "-m", "graphtier.launcher.cli", "dataset", "prepare",
         f"planetoid:{shared_datasets / 'planetoid_cora'}", "--name", "c", "--out", str(tmp_path),
         "--edge-split", "0.9,0.2,0.2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--edge-split '0.9,0.2,0.2'" in result.stderr and "sum to 1" in result.stderr
    assert not list(tmp_path.iterdir())


def test_loaded_dataset_carries_its_pairs_across_the_wire(cora_link):
    from graphtier.service.placement import PlacementPlan, TierBudgets

    n, row_bytes = cora_link.manifest.num_nodes, cora_link.manifest.feature_row_bytes
    plan = PlacementPlan.from_budgets(TierBudgets(host_bytes=n * row_bytes), num_nodes=n, row_bytes=row_bytes)
    with SharedDatasetStore(cora_link, plan) as store:
        handle = store.handle
        assert sorted(handle.link_pairs) == ["link_test", "link_test_neg", "link_train", "link_val", "link_val_neg"]
        layout = DatasetLayoutInfo(
            handle=handle, tier_sizes=[], num_edges=cora_link.manifest.num_edges, feature_dim=1433, num_classes=7,
            feature_bytes=n * row_bytes, structure_bytes=0, device_bytes_per_device=0, simulated_devices=False,
            owner_pid=os.getpid(), loaded_at=datetime.now(timezone.utc), budgets=BudgetSpec(),
        )  # fmt: skip
        assert layout_from_proto(layout_to_proto(layout)).handle.link_pairs == handle.link_pairs
        attached = attach_dataset(handle)
        for name, pairs in attached.link_pairs.items():
            assert torch.equal(pairs, cora_link.array(name)), name
        attached.detach()
        del attached


def _prepare_from_files(tmp_path, files: dict[str, str]):
    from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset

    ring = "".join(f"{10 * i} {10 * ((i + 1) % 40)}\n{10 * i} {10 * ((i + 7) % 40)}\n" for i in range(40))
    (tmp_path / "g.txt").write_text(ring)  # ids 0, 10, ..., 390: the source renumbers them
    split = tmp_path / "split"
    split.mkdir(exist_ok=True)
    for name, text in files.items():
        (split / name).write_text(text)
    prepare_dataset(
        PrepareConfig(
            source=f"edges:{tmp_path / 'g.txt'}",
            name="ring",
            undirected=True,
            edge_split=EdgeSplitSpec.parse(f"files:{split}", eval_negatives=50),
            root=tmp_path / "out",
        )
    )
    return PreparedDataset.open("ring", tmp_path / "out")


def test_split_read_from_files_maps_ids_and_removes_val_and_test(tmp_path):
    ds = _prepare_from_files(
        tmp_path, {"val.txt": "# u v\n10 20\n", "test.txt": "30 40\n0 200\n", "test_neg.txt": "0 50\n60 380\n"}
    )
    source_ids = ds.array("original_ids")[ds.array("new_to_old")]  # reordered id -> the file's id
    assert source_ids[ds.array("link_val")].tolist() == [[10, 20]]
    assert source_ids[ds.array("link_test")].tolist() == [[30, 40], [0, 200]]  # (0, 200) was no edge: kept as given
    assert source_ids[ds.array("link_test_neg")].tolist() == [[0, 50], [60, 380]]
    assert ds.array("link_val_neg").shape == (50, 2)  # no val_neg.txt: a pool is drawn
    edges = _edge_keys(ds)
    n = ds.manifest.num_nodes
    for pairs in (ds.array("link_val"), ds.array("link_test")):
        for u, v in pairs.tolist():
            assert u * n + v not in edges and v * n + u not in edges
    assert ds.manifest.link_split["sizes"] == {"train": 78, "val": 1, "test": 2}  # 80 ring pairs, 2 held out
    assert ds.manifest.link_split["files"] == str((tmp_path / "split").resolve())


@pytest.mark.parametrize(
    ("files", "said"),
    [
        ({"val.txt": "", "test.txt": "30 40\n"}, r"val\.txt.*holds no pairs: a link job needs val pairs"),
        ({"val.txt": "10 20\n", "test.txt": "30 40\n30 30\n"}, r"test\.txt.*pair 2 \(30 30\) is a self-loop"),
        ({"val.txt": "10 20\n30 40\n", "test.txt": "0 200\n40 30\n"}, r"test\.txt.*pair 2 \(40 30\) is in val"),
        (  # 390 -> 60 is a ring edge (undirected: either way)
            {"val.txt": "10 20\n", "test.txt": "30 40\n", "val_neg.txt": "0 50\n60 390\n"},
            r"val_neg\.txt.*pair 2 \(60 390\) is an edge of the graph",
        ),
        (
            {"val.txt": "10 20\n", "test.txt": "30 40\n", "test_neg.txt": "20 10\n"},
            r"test_neg\.txt.*pair 1 \(20 10\) is an edge of the graph \(or a val or test pair\)",
        ),
    ],
)
def test_pair_files_that_would_evaluate_nothing_or_mislead_are_refused(tmp_path, files, said):
    """An empty val or test file, a self-loop, a pair in val and test, or a 'negative' that is an edge: a link
    job's figures over them would mean nothing, or flatter it. Refused naming the file and pair, in its ids."""
    with pytest.raises(DatasetSourceError, match=said):
        _prepare_from_files(tmp_path, files)
    assert not (tmp_path / "out" / "ring").exists()


def test_a_pair_file_naming_an_unknown_node_says_which_line(tmp_path):
    with pytest.raises(DatasetSourceError, match=r"test\.txt.*line 2: node 15 is not in the graph"):
        _prepare_from_files(tmp_path, {"val.txt": "10 20\n", "test.txt": "30 40\n15 20\n"})
    assert not (tmp_path / "out" / "ring").exists()
