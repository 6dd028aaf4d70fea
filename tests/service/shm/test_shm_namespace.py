"""Segments carry their run's namespace, so two suites (or a user's daemon) can share /dev/shm."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.shm import SegmentOwner
from graphtier.service.shm.naming import SegmentName, token_namespace


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_owner_tokens_start_with_the_namespace_which_children_inherit():
    namespace = os.environ["GRAPHTIER_SHM_NAMESPACE"]
    with SegmentOwner() as owner:
        segment = owner.create("ns-check", 64)
        assert SegmentName.parse(os.path.basename(segment.path)).token.startswith(namespace)
    child = subprocess.run(
        [sys.executable, "-c", "from graphtier.service.shm.naming import token_namespace as t; print(t())"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert child.stdout.strip() == namespace


def test_a_malformed_namespace_is_refused_naming_it(monkeypatch):
    monkeypatch.setenv("GRAPHTIER_SHM_NAMESPACE", "not/hex")
    with pytest.raises(SharedMemoryError, match=r"GRAPHTIER_SHM_NAMESPACE='not/hex' must be 1 to 16 lowercase hex"):
        token_namespace()
    monkeypatch.delenv("GRAPHTIER_SHM_NAMESPACE")
    assert token_namespace() == ""
