"""A dataset's version names its content: the same source prepared alike twice (as on two nodes, into
two roots, at two times) is one version though the manifests differ in timings and paths; another
score or the reverse edges make another version, and so does a changed array's checksum."""

from __future__ import annotations

import json

from graphtier.service.hotness import ScoreSpec
from graphtier.service.prepared import PrepareConfig, prepare_dataset
from graphtier.service.prepared.digests import dataset_version


def _prepare(root, **config) -> str:
    source = config.pop("source")
    prepare_dataset(PrepareConfig(source=source, name="cora", root=root, **config))
    return dataset_version(root / "cora")


def test_the_same_source_prepared_twice_is_one_version(shared_datasets, tmp_path):
    source = f"planetoid:{shared_datasets / 'planetoid_cora'}"
    first = _prepare(tmp_path / "node1", source=source, undirected=True)
    second = _prepare(tmp_path / "node2", source=source, undirected=True)
    manifests = [(tmp_path / node / "cora" / "manifest.json").read_bytes() for node in ("node1", "node2")]
    assert manifests[0] != manifests[1]  # timings (and dates) differ ...
    assert first == second and len(first) == 64  # ... the content does not
    assert _prepare(tmp_path / "degree", source=source, undirected=True, score=ScoreSpec(kind="degree")) != first
    assert _prepare(tmp_path / "directed", source=source, undirected=False) != first
    path = tmp_path / "node2" / "cora" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["arrays"]["labels"]["sha256"] = "0" * 64
    path.write_text(json.dumps(manifest))
    assert dataset_version(tmp_path / "node2" / "cora") != first
    assert dataset_version(tmp_path / "absent") is None
