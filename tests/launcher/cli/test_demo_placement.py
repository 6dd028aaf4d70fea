"""`graphtier demo` fits its job to the GPUs the daemon sees: cuda ranks and device tiers on at most
2 of them, or CPU ranks with accounted tiers when there is none (the daemon refuses device tiers
spanning more GPUs than it has, and cuda ranks beyond one per GPU)."""

from __future__ import annotations

import pytest
import torch
import typer
from typer.testing import CliRunner

from graphtier.launcher.cli.app import app
from graphtier.launcher.cli.demo import DemoPlacement, _daemon_gpus, demo_placement


@pytest.mark.parametrize(
    ("gpus", "nproc", "expected"),
    [
        (0, None, ("cpu", 2, 2)),
        (0, 3, ("cpu", 3, 2)),
        (1, None, ("cuda", 1, 1)),
        (2, None, ("cuda", 2, 2)),
        (8, None, ("cuda", 2, 2)),
        (8, 4, ("cuda", 4, 2)),
        (1, 1, ("cuda", 1, 1)),
    ],
)
def test_placement_for_the_gpus_the_daemon_sees(gpus, nproc, expected):
    placement = demo_placement(gpus, nproc)
    assert (placement.device, placement.nproc_per_node, placement.num_devices) == expected
    assert placement.num_devices <= max(gpus, 2) and (gpus == 0 or placement.num_devices <= gpus)


def test_the_summary_says_which():
    assert demo_placement(0).summary == (
        "the daemon sees no GPU: 2 CPU rank(s), device tiers accounted for 2 devices, not placed"
    )
    assert demo_placement(1).summary == "the daemon sees 1 GPU(s): 1 cuda rank(s), device tiers on 1 GPU(s)"


def test_more_cuda_ranks_than_gpus_is_refused_naming_the_option():
    with pytest.raises(typer.BadParameter, match="2 cuda ranks need one GPU each but the daemon sees 1") as info:
        demo_placement(1, 2)
    assert info.value.param_hint == "--nproc-per-node"
    with pytest.raises(typer.BadParameter, match="must be >= 1, got 0"):
        demo_placement(0, 0)
    with pytest.raises(ValueError, match="gpus must be >= 0, got -1"):
        demo_placement(-1)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_real_daemon_reports_its_gpus_and_the_demo_fits_them(tmp_path):
    from graphtier.launcher.client import DaemonClient

    cli = CliRunner()
    run = tmp_path / "run"
    started = cli.invoke(app, ["cluster", "start", "--runtime-dir", str(run), "--dataset-root", str(tmp_path / "data")])
    assert started.exit_code == 0, started.output
    try:
        with DaemonClient(runtime_dir=run) as client:
            gpus = _daemon_gpus(client)
        assert gpus == torch.cuda.device_count()
        placement = demo_placement(gpus)
        assert isinstance(placement, DemoPlacement)
        assert placement.device == ("cuda" if gpus else "cpu")
    finally:
        stopped = cli.invoke(app, ["cluster", "stop", "--runtime-dir", str(run)])
        assert stopped.exit_code == 0, stopped.output
