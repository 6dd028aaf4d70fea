"""The prepared-dataset pipeline: contents in the reordered space, atomicity, integrity checks."""

import signal
import subprocess
import sys
import time

import pytest
import torch

from graphtier.contract.errors import DatasetSourceError, PreparedDatasetError
from graphtier.service.hotness import ScoreSpec
from graphtier.service.prepared import PrepareConfig, PreparedDataset, list_datasets, prepare_dataset
from graphtier.service.sources.synthetic import generate_rmat


def _config(root, name="d", **kw):
    options = kw.pop("source_options", {"scale": 10, "feature_dim": 8})
    return PrepareConfig(source="synthetic:rmat", name=name, root=root, source_options=options, **kw)


def test_prepared_arrays_are_the_source_in_hotness_order(tmp_path):
    manifest = prepare_dataset(_config(tmp_path, undirected=True, score=ScoreSpec(kind="degree")))
    ds = PreparedDataset.open("d", tmp_path)
    ds.verify()
    src = generate_rmat(scale=10, feature_dim=8)
    perm = ds.new_to_old
    assert torch.equal(ds.features, src.features[perm])
    assert torch.equal(ds.labels, src.labels[perm])
    for split in ("train", "val", "test"):
        assert torch.equal(ds.new_to_old[ds.split(split)].sort().values, src.splits[split])
    scores = ds.scores
    assert bool((scores[:-1] >= scores[1:]).all())
    # degree score = out-degree in the undirected graph = in-degree; the hottest node has the longest list
    in_degree = ds.graph.in_degree()
    assert int(in_degree[0]) == int(in_degree.max())
    assert manifest.num_edges == ds.graph.num_edges and manifest.undirected
    assert set(manifest.arrays) >= {"colptr", "row", "features", "labels", "new_to_old", "old_to_new", "scores"}
    assert manifest.score["kind"] == "degree" and manifest.format_version == 1
    assert [m.name for m in list_datasets(tmp_path)] == ["d"]


def test_existing_name_is_refused_and_left_intact(tmp_path):
    prepare_dataset(_config(tmp_path))
    before = (tmp_path / "d" / "manifest.json").read_text()
    with pytest.raises(PreparedDatasetError, match="already exists.*--overwrite"):
        prepare_dataset(_config(tmp_path, score=ScoreSpec(kind="none")))
    assert (tmp_path / "d" / "manifest.json").read_text() == before
    prepare_dataset(_config(tmp_path, score=ScoreSpec(kind="none"), overwrite=True))
    assert PreparedDataset.open("d", tmp_path).manifest.score["kind"] == "none"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_failure_midway_leaves_nothing(tmp_path):
    root = tmp_path / "root"
    with pytest.raises(DatasetSourceError, match="missing.npy: score file not found"):
        prepare_dataset(_config(root, score=ScoreSpec(kind="user", path=str(tmp_path / "missing.npy"))))
    assert not root.exists() or list(root.iterdir()) == []


def test_corruption_and_truncation_are_detected(tmp_path):
    prepare_dataset(_config(tmp_path))
    directory = tmp_path / "d"
    features = directory / "features.npy"
    data = bytearray(features.read_bytes())
    data[-1] ^= 0xFF
    features.write_bytes(bytes(data))
    with pytest.raises(PreparedDatasetError, match="checksum mismatch for 'features'"):
        PreparedDataset.open("d", tmp_path).verify()
    features.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(PreparedDatasetError, match=r"features\.npy: truncated"):
        PreparedDataset.open("d", tmp_path)
    (directory / "manifest.json").write_text("{not json")
    with pytest.raises(PreparedDatasetError, match="malformed manifest"):
        PreparedDataset.open("d", tmp_path)
    with pytest.raises(PreparedDatasetError, match="no dataset named 'other'"):
        PreparedDataset.open("other", tmp_path)


def test_bad_names_are_refused(tmp_path):
    for name in ("", "../x", "a/b", ".hidden", "x" * 65):
        with pytest.raises(PreparedDatasetError, match="invalid dataset name"):
            prepare_dataset(_config(tmp_path, name=name))


def _start_prepare(root, scale):
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
        str(scale),
        "--out",
        str(root),
        "--undirected",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_tmp(root, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if root.exists() and any(p.name.startswith(".tmp-big") for p in root.iterdir()):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError("prepare never started writing")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 130)])
@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_interrupt_while_writing_leaves_nothing(tmp_path, sig, code):
    proc = _start_prepare(tmp_path, 17)
    _wait_for_tmp(tmp_path, proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "interrupted" in err
    assert list(tmp_path.iterdir()) == []


def test_crash_while_writing_is_reclaimed_by_the_next_writer(tmp_path):
    proc = _start_prepare(tmp_path, 17)
    _wait_for_tmp(tmp_path, proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert not (tmp_path / "big").exists()
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-big")]
    assert leftovers, "a SIGKILLed writer should leave its temporary directory behind"
    prepare_dataset(_config(tmp_path, name="other"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]
