"""The suite works when started with SIGINT ignored (nohup, `cmd &` in a script, some CI runners):
the tests that send SIGINT to a child run to completion instead of hanging."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SIGINT_TEST = "tests/service/shm/test_shm_owner.py::test_sigint_unlinks_then_raises_keyboard_interrupt"


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_sigint_test_passes_under_an_ignored_sigint():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", SIGINT_TEST, "-q", "-p", "no:cacheprovider", "--timeout", "60"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as nohup-like launchers leave it
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout


def test_the_suite_leaves_sigint_to_python():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
