"""Regenerate the Python code of the gRPC contract, or check that the committed code is fresh.

    python proto/generate.py            # rewrite proto/graphtier/v1/*_pb2*.py{,i} from the .proto files
    python proto/generate.py --check    # generate into a temp dir; exit 1 listing stale/missing/orphan files

This is the one way the generated modules are made: `grpc_tools.protoc` (the grpcio-tools
package, so no system protoc is needed) with `-I proto`, so that `graphtier/v1/x.proto`
becomes `proto/graphtier/v1/x_pb2.py` and imports its dependencies as `graphtier.v1.y_pb2`,
the import name the package maps onto `proto/graphtier/v1/`. Each .proto gets `x_pb2.py`,
the `x_pb2.pyi` type stubs and `x_pb2_grpc.py`. Output is byte-for-byte deterministic for a
given grpcio-tools version, which is what makes `--check` (the CI staleness check) possible.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from importlib import metadata, resources
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PACKAGE_DIR = Path("graphtier") / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")

EXIT_FRESH = 0
EXIT_STALE = 1
EXIT_PROTOC_FAILED = 2


def _tool_version() -> str:
    try:
        return f"grpcio-tools {metadata.version('grpcio-tools')}"
    except metadata.PackageNotFoundError:
        return "grpcio-tools (version unknown)"


def proto_files(root: Path) -> list[Path]:
    """The contract's .proto files, relative to `root`, sorted (protoc output does not depend on order)."""
    return sorted(path.relative_to(root) for path in (root / PACKAGE_DIR).glob("*.proto"))


def expected_outputs(protos: list[Path]) -> set[Path]:
    """Generated files (relative to the root) that the given .proto files produce."""
    return {proto.with_name(proto.stem + suffix) for proto in protos for suffix in GENERATED_SUFFIXES}


def generated_in(directory: Path) -> set[Path]:
    """Files under `directory`/graphtier/v1 whose names say protoc made them."""
    package = directory / PACKAGE_DIR
    if not package.is_dir():
        return set()
    return {
        path.relative_to(directory)
        for path in package.iterdir()
        if path.is_file() and path.name.endswith(GENERATED_SUFFIXES)
    }


def run_protoc(root: Path, out_dir: Path) -> None:
    """Generate the code of every .proto under `root` into `out_dir`; SystemExit(2) on a protoc error."""
    from grpc_tools import protoc  # imported here: grpcio-tools is a development dependency

    protos = proto_files(root)
    if not protos:
        print(f"generate.py: no .proto files in {root / PACKAGE_DIR}", file=sys.stderr)
        raise SystemExit(EXIT_PROTOC_FAILED)
    well_known = resources.files("grpc_tools") / "_proto"  # google/protobuf/*.proto ship with grpcio-tools
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(proto) for proto in protos),
    ]
    if protoc.main(args) != 0:
        print(f"generate.py: protoc ({_tool_version()}) failed on the files above", file=sys.stderr)
        raise SystemExit(EXIT_PROTOC_FAILED)


def compare(root: Path, fresh_dir: Path) -> dict[str, list[Path]]:
    """Differences between the committed generated files under `root` and those in `fresh_dir`."""
    expected = generated_in(fresh_dir)
    present = generated_in(root)
    return {
        "missing": sorted(expected - present),
        "stale": sorted(
            path for path in expected & present if not filecmp.cmp(root / path, fresh_dir / path, shallow=False)
        ),
        "orphan": sorted(present - expected),
    }


def check(root: Path) -> int:
    """Exit status of `--check`: 0 when every generated file is fresh, 1 (listing them) otherwise."""
    with tempfile.TemporaryDirectory(prefix="graphtier-proto-") as tmp:
        run_protoc(root, Path(tmp))
        problems = compare(root, Path(tmp))
    if not any(problems.values()):
        print(f"generated code under {root / PACKAGE_DIR} is fresh ({_tool_version()})")
        return EXIT_FRESH
    why = {
        "missing": "not generated yet",
        "stale": "differs from what its .proto generates",
        "orphan": "generated from a .proto that no longer exists",
    }
    for kind, paths in problems.items():
        for path in paths:
            print(f"{kind}: {root / path} ({why[kind]})", file=sys.stderr)
    print(
        f"generated code is out of date; run `python {root / 'generate.py'}` ({_tool_version()}) and commit the result",
        file=sys.stderr,
    )
    return EXIT_STALE


def write(root: Path) -> int:
    """Regenerate in place: replace changed files, add new ones, delete orphans; print what changed."""
    with tempfile.TemporaryDirectory(prefix="graphtier-proto-") as tmp:
        fresh = Path(tmp)
        run_protoc(root, fresh)
        problems = compare(root, fresh)
        for path in problems["missing"] + problems["stale"]:
            shutil.copyfile(fresh / path, root / path)
            print(f"wrote {root / path}")
        for path in problems["orphan"]:
            (root / path).unlink()
            print(f"removed {root / path}")
    if not any(problems.values()):
        print(f"generated code under {root / PACKAGE_DIR} was already fresh ({_tool_version()})")
    return EXIT_FRESH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 when a generated file is stale, missing or orphaned"
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=PROTO_ROOT,
        help="the proto root holding graphtier/v1/*.proto (default: this folder)",
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    if not (root / PACKAGE_DIR).is_dir():
        parser.error(f"{root / PACKAGE_DIR} does not exist: --root must be the folder holding graphtier/v1/")
    return check(root) if args.check else write(root)


if __name__ == "__main__":
    sys.exit(main())
