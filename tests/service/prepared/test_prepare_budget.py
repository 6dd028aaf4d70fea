"""Preparation under a memory budget: byte-identical to the in-memory path for every source kind,
bounded peak memory in a real process, clean interruption, and bad budgets refused."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from graphtier.service.hotness import ScoreSpec
from graphtier.service.out_of_core.memory_budget import MemoryBudgetError, parse_memory_budget
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset

# Small enough working memory that every out-of-core step cuts these small graphs into several buckets.
TINY_WORK = 48 << 10


def _prepare(root, name, source, **kw):
    return prepare_dataset(PrepareConfig(source=source, name=name, root=root, **kw))


def _assert_same_bytes(root, a, b):
    assert list(a.arrays) == list(b.arrays)
    for key in a.arrays:
        left, right = (root / m.name / m.arrays[key].file for m in (a, b))
        assert left.read_bytes() == right.read_bytes(), key
    assert (a.num_nodes, a.num_edges, a.split_sizes, a.num_classes) == (
        b.num_nodes,
        b.num_edges,
        b.split_sizes,
        b.num_classes,
    )
    assert a.source_description == b.source_description


def _check_paths(root, source, work=TINY_WORK, **kw):
    """In memory, out of core with one bucket per step, and with many: the same files."""
    unbounded = _prepare(root, "mem", source, memory_budget="unlimited", **kw)
    roomy = _prepare(root, "roomy", source, memory_budget="8GiB", **kw)
    tight = _prepare(root, "tight", source, memory_budget="8GiB", work_bytes=work, **kw)
    assert unbounded.memory_budget_bytes is None and unbounded.preparation["path"] == "in-memory"
    assert roomy.memory_budget_bytes == 8 << 30 and roomy.preparation["path"] == "out-of-core"
    assert roomy.preparation["build_csc"]["buckets"] == 1
    assert tight.preparation["build_csc"]["buckets"] > 1 and tight.preparation["reorder_structure"]["buckets"] > 1
    _assert_same_bytes(root, unbounded, roomy)
    _assert_same_bytes(root, unbounded, tight)
    PreparedDataset.open("tight", root).verify()
    assert sorted(p.name for p in root.iterdir()) == ["mem", "roomy", "tight"]  # no spill or temporary left
    return tight


@pytest.mark.parametrize(
    "score, undirected",
    [("wrpr", True), ("rpr", False), ("degree", True), ("none", False)],
)
def test_synthetic_out_of_core_is_byte_identical(tmp_path, score, undirected):
    tight = _check_paths(
        tmp_path,
        "synthetic:rmat",
        undirected=undirected,
        score=ScoreSpec(kind=score),
        source_options={"scale": 10, "feature_dim": 12, "seed": 3},
    )
    assert tight.preparation["reorder_features"]["buckets"] > 1
    # too large for the tight budget: drawn again while placed, not spilled, and still the same bytes
    assert "features.f32 (drawn again when placed)" in tight.preparation["read_source"]["kept_in_memory"]


def test_synthetic_wrpr_with_fanout_is_byte_identical(tmp_path):
    _check_paths(
        tmp_path,
        "synthetic:rmat",
        undirected=True,
        score=ScoreSpec(kind="wrpr", fanout=5),
        source_options={"scale": 9, "feature_dim": 4, "edge_factor": 20},
    )


def test_edge_list_with_sparse_ids_and_features_is_byte_identical(tmp_path):
    rng = np.random.default_rng(0)
    ids = np.sort(rng.choice(10_000, size=600, replace=False)) * 7 + 3  # not 0..N-1: remapped, original ids kept
    edges = rng.choice(ids, size=(4000, 2))
    data = tmp_path / "data"
    data.mkdir()
    (data / "e.txt").write_text("# a comment\n" + "".join(f"{s}\t{d}\n" for s, d in edges))
    np.save(data / "f.npy", rng.standard_normal((ids.size, 5)).astype(np.float32))
    np.save(data / "y.npy", rng.integers(-1, 4, ids.size))
    root = tmp_path / "root"
    tight = _check_paths(
        root,
        f"edges:{data / 'e.txt'}",
        undirected=True,
        source_options={"features": str(data / "f.npy"), "labels": str(data / "y.npy"), "split_seed": 4},
    )
    assert "original_ids" in tight.arrays


def _gz(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(",".join(str(v) for v in (row if isinstance(row, tuple) else (row,))) + "\n" for row in rows)
    path.write_bytes(gzip.compress(text.encode()))


def test_ogb_is_byte_identical(tmp_path):
    rng = np.random.default_rng(1)
    n = 300
    ogb = tmp_path / "ogbn_products"  # an undirected name: reverse edges added by the reader
    _gz(ogb / "raw" / "edge.csv.gz", [tuple(e) for e in rng.integers(0, n, (1500, 2))])
    _gz(ogb / "raw" / "num-node-list.csv.gz", [n])
    _gz(ogb / "raw" / "num-edge-list.csv.gz", [1500])
    _gz(ogb / "raw" / "node-feat.csv.gz", [tuple(f"{v:.3f}" for v in row) for row in rng.standard_normal((n, 3))])
    _gz(ogb / "raw" / "node-label.csv.gz", [int(v) for v in rng.integers(0, 5, n)])
    for split, part in (("train", range(0, 100)), ("valid", range(100, 150)), ("test", range(150, 200))):
        _gz(ogb / "split" / "sales_ranking" / f"{split}.csv.gz", list(part))
    _check_paths(tmp_path / "root", f"ogb:{ogb}", work=16 << 10)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_npz_and_planetoid_are_byte_identical(tmp_path, shared_datasets):
    _check_paths(
        tmp_path / "npz",
        f"npz:{shared_datasets / 'gnn_benchmark_npz' / 'citeseer.npz'}",
        score=ScoreSpec(kind="degree"),
        work=16 << 10,
    )
    _check_paths(tmp_path / "planetoid", f"planetoid:{shared_datasets / 'planetoid_cora'}", undirected=True)


def test_budget_parsing():
    assert parse_memory_budget("3GiB") == 3 << 30 and parse_memory_budget("512MiB") == 512 << 20
    assert parse_memory_budget("unlimited") is None
    assert parse_memory_budget("auto") == parse_memory_budget(None) > 0
    for bad, problem in (
        ("3XB", "unknown unit 'XB'"),
        ("lots", "is not a size"),
        ("0", "more than 0"),
        ("-1G", "negative"),
    ):
        with pytest.raises(MemoryBudgetError, match=problem) as info:
            parse_memory_budget(bad)
        assert repr(bad) in str(info.value) and "--memory-budget" in str(info.value)


def _cli(*args, root):
    cmd = [
        sys.executable,
        "-m",
        "graphtier.launcher.cli",
        "dataset",
        "prepare",
        "synthetic:rmat",
        "--out",
        str(root),
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "budget, message",
    [("3XB", "--memory-budget: budget '3XB' has unknown unit"), ("10MiB", "too small to make progress")],
)
@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_bad_budget_exits_2_with_one_line(tmp_path, budget, message):
    done = _cli("--name", "b", "--scale", "8", "--memory-budget", budget, root=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_budget_too_small_for_the_node_count_is_refused_before_work(tmp_path):
    done = _cli("--name", "b", "--scale", "24", "--memory-budget", "600MiB", root=tmp_path)
    assert done.returncode == 2
    assert "too small to make progress on 16,777,216 nodes" in done.stderr and "give at least" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_peak_memory_stays_under_the_budget_in_a_real_process(tmp_path):
    """Scale 16 with 768-dim features needs ~0.9 GiB in memory; under a 450 MiB budget it stays within it."""
    args = ("--scale", "16", "--feature-dim", "768", "--undirected", "--json")
    bounded = _cli("--name", "bounded", "--memory-budget", "450MiB", *args, root=tmp_path)
    assert bounded.returncode == 0, bounded.stderr
    manifest = json.loads(bounded.stdout)
    assert manifest["memory_budget_bytes"] == 450 << 20
    assert manifest["peak_rss_bytes"] <= 450 << 20, manifest["preparation"]  # VmHWM: its own peak, not its parent's
    assert manifest["preparation"]["reorder_features"]["buckets"] > 1  # the features did not fit at once
    unbounded = json.loads(_cli("--name", "unbounded", "--memory-budget", "unlimited", *args, root=tmp_path).stdout)
    assert unbounded["peak_rss_bytes"] > 1.3 * manifest["peak_rss_bytes"]
    assert {k: v["sha256"] for k, v in unbounded["arrays"].items()} == {
        k: v["sha256"] for k, v in manifest["arrays"].items()
    }


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_the_peak_is_the_process_own_not_its_parents(tmp_path):
    """ru_maxrss carries a parent's peak across exec (the full suite's pytest reached 600+ MiB): not used."""
    ballast = np.ones(400 << 20, np.uint8)  # this process's peak: above 400 MiB, a small prepare's is ~280 MiB
    done = _cli("--name", "small", "--scale", "8", "--memory-budget", "1GiB", "--json", root=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["peak_rss_bytes"] < 400 << 20
    del ballast


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_interrupt_while_spilling_leaves_nothing(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "graphtier.launcher.cli",
        "dataset",
        "prepare",
        "synthetic:rmat",
        "--name",
        "big",
        "--scale",
        "19",
        "--undirected",
        "--memory-budget",
        "400MiB",
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        spills = [p for tmp in tmp_path.glob(".tmp-big-*") for p in (tmp / "spill").glob("csc-keys.*")]
        if spills:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    else:
        raise AssertionError("prepare never spilled CSC keys")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert list(tmp_path.iterdir()) == []


def test_csc_keys_held_in_memory_when_they_fit_beside_the_sort(tmp_path):
    """A working memory that holds every CSC key but not their sort at once: several buckets, none
    spilled, and the same bytes as the in-memory path."""
    kw = {"source": "synthetic:rmat", "undirected": True, "source_options": {"scale": 10, "feature_dim": 4, "seed": 5}}
    unbounded = _prepare(tmp_path, "mem", memory_budget="unlimited", **kw)
    roomy = _prepare(tmp_path, "roomy", memory_budget="8GiB", **kw)
    entries = roomy.preparation["build_csc"]["entries"]
    held = _prepare(tmp_path, "held", memory_budget="8GiB", work_bytes=int(8 * entries / 0.55), **kw)
    csc = held.preparation["build_csc"]
    assert csc["buckets"] > 1 and csc["keys_in_memory"] and csc["spilled_bytes"] == 0 and csc["row_in_memory"]
    _assert_same_bytes(tmp_path, unbounded, held)
