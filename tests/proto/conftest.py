"""Fixtures for the contract's tests: the proto root and the contract compiled with its comments."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO_ROOT / "proto"


def compile_with_source_info(root: Path, out: Path) -> descriptor_pb2.FileDescriptorSet:
    """Compile every graphtier/v1/*.proto under `root` with `--include_source_info`, as protoc parses them."""
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(root)) for p in (root / "graphtier" / "v1").glob("*.proto"))
    status = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{root}",
            f"-I{resources.files('grpc_tools') / '_proto'}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            *protos,
        ]
    )
    if status != 0:
        raise RuntimeError(f"protoc failed ({status}) on {protos}")
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


@pytest.fixture(scope="session")
def contract_descriptors(tmp_path_factory) -> descriptor_pb2.FileDescriptorSet:
    """The committed contract as a FileDescriptorSet with source locations and comments."""
    return compile_with_source_info(PROTO_ROOT, tmp_path_factory.mktemp("descriptors") / "contract.pb")


@pytest.fixture
def proto_copy(tmp_path) -> Path:
    """A private copy of proto/ (generator, .proto files and generated code) to break on purpose."""
    copy = tmp_path / "proto"
    shutil.copytree(PROTO_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def _run_generate(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "generate.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def run_generate() -> Callable[..., subprocess.CompletedProcess[str]]:
    """`run_generate(root, *args)`: run `root`/generate.py as CI does, in a fresh interpreter."""
    return _run_generate


@pytest.fixture
def compile_contract() -> Callable[[Path, Path], descriptor_pb2.FileDescriptorSet]:
    """`compile_contract(root, out)`: compile a proto tree with its comments (see compile_with_source_info)."""
    return compile_with_source_info


@pytest.fixture(scope="session")
def proto_root() -> Path:
    """The committed proto/ folder."""
    return PROTO_ROOT
