"""The CI staleness check: `proto/generate.py --check` passes on the committed tree and
fails, naming the files, when a .proto changes, a generated file is missing or orphaned."""

from __future__ import annotations


def test_committed_generated_code_is_fresh(proto_root, run_generate):
    result = run_generate(proto_root, "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is fresh" in result.stdout


def test_check_fails_when_a_proto_is_edited_and_generate_repairs_it(proto_copy, run_generate):
    jobs = proto_copy / "graphtier" / "v1" / "jobs.proto"
    text = jobs.read_text()
    marker = "  Device device = 21;\n"
    assert marker in text
    jobs.write_text(text.replace(marker, marker + "  // A field added after generation.\n  string added = 1000;\n"))

    stale = run_generate(proto_copy, "--check")
    assert stale.returncode == 1
    for name in ("jobs_pb2.py", "jobs_pb2.pyi"):
        assert f"stale: {proto_copy / 'graphtier' / 'v1' / name}" in stale.stderr
    assert "datasets_pb2.py" not in stale.stderr  # only what changed is listed

    repaired = run_generate(proto_copy)
    assert repaired.returncode == 0, repaired.stderr
    assert "wrote" in repaired.stdout and "jobs_pb2.py" in repaired.stdout
    assert run_generate(proto_copy, "--check").returncode == 0
    assert "added: str" in (proto_copy / "graphtier" / "v1" / "jobs_pb2.pyi").read_text()


def test_check_lists_missing_and_orphaned_files(proto_copy, run_generate):
    package = proto_copy / "graphtier" / "v1"
    (package / "progress_pb2_grpc.py").unlink()
    (package / "retired_pb2.py").write_text("# generated from a .proto that was deleted\n")

    result = run_generate(proto_copy, "--check")
    assert result.returncode == 1
    assert f"missing: {package / 'progress_pb2_grpc.py'}" in result.stderr
    assert f"orphan: {package / 'retired_pb2.py'}" in result.stderr
    assert "grpcio-tools" in result.stderr  # says which generator to run

    assert run_generate(proto_copy).returncode == 0
    assert (package / "progress_pb2_grpc.py").is_file()
    assert not (package / "retired_pb2.py").exists()


def test_a_broken_proto_is_a_protoc_error_not_a_pass(proto_copy, run_generate):
    common = proto_copy / "graphtier" / "v1" / "common.proto"
    common.write_text(common.read_text().replace("message SegmentRef {", "message SegmentRef {\n  strin broken = 99;"))
    result = run_generate(proto_copy, "--check")
    assert result.returncode == 2
    assert "common.proto" in result.stderr
