"""Fixtures shared by the whole suite: an isolated GRAPHTIER_HOME, small prepared datasets,
the shared real datasets, and a leak check for shared-memory segments after every test."""

from __future__ import annotations

import os
import secrets
import signal
from pathlib import Path

import pytest

SHARED_DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"
if not SHARED_DATASETS.is_dir():
    SHARED_DATASETS = Path(os.environ.get("GRAPHTIER_SHARED_DATASETS", "/work/shared/datasets"))
ACM_LINK_RELATION = "paper-has_subject-subject"  # the target relation of the acm_link fixture


def pytest_configure(config: pytest.Config) -> None:
    """Daemons started by tests keep their device tiers accounted unless a test asks for GPUs
    (`gpu_tiers="auto"`), so the suite asserts the same things on a CPU and a GPU machine. Every
    segment this run's processes create carries the run's namespace in its owner token, so the
    leak check sees only this run's segments (another suite or a user's daemon may share /dev/shm).

    A suite started with SIGINT ignored (`nohup`, `cmd &` in a script, some CI runners) would pass
    that on to every child, and the tests that send SIGINT to a child (Ctrl-C behaviour) would wait
    forever: Python installs its KeyboardInterrupt handler only where SIGINT is not ignored. The
    suite restores Python's handler, which forks inherit and exec'd children reset to SIG_DFL."""
    os.environ.setdefault("GRAPHTIER_GPU_TIERS", "off")
    os.environ["GRAPHTIER_SHM_NAMESPACE"] = secrets.token_hex(4)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _graphtier_segments() -> set[str]:
    from graphtier.service.shm.naming import SegmentName, token_namespace

    namespace = token_namespace()
    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:
        return set()
    parsed = {name: SegmentName.parse(name) for name in names if name.startswith("graphtier.")}
    return {name for name, seg in parsed.items() if seg is not None and seg.token.startswith(namespace)}


@pytest.fixture(autouse=True)
def no_leaked_segments():
    """Every test must leave /dev/shm as it found it."""
    before = _graphtier_segments()
    yield
    leaked = _graphtier_segments() - before
    assert not leaked, f"test leaked shared-memory segments: {sorted(leaked)}"


@pytest.fixture
def graphtier_home(tmp_path, monkeypatch) -> Path:
    """A private GRAPHTIER_HOME so tests never touch the user's datasets."""
    home = tmp_path / "graphtier-home"
    monkeypatch.setenv("GRAPHTIER_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"shared datasets not found at {SHARED_DATASETS}")
    return SHARED_DATASETS


@pytest.fixture(scope="session")
def prepared_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("prepared")


@pytest.fixture(scope="session")
def small_rmat(prepared_root):
    """A prepared synthetic R-MAT dataset (scale 12, undirected, wrpr), shared by read-only tests."""
    from graphtier.service.hotness import ScoreSpec
    from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset

    prepare_dataset(
        PrepareConfig(
            source="synthetic:rmat",
            name="rmat12",
            undirected=True,
            score=ScoreSpec(kind="wrpr"),
            source_options={"scale": 12, "feature_dim": 16},
            root=prepared_root,
        )
    )
    return PreparedDataset.open("rmat12", prepared_root)


@pytest.fixture(scope="session")
def tiered_plan(small_rmat):
    """`make(replicated=, interleaved=, num_devices=)`: a plan of small_rmat with those fractions of its
    rows in the replicated and interleaved device tiers, half in the host tier, the rest on storage."""
    from graphtier.service.placement import PlacementPlan, TierBudgets

    n, row_bytes = small_rmat.manifest.num_nodes, small_rmat.manifest.feature_row_bytes

    def make(*, replicated: int, interleaved: int, num_devices: int) -> PlacementPlan:
        """`replicated`/`interleaved`: the tiers hold 1/replicated and 1/interleaved of the rows' bytes."""
        budgets = TierBudgets(
            device_replicated_bytes=n * row_bytes // replicated,
            device_interleaved_bytes=n * row_bytes // interleaved,
            num_devices=num_devices,
            host_bytes=n * row_bytes // 2,
            structure_device_bytes=0,
        )
        return PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row_bytes)

    return make


@pytest.fixture(scope="session")
def cora_link(prepared_root, shared_datasets):
    """Cora prepared for link prediction (`--edge-split 0.85,0.05,0.10`, seed 0; 10k negatives per
    evaluation split to keep it small), shared by read-only tests."""
    from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
    from graphtier.service.prepared.edge_split import EdgeSplitSpec

    prepare_dataset(
        PrepareConfig(
            source=f"planetoid:{shared_datasets / 'planetoid_cora'}",
            name="cora-link",
            edge_split=EdgeSplitSpec(fractions=(0.85, 0.05, 0.10), eval_negatives=10_000),
            root=prepared_root,
        )
    )
    return PreparedDataset.open("cora-link", prepared_root)


@pytest.fixture(scope="session")
def prepared_acm(shared_datasets, prepared_root):
    """ACM (split heco20) prepared with wrpr and reverse relations as "acm", shared by read-only tests
    and by daemons serving prepared_root."""
    from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset

    source = shared_datasets / "ogb_hetero_acm"
    if not source.is_dir():
        pytest.skip(f"{source} not found")
    prepare_dataset(PrepareConfig(source=f"ogb:{source}", name="acm", root=prepared_root))
    return PreparedDataset(prepared_root / "acm")


@pytest.fixture(scope="session")
def acm_link(shared_datasets, prepared_root):
    """ACM prepared for link prediction on paper-has_subject-subject as "acm-link" (`--edge-split
    0.85,0.05,0.10 --target-relation ...`, 5000 negatives per evaluation split), shared by read-only
    tests and by daemons serving prepared_root."""
    from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
    from graphtier.service.prepared.edge_split import EdgeSplitSpec

    source = shared_datasets / "ogb_hetero_acm"
    if not source.is_dir():
        pytest.skip(f"{source} not found")
    spec = EdgeSplitSpec.parse("0.85,0.05,0.10", eval_negatives=5000, target_relation=ACM_LINK_RELATION)
    prepare_dataset(PrepareConfig(source=f"ogb:{source}", name="acm-link", root=prepared_root, edge_split=spec))
    return PreparedDataset(prepared_root / "acm-link")
