"""A pushed dataset replaces only a dataset graphtier prepared on the receiver: a user's directory or a link
under the dataset's name is refused, with nothing deleted and no temporary left."""

from __future__ import annotations

import json
import shutil

import pytest

from graphtier.contract.errors import DaemonError
from graphtier.service.daemon.cluster.dataset_transfer import DatasetReceiver, _chunks, dataset_files
from graphtier.v1 import cluster_pb2


def _stream(directory, name, *, replace=True):
    version, files = dataset_files(directory)
    return _chunks(directory, cluster_pb2.DatasetHeader(name=name, version=version, files=files, replace=replace))


def test_a_users_directory_under_the_name_is_refused(tmp_path, small_rmat):
    root = tmp_path / "received"
    (root / "rmat12").mkdir(parents=True)
    (root / "rmat12" / "thesis.txt").write_text("years of work")
    with pytest.raises(DaemonError, match="holds no valid graphtier manifest.*nothing was received"):
        DatasetReceiver(root).receive(_stream(small_rmat.directory, "rmat12"))
    assert (root / "rmat12" / "thesis.txt").read_text() == "years of work"
    assert [p.name for p in root.iterdir()] == ["rmat12"]


def test_a_link_under_the_name_is_refused_and_its_target_kept(tmp_path, small_rmat):
    root, target = tmp_path / "received", tmp_path / "users-dir"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    root.mkdir()
    (root / "rmat12").symlink_to(target)
    with pytest.raises(DaemonError, match="is a symbolic link"):
        DatasetReceiver(root).receive(_stream(small_rmat.directory, "rmat12"))
    assert (root / "rmat12").is_symlink() and (target / "keep.txt").read_text() == "mine"
    assert [p.name for p in root.iterdir()] == ["rmat12"]


def test_an_older_version_graphtier_prepared_is_replaced(tmp_path, small_rmat):
    root = tmp_path / "received"
    shutil.copytree(small_rmat.directory, root / "rmat12")
    manifest = root / "rmat12" / "manifest.json"
    older = json.loads(manifest.read_text())
    older["score"] = {**older["score"], "damping": 0.5}  # prepared with other parameters: an older version
    manifest.write_text(json.dumps(older))
    reply = DatasetReceiver(root).receive(_stream(small_rmat.directory, "rmat12"))
    assert not reply.unchanged
    assert manifest.read_bytes() == (small_rmat.directory / "manifest.json").read_bytes()
    assert [p.name for p in root.iterdir()] == ["rmat12"]  # the older version's trash is gone
