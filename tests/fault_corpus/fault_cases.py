"""The bad-input and fault corpus: every case, one row each.

A `Case` is run here, against real processes (the `graphtier` CLI, one `graphtierd` for the
corpus, raw gRPC and HTTP), and judged by `fault_checks.judge`: refused (non-zero exit, an error
status, a 4xx) naming the file or value, no traceback in what the user or the daemon's log saw,
the good dataset still verifies, nothing of this run left in /dev/shm, the process table or
the dataset root. A `Covered` row is a case whose scenario needs its own set-up (a job to kill
mid-run, a stalled process): the test named runs it, with the same kind of assertions, and the
corpus lists its verdict from the same session.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from fault_checks import Outcome  # tests/fault_corpus is on sys.path (rootdir conftest mode)
from tmpdir_processes import processes_using  # tests/ is on sys.path


@dataclass(frozen=True)
class Case:
    """A row run by the corpus: `run(corpus) -> Outcome`; `names` must appear in what it said.

    `deadline_units`: how long it may take, in time units (the start of the `graphtier` command under the
    load of the moment, conftest.py); past it, what it runs is killed and it counts as a hang. `handled`:
    its right answer is not a refusal (a note given, a state shown); its Outcome's `refused` says it was.
    """

    id: str
    group: str
    what: str
    run: Callable[[Any], Outcome]
    names: tuple[str, ...] = ()
    expect_exit: int | None = 2
    deadline_units: float = 20.0
    handled: bool = False


@dataclass(frozen=True)
class Covered:
    """A row run by another test of the suite (`test`: path::name); its verdict is that test's outcome."""

    id: str
    group: str
    what: str
    test: str


# ---------------------------------------------------------------- inputs


def _npz(
    path: Path,
    n: int = 60,
    *,
    labels: np.ndarray | None = None,
    features: np.ndarray | None = None,
    indices_shift: int = 0,
) -> Path:
    adj = sp.random(n, n, density=0.1, format="csr", random_state=0)
    feats = features if features is not None else np.random.default_rng(0).random((n, 4)).astype(np.float32)
    np.savez(
        path,
        adj_data=adj.data,
        adj_indices=adj.indices + indices_shift,
        adj_indptr=adj.indptr,
        adj_shape=adj.shape,
        attr_matrix=feats,
        labels=labels if labels is not None else np.arange(n, dtype=np.int64) % 3,
    )
    return path


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _flip(path: Path, at: float = 0.6, bits: int = 0x10) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= bits
    path.write_bytes(bytes(data))


def _prepare(corpus, source: str, *extra: str) -> Outcome:
    """`dataset prepare SOURCE --name good --overwrite`: a refused prepare must leave `good` as it was."""
    return corpus.cli(
        "dataset",
        "prepare",
        source,
        "--name",
        "good",
        "--out",
        str(corpus.root),
        "--overwrite",
        "--memory-budget",
        "unlimited",
        *extra,
    )


def _prepare_with(make: Callable[[Path], str], *extra: str) -> Callable[[Any], Outcome]:
    def run(corpus) -> Outcome:
        return _prepare(corpus, make(corpus.work), *extra)

    return run


def _fifo(work: Path) -> str:
    """A named pipe no one writes to: opening it for reading would wait forever."""
    import os

    os.mkfifo(work / "edges.fifo")
    return f"edges:{work / 'edges.fifo'}"


def _truncated_npz(work: Path) -> str:
    path = _npz(work / "cut.npz")
    _truncate(path)
    return f"npz:{path}"


def _flipped_npz(work: Path) -> str:
    path = _npz(work / "flip.npz", n=400)
    _flip(path, 0.5, 0xFF)
    return f"npz:{path}"


def _truncated_gzip(work: Path) -> str:
    path = work / "cut.txt.gz"
    path.write_bytes(gzip.compress(b"".join(b"%d %d\n" % (i, (i * 7 + 1) % 5000) for i in range(5000))))
    _truncate(path)
    return f"edges:{path}"


def _truncated_pickle(corpus) -> Outcome:
    target = corpus.work / "cora"
    shutil.copytree(corpus.shared / "planetoid_cora", target)
    for f in target.iterdir():
        f.chmod(0o644)
    _truncate(target / "ind.cora.tx", 0.3)
    return _prepare(corpus, f"planetoid:{target}")


def _nan_features(work: Path) -> str:
    feats = np.ones((60, 4), dtype=np.float32)
    feats[17, 2] = np.nan
    return f"npz:{_npz(work / 'nan.npz', features=feats)}"


def _out_of_range_ids(work: Path) -> str:
    return f"npz:{_npz(work / 'ids.npz', indices_shift=1000)}"


def _labels(values: dict[int, int]) -> Callable[[Path], str]:
    def make(work: Path) -> str:
        labels = np.arange(60, dtype=np.int64) % 3
        for node, value in values.items():
            labels[node] = value
        return f"npz:{_npz(work / 'labels.npz', labels=labels)}"

    return make


def _edges(text: str, name: str = "g.txt") -> Callable[[Path], str]:
    def make(work: Path) -> str:
        (work / name).write_text(text)
        return f"edges:{work / name}"

    return make


def _bad_npy_features(work: Path) -> str:
    edges = work / "g.txt"
    edges.write_text("".join(f"{i} {(i * 7 + 1) % 50}\n" for i in range(50)))
    feats = work / "f.npy"
    np.save(feats, np.ones((50, 4), dtype=np.float32))
    _flip(feats, 0.0, 0x01)  # the magic's first byte
    return f"edges:{edges}"


_SNAP_HEADER = "# Directed graph\nFromNodeId\tToNodeId\n" + "".join(f"{i}\t{(i + 1) % 40}\n" for i in range(40))
_MID_GARBAGE = (
    "".join(f"{i} {(i + 1) % 40}\n" for i in range(20)) + "7 x9\n" + "".join(f"{i} {i + 1}\n" for i in range(20, 39))
)
_EDGES = "".join(f"{i} {(i * 7 + 1) % 50}\n" for i in range(50))


# ---------------------------------------------------------------- damaged prepared datasets


def _damaged(damage: Callable[[Path], None], name: str) -> Callable[[Any], Outcome]:
    """A copy of the good dataset, damaged; `inspect --verify` and the daemon's LoadDataset must both refuse it."""

    def run(corpus) -> Outcome:
        copy = corpus.root / name
        shutil.copytree(corpus.root / "good", copy)
        try:
            damage(copy)
            inspected = corpus.cli("dataset", "inspect", name, "--out", str(corpus.root), "--verify")
            loaded = corpus.load_dataset(name)
            return Outcome(
                refused=inspected.refused and loaded.refused,
                exit_code=inspected.exit_code,
                output=f"{inspected.output}\n{loaded.output}",
                log=loaded.log,
            )
        finally:
            shutil.rmtree(copy, ignore_errors=True)

    return run


def _damaged_job(damage: Callable[[Path], None], name: str) -> Callable[[Any], Outcome]:
    """A job submitted on a damaged copy of the good dataset, then `job status` of whatever it made:
    refused or failed in one line each, never a traceback."""

    def run(corpus) -> Outcome:
        copy = corpus.root / name
        shutil.copytree(corpus.root / "good", copy)
        try:
            manifest = json.loads((copy / "manifest.json").read_text())
            (copy / "manifest.json").write_text(json.dumps({**manifest, "name": name}, indent=2))  # a job names it
            damage(copy)
            mark = corpus.daemon.log_size()
            runtime = ("--runtime-dir", str(corpus.daemon.runtime_dir))
            submitted = corpus.cli("job", "submit", *runtime, "--dataset", name, "--fanout", "5,5", "--json")
            output, facts = submitted.output, []
            if not submitted.refused:  # taken: it must fail, and say why in its status
                job_id = json.loads(submitted.output[submitted.output.index("{") :])["job_id"]
                wait_for(lambda: _get_job(corpus, job_id).state == 5, corpus.left(60), 0.5)  # JOB_STATE_FAILED
                status = corpus.cli("job", "status", job_id, *runtime)
                output += status.output
                if "failed" not in status.output:
                    facts.append(f"the job on a damaged dataset did not fail: {status.output[-300:]!r}")
            return Outcome(refused=True, exit_code=None, output=output, log=corpus.daemon.log_since(mark), facts=facts)
        finally:
            corpus.unload(name)
            shutil.rmtree(copy, ignore_errors=True)

    return run


def _in(file: str, change: Callable[[Path], None]) -> Callable[[Path], None]:
    return lambda directory: change(directory / file)


def _resealed(key: str, change: Callable[[np.ndarray], None]) -> Callable[[Path], None]:
    """Array `key` of a dataset changed in place, its checksums in the manifest recomputed to match:
    damage only a check of the contents themselves can find."""

    def damage(directory: Path) -> None:
        from graphtier.service.prepared.digests import file_digest

        path = directory / f"{key}.npy"
        array = np.load(path, mmap_mode="r+")
        change(array)
        array.flush()
        del array
        manifest = json.loads((directory / "manifest.json").read_text())
        manifest["arrays"][key]["sha256"] = file_digest(path, "sha256")
        manifest["arrays"][key]["blake3"] = file_digest(path, "blake3")
        (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))

    return damage


def _set(index: int, value: int) -> Callable[[np.ndarray], None]:
    def change(array: np.ndarray) -> None:
        array[index] = value

    return change


def _swapped_manifest(directory: Path) -> None:
    """The manifest of another dataset (R-MAT scale 9, prepared for the case), its name this directory's."""
    import tempfile

    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    with tempfile.TemporaryDirectory() as other:
        prepare_dataset(
            PrepareConfig(
                source="synthetic:rmat", name="other", root=Path(other), source_options={"scale": 9, "feature_dim": 8}
            )
        )
        manifest = json.loads((Path(other) / "other" / "manifest.json").read_text())
    (directory / "manifest.json").write_text(json.dumps({**manifest, "name": directory.name}, indent=2))


def _npy_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[10:30] = b"@" * 20  # inside the header dict: no longer a Python literal
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------- job specs


def _submit(*args: str, spec: str | None = None) -> Callable[[Any], Outcome]:
    def run(corpus) -> Outcome:
        extra = list(args)
        if spec is not None:
            path = corpus.work / "job.yaml"
            path.write_text(spec)
            extra += ["--spec", str(path)]
        mark = corpus.daemon.log_size()
        outcome = corpus.cli("job", "submit", "--runtime-dir", str(corpus.daemon.runtime_dir), *extra)
        outcome.log = corpus.daemon.log_since(mark)
        outcome.facts += corpus.daemon.jobs_created_since_start()
        return outcome

    return run


_GOOD_JOB = ("--dataset", "good", "--fanout", "5,5", "--batch-size", "64", "--epochs", "1")


# ---------------------------------------------------------------- gRPC fuzzing


def _methods() -> list[tuple[str, Any, bool, bool]]:
    """(path, request type, client streaming, server streaming) of every graphtier RPC."""
    import importlib

    found = []
    for module in ("channels", "datasets", "jobs", "progress", "cluster"):
        try:
            pb2 = importlib.import_module(f"graphtier.v1.{module}_pb2")
        except ImportError:
            continue
        for service in pb2.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                found.append(
                    (
                        f"/{service.full_name}/{method.name}",
                        method.input_type,
                        method.client_streaming,
                        method.server_streaming,
                    )
                )
    return found


_READ_ONLY = ("ListDatasets", "ListJobs", "GetNode", "GetCluster")  # a garbage request that parses may read


def _wrong_types(descriptor) -> bytes:
    """Every field of `descriptor` (numbers 1-15) with the other wire type: a varint where a string or
    message belongs, a length-delimited blob where a number belongs."""
    out = bytearray()
    for f in descriptor.fields:
        if f.number >= 16:
            continue
        if f.type in (f.TYPE_STRING, f.TYPE_BYTES, f.TYPE_MESSAGE):
            out += bytes([(f.number << 3) | 0, 0x2A])
        else:
            out += bytes([(f.number << 3) | 2, 3]) + b"abc"
    return bytes(out)


def _huge_strings(descriptor, size: int) -> bytes:
    """Every top-level string field of `descriptor` set to `size` bytes of text."""
    message_class = _message_class(descriptor)
    message = message_class()
    for f in descriptor.fields:
        repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED
        if f.type == f.TYPE_STRING and not repeated:
            setattr(message, f.name, "x" * size)
    return message.SerializeToString()


def _message_class(descriptor):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor)


def _fuzz(kind: str) -> Callable[[Any], Outcome]:
    def run(corpus) -> Outcome:
        import grpc

        rng = random.Random(9)
        mark = corpus.daemon.log_size()
        lines, refused, facts = [], True, []
        session = corpus.daemon.session()  # as a user of the socket calls: known, so garbage reaches each servicer
        channel = grpc.insecure_channel(f"unix:{corpus.daemon.socket}")
        try:
            for path, request_type, client_streaming, server_streaming in _methods():
                if kind == "random":
                    payloads = [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300))) for _ in range(5)]
                elif kind == "oversized":
                    payloads = [b"\x0a\x80\x80\x80\x03" + b"a" * (6 << 20)]  # 6 MiB: over gRPC's 4 MiB limit
                elif kind == "wrong-heterogeneous":
                    payloads = [_wrong_types(request_type)]
                else:  # huge strings, under the transport limit
                    payloads = [_huge_strings(request_type, 3 << 20)]
                for payload in payloads:
                    code, details = _call(channel, path, payload, client_streaming, server_streaming, session)
                    lines.append(f"{path} {code}: {details[:160]}")
                    if len(details) > 1200:
                        facts.append(f"{path}: a {len(details)}-character reply echoes the input")
                    if code == "OK" and path.rsplit("/", 1)[1] not in _READ_ONLY:
                        refused = False  # a state-changing call took garbage
                        facts.append(f"{path} accepted a {kind} request")
                    if code in ("UNKNOWN", "INTERNAL"):
                        facts.append(f"{path}: {code} {details[:200]!r} names no cause")
            health = corpus.daemon.health()
            if health != "SERVING":
                facts.append(f"the daemon is {health} after the {kind} calls")
        finally:
            channel.close()
        log = corpus.daemon.log_since(mark)
        if len(log) > 256 << 10:
            facts.append(f"the daemon log grew {len(log)} bytes")
        return Outcome(refused=refused, output="\n".join(lines), log=log, facts=facts)

    return run


def _call(
    channel, path: str, payload: bytes, client_streaming: bool, server_streaming: bool, metadata=()
) -> tuple[str, str]:
    import grpc

    try:
        if client_streaming:
            channel.stream_unary(path)(iter([payload]), timeout=10, metadata=metadata)
        elif server_streaming:
            for _ in channel.unary_stream(path)(payload, timeout=3, metadata=metadata):
                break
        else:
            channel.unary_unary(path)(payload, timeout=10, metadata=metadata)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and server_streaming:
            return "OK", "stream open"
        return exc.code().name, exc.details() or ""
    return "OK", ""


# ---------------------------------------------------------------- HTTP fuzzing


def _http(kind: str) -> Callable[[Any], Outcome]:
    def run(corpus) -> Outcome:
        rng = random.Random(3)
        mark = corpus.daemon.log_size()
        base = corpus.daemon.http_url
        if kind == "paths":
            alphabet = "abcdefghijklmnopqrstuvwxyz0123456789/._-~%"
            targets = ["/" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80))) for _ in range(40)]
            targets += ["/v1/status/../../etc/passwd", "/%00", "/%ff%fe", "/v1/jobs/-1", "/" + "a/" * 500]
        else:
            targets = [
                "/v1/status?" + "q=" + "x" * (1 << 20),
                "/?" + "&".join(f"k{i}=v" for i in range(20000)),
                "/metrics?" + "%" * 70000,
            ]
        lines, facts, refused = [], [], True
        for target in targets:
            status, body = _get(base + target)
            lines.append(f"GET {target[:60]} -> {status}")
            if status >= 500 or status == 0:
                facts.append(f"GET {target[:60]}... answered {status}: {body[:200]!r}")
            if status == 200 and kind == "paths" and target not in ("/",):
                refused = False
            if "Traceback" in body:
                facts.append(f"GET {target[:60]}... showed a traceback")
        status, _ = _get(base + "/healthz")
        if status != 200:
            facts.append(f"/healthz answers {status} after the fuzzing")
        return Outcome(refused=refused, output="\n".join(lines), log=corpus.daemon.log_since(mark), facts=facts)

    return run


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=20) as reply:
            return reply.status, reply.read(4096).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, exc.read(4096).decode(errors="replace")
        except OSError:  # the server answered, then reset the connection: the status is the answer
            return exc.code, ""
    except Exception as exc:  # a reset connection is an answer too: record it
        return 0, f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- daemon flags


def _daemon_config(text: str) -> Callable[[Any], Outcome]:
    """graphtierd --config FILE holding `text`: refused before anything is created."""

    def run(corpus) -> Outcome:
        runtime, config = corpus.work / "run", corpus.work / "graphtierd.yaml"
        config.write_text(text)
        argv = [sys.executable, "-m", "graphtier.service.daemon", "--runtime-dir", str(runtime)]
        done = corpus.run([*argv, "--dataset-root", str(corpus.root), "--config", str(config)])
        if runtime.exists() and any(runtime.iterdir()):
            done.facts.append(f"the refused daemon left {runtime}")
        return done

    return run


def _long_runtime_dir(corpus) -> Outcome:
    """graphtierd with a runtime directory too long for its forkserver's socket: refused before anything is made."""
    runtime = Path("/tmp") / f"gt-corpus-{os.getpid()}-{'r' * 64}"  # its socket path fits, its forkserver's not
    done = corpus.run([sys.executable, "-m", "graphtier.service.daemon", "--runtime-dir", str(runtime)])
    if runtime.exists():
        done.facts.append(f"the refused daemon made {runtime}")
    return done


# ---------------------------------------------------------------- stopped processes

STALL_TIMEOUT_S = 10  # the corpus daemon's --producer-stall-timeout (also how long a stopped rank is tolerated)
STOPPED_JOB_ENDS_S = 8  # after the stall timeout: the stopped process continued, then every process ended
# (on a machine as busy as when the corpus began; longer by as much as the load has grown since)


def _get_job(corpus, job_id: str):
    import grpc

    from graphtier.v1 import jobs_pb2

    with grpc.insecure_channel(f"unix:{corpus.daemon.socket}") as channel:
        return channel.unary_unary(
            "/graphtier.v1.JobService/GetJob",
            request_serializer=jobs_pb2.GetJobRequest.SerializeToString,
            response_deserializer=jobs_pb2.Job.FromString,
        )(jobs_pb2.GetJobRequest(job_id=job_id), timeout=10)


def _parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _sigstop_rank(corpus) -> Outcome:
    """A job whose rank is stopped (SIGSTOP) mid-run must fail within the stall timeout, naming it."""
    return _sigstop(corpus, agent=False)


def _sigstop_agent(corpus) -> Outcome:
    """A job whose torchrun agent (the rank's parent) is stopped mid-run must fail within the stall timeout,
    naming it: its rank trains on, but nothing would ever reap it or end the job."""
    return _sigstop(corpus, agent=True)


def _kill9_rank_without_restarts(corpus) -> Outcome:
    """kill -9 of the only rank of a job without restarts: the job fails naming the rank and the signal."""
    import os
    import signal

    from graphtier.v1 import jobs_pb2

    runtime = ("--runtime-dir", str(corpus.daemon.runtime_dir))
    job = ("--dataset", "good", "--fanout", "5,5", "--batch-size", "16", "--hidden", "16", "--epochs", "100000")
    submitted = corpus.cli("job", "submit", *runtime, *job, "--nproc-per-node", "1", "--json")
    if submitted.refused:
        return Outcome(refused=False, output=submitted.output, facts=["the job to kill was not accepted"])
    job_id = json.loads(submitted.output[submitted.output.index("{") :])["job_id"]
    final = {jobs_pb2.JOB_STATE_SUCCEEDED, jobs_pb2.JOB_STATE_FAILED, jobs_pb2.JOB_STATE_CANCELLED}
    try:

        def rank_running() -> bool:
            job = _get_job(corpus, job_id)
            return any(r.trainer_pid and r.global_step > 0 for r in job.ranks) or job.state in final

        if not wait_for(rank_running, corpus.left(), 0.5):
            return Outcome(refused=False, output=str(_get_job(corpus, job_id)), facts=["the rank never ran"], hung=True)
        os.kill(next(r.trainer_pid for r in _get_job(corpus, job_id).ranks), signal.SIGKILL)
        if not wait_for(lambda: _get_job(corpus, job_id).state in final, corpus.left(), 0.5):
            return Outcome(refused=False, output="", facts=["the job did not end after its rank was killed"], hung=True)
        status = corpus.cli("job", "status", job_id, *runtime)
        return Outcome(refused=status.exit_code == 3, output=status.output, exit_code=status.exit_code)
    finally:
        corpus.tidy("job", "cancel", job_id, *runtime)
        wait_for(lambda: _get_job(corpus, job_id).state in final, 60, 0.5)
        corpus.unload("good")


def _stopped_daemon(corpus) -> Outcome:
    """CLI commands against the corpus daemon while it is stopped; it is continued afterwards."""
    import os
    import signal

    runtime = ("--runtime-dir", str(corpus.daemon.runtime_dir))
    os.kill(corpus.daemon.pid, signal.SIGSTOP)
    try:
        started, unit = time.monotonic(), corpus.unit.now()
        listed = corpus.cli("job", "list", *runtime)
        metrics = corpus.cli("metrics", *runtime)
        took = time.monotonic() - started
    finally:
        os.kill(corpus.daemon.pid, signal.SIGCONT)
    # each answers at its start (the daemon's process state), not at a call's deadline: judged against
    # the start of the command itself, the unit, which the load of the moment lengthens alike
    facts = [f"two commands took {took:.0f} s against a stopped daemon ({took / unit:.1f} time units)"]
    facts = facts if took > 4 * unit + 5 else []
    if metrics.exit_code != listed.exit_code:
        facts.append(f"`metrics` exited {metrics.exit_code}, `job list` {listed.exit_code}")
    return Outcome(
        refused=listed.refused and metrics.refused,
        output=f"{listed.output}\n{metrics.output}",
        exit_code=listed.exit_code,
        facts=facts,
    )


def _sigstop(corpus, *, agent: bool) -> Outcome:
    import os
    import signal

    from graphtier.v1 import jobs_pb2

    runtime = ("--runtime-dir", str(corpus.daemon.runtime_dir))
    job = ("--dataset", "good", "--fanout", "5,5", "--batch-size", "16", "--hidden", "16", "--epochs", "100000")
    submitted = corpus.cli("job", "submit", *runtime, *job, "--nproc-per-node", "1", "--json")
    if submitted.refused:
        return Outcome(refused=False, output=submitted.output, facts=["the job to stop was not accepted"])
    job_id = json.loads(submitted.output[submitted.output.index("{") :])["job_id"]
    stopped = 0
    final = {jobs_pb2.JOB_STATE_SUCCEEDED, jobs_pb2.JOB_STATE_FAILED, jobs_pb2.JOB_STATE_CANCELLED}
    try:

        def rank_running() -> bool:
            job = _get_job(corpus, job_id)
            return any(r.trainer_pid and r.global_step > 0 for r in job.ranks) or job.state in final

        if not wait_for(rank_running, corpus.left(), 0.5):
            return Outcome(refused=False, output=str(_get_job(corpus, job_id)), facts=["the rank never ran"], hung=True)
        stopped = next(r.trainer_pid for r in _get_job(corpus, job_id).ranks)
        if agent:
            stopped = _parent_pid(stopped)  # torchrun's agent started the rank
        os.kill(stopped, signal.SIGSTOP)
        started = time.monotonic()
        ended = wait_for(lambda: _get_job(corpus, job_id).state in final, corpus.left(), 0.5)
        took = time.monotonic() - started
        job = _get_job(corpus, job_id)
        facts = []
        if not ended:
            facts.append(
                f"the job still {jobs_pb2.JobState.Name(job.state)} {took:.0f} s after "
                f"its process was stopped (stall timeout {STALL_TIMEOUT_S} s): a hang"
            )
        elif took > STALL_TIMEOUT_S + (stopping := STOPPED_JOB_ENDS_S * corpus.unit.now() / corpus.unit.seconds):
            facts.append(
                f"the job ended {took:.0f} s after its process was stopped: more than the stall timeout "
                f"({STALL_TIMEOUT_S} s) and {stopping:.0f} s to stop its processes"
            )
        return Outcome(
            refused=job.state == jobs_pb2.JOB_STATE_FAILED,
            output=f"{jobs_pb2.JobState.Name(job.state)}: {job.message}",
            facts=facts,
            hung=not ended,
        )
    finally:
        if stopped:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
        corpus.tidy("job", "cancel", job_id, *runtime)
        wait_for(lambda: _get_job(corpus, job_id).state in final, 60, 0.5)
        corpus.unload("good")


# ---------------------------------------------------------------- split files and other inputs


def _edges_source(work: Path) -> str:
    (work / "g.txt").write_text(_EDGES)
    return f"edges:{work / 'g.txt'}"


def _split(make: Callable[[Path], Path], *extra: str) -> Callable[[Any], Outcome]:
    """`dataset prepare` of a 50-node edge list with `--split` the file `make(work)` writes."""

    def run(corpus) -> Outcome:
        return _prepare(corpus, _edges_source(corpus.work), "--split", str(make(corpus.work)), *extra)

    return run


def _plain_npy_split(work: Path) -> Path:
    np.save(work / "plain.npy", np.arange(50) < 30)
    return work / "plain.npy"


def _truncated_split(work: Path) -> Path:
    np.savez(work / "split.npz", train_mask=np.arange(50) < 30, val_mask=np.arange(50) >= 40)
    _truncate(work / "split.npz", 0.5)
    return work / "split.npz"


def _fifo_split(work: Path) -> Path:
    import os

    os.mkfifo(work / "split.fifo")
    return work / "split.fifo"


def _negative_mask_split(work: Path) -> Path:
    mask = (np.arange(50) < 30).astype(np.int64)
    mask[17] = -1
    np.savez(work / "neg.npz", train_mask=mask)
    return work / "neg.npz"


def _fifo_features(corpus) -> Outcome:
    import os

    os.mkfifo(corpus.work / "features.fifo")
    return _prepare(corpus, _edges_source(corpus.work), "--features", str(corpus.work / "features.fifo"))


def _split_without_val_and_test(corpus) -> Outcome:
    """A split of train nodes alone is taken, with a note for each part it lacks; the dataset is removed after."""
    np.savez(corpus.work / "train-only.npz", train_mask=np.arange(50) < 30)
    try:
        done = corpus.cli(
            "dataset",
            "prepare",
            _edges_source(corpus.work),
            "--name",
            "train-only",
            "--out",
            str(corpus.root),
            "--split",
            str(corpus.work / "train-only.npz"),
        )
        return Outcome(refused=done.exit_code == 0, output=done.output, exit_code=done.exit_code, hung=done.hung)
    finally:
        shutil.rmtree(corpus.root / "train-only", ignore_errors=True)


# ---------------------------------------------------------------- a script's JOB_DEFAULTS


def _script(text: str) -> Callable[[Any], Outcome]:
    """`job submit --script train.py` whose train.py holds `text`: refused before anything is submitted."""

    def run(corpus) -> Outcome:
        (corpus.work / "train.py").write_text(text)
        return _submit("--dataset", "good", "--script", str(corpus.work / "train.py"))(corpus)

    return run


_HUGE_DEFAULTS = "JOB_DEFAULTS = {'fanouts': [" + "5, " * 5_000_000 + "]}\n"


# ---------------------------------------------------------------- who calls


def _raw(corpus, method: str, request, metadata=()) -> tuple[str, str]:
    """One gRPC call as a program of the socket's group makes it: (status name, details)."""
    import grpc

    with grpc.insecure_channel(f"unix:{corpus.daemon.socket}") as channel:
        try:
            channel.unary_unary(method, request_serializer=type(request).SerializeToString)(
                request, timeout=corpus.left(30), metadata=metadata
            )
        except grpc.RpcError as exc:
            return exc.code().name, exc.details() or ""
    return "OK", ""


def _who(kind: str) -> Callable[[Any], Outcome]:
    def run(corpus) -> Outcome:
        from graphtier.contract.identity import SESSION_HEADER
        from graphtier.contract.jobs import conversions
        from graphtier.contract.jobs.spec import JobSpec
        from graphtier.v1 import jobs_pb2

        spec = conversions.spec_to_proto(JobSpec(dataset="good", fanouts=[5, 5]))
        if kind == "no-secret":  # a launch id anyone reads in `ps`, and nothing else
            request = jobs_pb2.AttachJobRequest(spec=spec, launch_id=f"single@{os.uname().nodename}/pid1")
            code, details = _raw(corpus, "/graphtier.v1.JobService/AttachJob", request, corpus.daemon.session())
        elif kind == "unidentified":
            request = jobs_pb2.SubmitJobRequest(spec=spec)
            code, details = _raw(corpus, "/graphtier.v1.JobService/SubmitJob", request)
        else:  # a credential for root's uid, signed by nobody
            forged = ((SESSION_HEADER, f"v1.0.{int(time.time()) + 600}.{'0' * 64}"),)
            code, details = _raw(
                corpus, "/graphtier.v1.JobService/SubmitJob", jobs_pb2.SubmitJobRequest(spec=spec), forged
            )
        return Outcome(
            refused=code != "OK", output=f"{code}: {details}", facts=corpus.daemon.jobs_created_since_start()
        )

    return run


# ---------------------------------------------------------------- a rank of the user's own launch, its daemon killed

_RANK = """import time, graphtier
job = graphtier.connect(dataset="good", fanout=[5, 5], batch_size=16, hidden=16, epochs=100000, priority="inherit")
for epoch in job.epochs():
    for batch in job.batches():
        job.step(0.0)
        print("step", job.global_step, flush=True)
        time.sleep(0.02)
"""
_ATTACHED: dict[str, Outcome] = {}  # the scenario's outcome per row, run once for the three rows it answers


def _attached_rank(row: str) -> Callable[[Any], Outcome]:
    def run(corpus) -> Outcome:
        if not _ATTACHED:
            _ATTACHED.update(_attached_rank_scenario(corpus))
        return _ATTACHED[row]

    return run


def _attached_rank_scenario(corpus) -> dict[str, Outcome]:
    """A second daemon that runs one job at a time, busy with a job of its own; `python train.py` (a rank that
    registers a job with graphtier.connect()) while it is. Its job shows running, with its progress: its
    ranks run whatever the queue says. Then kill -9 of that daemon: the rank ends at once with one line
    saying the daemon died, and what the daemon had is gone with it (its reaper's work: its scratch
    directory and pymp-*, sockets, endpoints, lock, segments; its forkserver and producers)."""
    import os
    import signal
    import tempfile

    from graphtier.v1 import jobs_pb2

    base = Path(tempfile.mkdtemp(prefix="gt-corpus-"))  # short: the forkserver's socket lives under it
    run = base / "run"
    daemon = corpus.start_daemon(run, "--max-running-jobs", "1")
    runtime = ("--runtime-dir", str(run))
    out: dict[str, Outcome] = {}
    rank = None
    try:
        job = ("--dataset", "good", "--fanout", "5,5", "--batch-size", "16", "--hidden", "16", "--epochs", "100000")
        busy = corpus.cli("job", "submit", *runtime, *job, "--json")
        (base / "train.py").write_text(_RANK)
        env = {**os.environ, "GRAPHTIER_RUNTIME_DIR": str(run), "OMP_NUM_THREADS": "1"}
        with open(base / "rank.out", "w") as output:
            rank = subprocess.Popen(
                [sys.executable, str(base / "train.py")], stdout=output, stderr=subprocess.STDOUT, env=env, cwd=base
            )

        def attached_job():
            return next((j for j in daemon_jobs(daemon) if j.spec.script.endswith("train.py")), None)

        def shown_running() -> bool:
            job = attached_job()
            return job is not None and job.state == jobs_pb2.JOB_STATE_RUNNING and job.progress.global_step > 0

        stepping = wait_for(
            lambda: (base / "rank.out").read_text().count("step") >= 3 or rank.poll() is not None, corpus.left()
        )
        # the rank prints a step before the daemon's next supervision tick has taken in its report: shown
        # running within the deadline, not at the instant of the third line
        wait_for(lambda: shown_running() or rank.poll() is not None, corpus.left())
        attached = attached_job()
        shown = "no job"
        if attached is not None:
            state, step = jobs_pb2.JobState.Name(attached.state), attached.progress.global_step
            shown = f"job {attached.job_id} {state}, step {step}: {attached.message}"
        out["attached-job-shows-running"] = Outcome(
            refused=attached is not None
            and attached.state == jobs_pb2.JOB_STATE_RUNNING
            and attached.progress.global_step > 0,
            output=f"{shown} (the daemon's other job: {busy.output.strip()[-200:]})",
            hung=not stepping,
        )
        daemon.popen.kill()
        daemon.popen.wait()
        killed = time.monotonic()
        try:
            code = rank.wait(corpus.left())
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - killed
        said = (base / "rank.out").read_text(errors="replace")
        ending = "\n".join(line for line in said.splitlines() if not line.startswith("step"))
        facts = [] if took <= 3 * STALL_TIMEOUT_S else [f"the rank took {took:.0f} s to end after its daemon"]
        out["kill9-daemon-under-attached-rank"] = Outcome(
            refused=code == 1, output=ending, exit_code=code, facts=facts, hung=code is None
        )

        def left_over() -> list[str]:
            return sorted(p.name for p in run.iterdir() if p.name not in ("daemon.log", "jobs"))

        def reaped() -> str:
            log = daemon.log_file.read_text(errors="replace") if daemon.log_file.exists() else ""
            return next((line for line in log.splitlines() if "its reaper removed" in line), "")

        gone = wait_for(lambda: not left_over() and not processes_using(run / "tmp") and bool(reaped()), corpus.left())
        out["kill9-daemon-leaves-nothing"] = Outcome(
            # its processes ended with their owner: none left for the reaper to kill
            refused=gone and "killed 0 process(es) that outlived it" in reaped(),
            output=f"{reaped() or 'no reaper line in the log'} (left in {run}: {left_over() or 'nothing else'}; "
            f"processes using its tmp: {processes_using(run / 'tmp')})",
            hung=not gone,
        )
    finally:
        if rank is not None and rank.poll() is None:
            rank.kill()
            rank.wait()
        if daemon.popen.poll() is None:
            daemon.popen.send_signal(signal.SIGTERM)
            daemon.popen.wait(60)
        shutil.copytree(base, corpus.work / "second", dirs_exist_ok=True, ignore_dangling_symlinks=True)  # to read
        shutil.rmtree(base, ignore_errors=True)
    return out


def daemon_jobs(daemon) -> list:
    import grpc

    from graphtier.v1 import jobs_pb2

    with grpc.insecure_channel(f"unix:{daemon.socket}") as channel:
        return list(
            channel.unary_unary(
                "/graphtier.v1.JobService/ListJobs",
                request_serializer=jobs_pb2.ListJobsRequest.SerializeToString,
                response_deserializer=jobs_pb2.ListJobsResponse.FromString,
            )(jobs_pb2.ListJobsRequest(), timeout=10).jobs
        )


# ---------------------------------------------------------------- the table

CASES: list[Case | Covered] = [
    # prepare: every refused prepare (with --overwrite of `good`) leaves `good` verifying and nothing half-written
    Case(
        "prepare-dev-zero",
        "files",
        "edges:/dev/zero (input without end)",
        _prepare_with(lambda work: "edges:/dev/zero"),
        ("/dev/zero", "character device"),
    ),
    Case(
        "prepare-fifo",
        "files",
        "edges: a FIFO no one writes to",
        _prepare_with(_fifo),
        ("edges.fifo", "FIFO"),
    ),
    Case("prepare-truncated-npz", "files", "an npz archive cut in half", _prepare_with(_truncated_npz), ("cut.npz",)),
    Case(
        "prepare-bitflip-npz", "files", "an npz archive with a flipped byte", _prepare_with(_flipped_npz), ("flip.npz",)
    ),
    Case(
        "prepare-truncated-gzip",
        "files",
        "a gzipped edge list cut in half",
        _prepare_with(_truncated_gzip),
        ("cut.txt.gz", "truncated or corrupt gzip"),
    ),
    Case("prepare-truncated-pickle", "files", "a Planetoid pickle cut short", _truncated_pickle, ("ind.cora.tx",)),
    Case("prepare-nan-features", "values", "a NaN in the features", _prepare_with(_nan_features), ("nan.npz", "NaN")),
    Case(
        "prepare-out-of-range-ids",
        "values",
        "edge ids past the node count",
        _prepare_with(_out_of_range_ids),
        ("ids.npz",),
    ),
    Case(
        "prepare-label-over-bound",
        "values",
        "a label >= --num-classes",
        _prepare_with(_labels({13: 9}), "--num-classes", "3"),
        ("label 9 (node 13)", "--num-classes 3"),
    ),
    Case(
        "prepare-negative-label", "values", "a label of -4", _prepare_with(_labels({17: -4})), ("label -4 (node 17)",)
    ),
    Case(
        "prepare-snap-header",
        "files",
        "an edge list with a header line lacking '#'",
        _prepare_with(_edges(_SNAP_HEADER)),
        ("line 2", "FromNodeId", "--skip-rows 1"),
    ),
    Case(
        "prepare-garbage-id",
        "values",
        "a non-integer id mid-file",
        _prepare_with(_edges(_MID_GARBAGE)),
        ("line 21", "'x9' is not an integer"),
    ),
    Case(
        "prepare-bad-npy-features",
        "files",
        "a features .npy whose magic is damaged",
        lambda c: _prepare(c, _bad_npy_features(c.work), "--features", str(c.work / "f.npy")),
        ("f.npy",),
    ),
    Case(
        "prepare-missing-source",
        "flags",
        "a source path that does not exist",
        lambda c: _prepare(c, f"edges:{c.work / 'absent.txt'}"),
        ("absent.txt", "does not exist"),
    ),
    Case(
        "prepare-bad-budget",
        "flags",
        "--memory-budget lots",
        lambda c: c.cli(
            "dataset",
            "prepare",
            f"edges:{c.work}/x",
            "--name",
            "good",
            "--out",
            str(c.root),
            "--overwrite",
            "--memory-budget",
            "lots",
        ),
        ("lots",),
    ),
    Case(
        "prepare-bad-option",
        "flags",
        "an edges-only option on an npz source",
        lambda c: _prepare(c, f"npz:{_npz(c.work / 'g.npz')}", "--skip-rows", "2"),
        ("skip_rows", "npz"),
    ),
    Case(
        "prepare-bad-name",
        "flags",
        "a dataset name with a path in it",
        lambda c: c.cli("dataset", "prepare", _edges(_EDGES)(c.work), "--name", "../escape", "--out", str(c.root)),
        ("../escape",),
    ),
    Case(
        "prepare-split-plain-npy",
        "files",
        "--split naming a plain .npy (one array, no named parts)",
        _split(_plain_npy_split),
        ("plain.npy", "one array", "np.savez"),
    ),
    Case(
        "prepare-split-truncated-npz",
        "files",
        "--split naming an .npz cut in half",
        _split(_truncated_split),
        ("split.npz", "BadZipFile"),
    ),
    Case(
        "prepare-split-fifo",
        "files",
        "--split naming a FIFO no one writes to (refused before it is opened: no wait, nothing half-written)",
        _split(_fifo_split),
        ("split.fifo", "FIFO", "--split"),
    ),
    Case(
        "prepare-features-fifo",
        "files",
        "--features naming a FIFO",
        _fifo_features,
        ("features.fifo", "FIFO", "--features"),
    ),
    Case(
        "prepare-split-negative-mask",
        "values",
        "an integer train_mask holding -1",
        _split(_negative_mask_split),
        ("neg.npz", "train_mask", "-1 at index 17"),
    ),
    Case(
        "prepare-split-without-val-test",
        "values",
        "a split of train nodes alone: taken, with a note for each missing part",
        _split_without_val_and_test,
        ("has no validation nodes", "has no test nodes"),
        expect_exit=0,
        handled=True,
    ),
    # prepared datasets damaged after prepare: `inspect --verify` and the daemon's load both refuse, naming the file
    Case(
        "dataset-truncated-features",
        "files",
        "features.npy cut short",
        _damaged(_in("features.npy", _truncate), "bad-cut"),
        ("features.npy",),
    ),
    Case(
        "dataset-bitflip-features",
        "files",
        "a flipped bit in features.npy (same size)",
        _damaged(_in("features.npy", _flip), "bad-feat"),
        ("features.npy",),
    ),
    Case(
        "dataset-bitflip-structure",
        "files",
        "a flipped bit in row.npy (the CSC structure)",
        _damaged(_in("row.npy", _flip), "bad-row"),
        ("row.npy",),
    ),
    Case(
        "dataset-bitflip-colptr",
        "files",
        "a flipped bit in colptr.npy",
        _damaged(_in("colptr.npy", lambda p: _flip(p, 0.9, 0x01)), "bad-colptr"),
        ("colptr.npy",),
    ),
    Case(
        "dataset-npy-header",
        "files",
        "labels.npy with a damaged header",
        _damaged(_in("labels.npy", _npy_header), "bad-header"),
        ("labels.npy",),
    ),
    Case(
        "dataset-colptr-decreasing",
        "files",
        "colptr.npy decreasing at index 300, checksums recomputed to match",
        _damaged(_resealed("colptr", _set(300, 1 << 40)), "bad-order"),
        ("bad-order", "colptr", "index 301"),
    ),
    Case(
        "dataset-row-out-of-range",
        "files",
        "row.npy holding node id 5000 of 1024 at index 77, checksums recomputed to match",
        _damaged(_resealed("row", _set(77, 5000)), "bad-ids"),
        ("bad-ids", "row", "5000", "index 77"),
    ),
    Case(
        "job-on-row-out-of-range",
        "files",
        "a job on a dataset whose row.npy holds an id out of range (checksums recomputed): `job status` in one line",
        _damaged_job(_resealed("row", _set(77, 5000)), "bad-job-ids"),
        ("bad-job-ids", "row", "index 77"),
        expect_exit=None,
    ),
    Case(
        "dataset-manifest-swapped",
        "files",
        "manifest.json of another dataset put in place of this one's",
        _damaged(_swapped_manifest, "bad-swap"),
        ("manifest mismatch", "manifest.json"),
        expect_exit=None,
    ),
    Case(
        "dataset-manifest-garbage",
        "files",
        "manifest.json that is not JSON",
        _damaged(_in("manifest.json", lambda p: p.write_text("{not json")), "bad-manifest"),
        ("manifest.json",),
    ),
    # job specs: refused at submit, nothing created
    Case(
        "spec-bool-epochs", "specs", "YAML `epochs: true`", _submit(spec="dataset: good\nepochs: true\n"), ("epochs",)
    ),
    Case(
        "spec-unknown-key", "specs", "a YAML key no JobSpec has", _submit(spec="dataset: good\nepoch: 3\n"), ("epoch",)
    ),
    Case("spec-yaml-syntax", "specs", "YAML that does not parse", _submit(spec="dataset: [good\n"), ("job.yaml",)),
    Case(
        "spec-not-a-mapping", "specs", "a YAML list instead of a mapping", _submit(spec="- good\n- 3\n"), ("job.yaml",)
    ),
    Case("spec-bad-fanout", "specs", "--fanout abc", _submit("--dataset", "good", "--fanout", "abc"), ("abc",)),
    Case(
        "spec-zero-batch", "specs", "--batch-size 0", _submit("--dataset", "good", "--batch-size", "0"), ("batch_size",)
    ),
    Case("spec-negative-epochs", "specs", "--epochs -1", _submit("--dataset", "good", "--epochs", "-1"), ("epochs",)),
    Case(
        "spec-unknown-dataset",
        "specs",
        "a dataset that was never prepared",
        _submit("--dataset", "nosuch"),
        ("nosuch",),
        expect_exit=1,  # the daemon found no such dataset: a failure, not a malformed command
    ),
    Case(
        "spec-bad-nonfinite",
        "specs",
        "--on-nonfinite ignore",
        _submit("--dataset", "good", "--on-nonfinite", "ignore"),
        ("on_nonfinite", "ignore"),
    ),
    Case(
        "spec-bool-nonfinite",
        "specs",
        "YAML `on_nonfinite: true`",
        _submit(spec="dataset: good\non_nonfinite: true\n"),
        ("on_nonfinite",),
    ),
    Case(
        "spec-missing-file",
        "specs",
        "--spec naming no file",
        lambda c: _submit("--spec", str(c.work / "absent.yaml"))(c),
        ("absent.yaml",),
    ),
    Case(
        "script-defaults-unhashable",
        "specs",
        "a script's JOB_DEFAULTS = {[1]: 2}",
        _script("JOB_DEFAULTS = {[1]: 2}\n"),
        ("train.py:1", "JOB_DEFAULTS", "literal dict"),
    ),
    Case(
        "script-defaults-deep",
        "specs",
        "a script's JOB_DEFAULTS with 100,000 nested unary minus signs",
        _script("JOB_DEFAULTS = {'lr': " + "-" * 100_000 + "1}\n"),
        ("train.py", "nested too deeply"),
    ),
    Case(
        "script-defaults-huge",
        "specs",
        "a script whose JOB_DEFAULTS holds a 5-million-item list (15 MB): refused at once, not parsed for minutes",
        _script(_HUGE_DEFAULTS),
        ("train.py", "MiB", "JOB_DEFAULTS"),
    ),
    Case(
        "script-defaults-long-list",
        "specs",
        "a script whose JOB_DEFAULTS holds a 50,000-item list",
        _script("JOB_DEFAULTS = {'fanouts': [" + "5, " * 50_000 + "]}\n"),
        ("train.py:1", "10,000 values"),
    ),
    Case(
        "script-does-not-parse",
        "specs",
        "a script that does not parse: its JOB_DEFAULTS cannot be read (refused, not silently dropped)",
        _script("import os\ndef broken(:\nJOB_DEFAULTS = {'epochs': 3}\n"),
        ("train.py:2", "does not parse", "JOB_DEFAULTS"),
    ),
    Case(
        "attach-without-secret",
        "access",
        "AttachJob with a launch id anyone reads in `ps` and no launch secret",
        _who("no-secret"),
        ("INVALID_ARGUMENT", "launch_secret", "joins no job"),
        expect_exit=None,
    ),
    Case(
        "unidentified-submit",
        "access",
        "SubmitJob from a caller that did not identify itself (no session credential)",
        _who("unidentified"),
        ("UNAUTHENTICATED", "no session credential", ".identity"),
        expect_exit=None,
    ),
    Case(
        "forged-session",
        "access",
        "SubmitJob with a session credential for root's uid that the daemon never issued",
        _who("forged"),
        ("UNAUTHENTICATED", "not issued by this daemon"),
        expect_exit=None,
    ),
    Covered(
        "cross-user-access",
        "access",
        "two users of one daemon: each one's attach (even with the launch's secret), cancel, events and logs, "
        "progress reports and channels (even with the job's token), the job's dataset copy and log file, a force "
        "unload that would cancel it: refused to the other, naming the owner",
        "tests/service/daemon/test_daemon_tenants.py::test_each_users_jobs_are_refused_to_the_other",
    ),
    Case(
        "daemon-config-not-mapping",
        "specs",
        "graphtierd --config with a YAML list",
        _daemon_config("- 1\n- 2\n"),
        ("graphtierd.yaml",),
    ),
    Case(
        "daemon-config-bad-value",
        "specs",
        "graphtierd --config with max_running_jobs: lots",
        _daemon_config("max_running_jobs: lots\n"),
        ("max_running_jobs",),
    ),
    Case(
        "daemon-long-runtime-dir",
        "flags",
        "graphtierd --runtime-dir of 85 bytes (its socket fits a Unix socket path, its forkserver's would not)",
        _long_runtime_dir,
        ("runtime_dir", "too long", "at most 71 bytes"),
    ),
    Covered(
        "spec-file-keys",
        "specs",
        "a job spec or daemon config naming a key twice, a misspelt key (`fanout:`), per-relation and plain hops "
        "that disagree, YAML broken mid-file: refused in one line naming the key, its lines or the field meant",
        "tests/launcher/cli/test_cli_job.py::test_a_key_given_twice_or_hops_that_disagree_are_refused_naming_them",
    ),
    Covered(
        "link-split-misleading-pairs",
        "files",
        "--edge-split files:DIR with an empty val.txt, a self-loop, a pair in val and test, or a negative that is "
        "an edge: refused naming the file and pair, nothing prepared",
        "tests/service/prepared/test_edge_split.py::test_pair_files_that_would_evaluate_nothing_or_mislead_are_refused",
    ),
    Covered(
        "daemon-bad-flags",
        "flags",
        "graphtierd flags that cannot work (--shm-budget 101%, --idle-unload nan, ...)",
        "tests/service/daemon/test_daemon_tcp_security.py::test_daemon_settings_that_cannot_work_are_refused_with_one_clear_line",
    ),
    # fuzzed gRPC and HTTP against the corpus daemon: refused with a status naming the cause, daemon still serving
    Case(
        "grpc-random-bytes",
        "fuzz",
        "random bytes to every RPC",
        _fuzz("random"),
        ("is not a valid graphtier.v1",),
        expect_exit=None,
    ),
    Case(
        "grpc-oversized",
        "fuzz",
        "a 6 MiB message to every RPC",
        _fuzz("oversized"),
        ("larger than max",),
        expect_exit=None,
    ),
    Case(
        "grpc-wrong-types",
        "fuzz",
        "every field with the wrong wire type, to every RPC",
        _fuzz("wrong-heterogeneous"),
        ("INVALID_ARGUMENT",),
        expect_exit=None,
    ),
    Case(
        "grpc-huge-strings",
        "fuzz",
        "3 MiB in every string field of every RPC",
        _fuzz("huge"),
        ("INVALID_ARGUMENT",),
        expect_exit=None,
    ),
    Case("http-random-paths", "fuzz", "45 random and hostile paths", _http("paths"), ("404",), expect_exit=None),
    Case(
        "http-huge-queries", "fuzz", "1 MiB and 20,000-parameter query strings", _http("queries"), (), expect_exit=None
    ),
    # processes: each needs a job running or a daemon to kill, set up by the test that covers it
    Covered(
        "kill9-daemon-mid-job",
        "processes",
        "kill -9 of the daemon while a job runs: its processes go, segments reclaimed",
        "tests/service/daemon/test_daemon_lifecycle.py::test_kill9_of_the_daemon_mid_job_takes_its_processes_down",
    ),
    Covered(
        "kill9-daemon-idle",
        "processes",
        "kill -9 of an idle daemon, then a new one recovers the socket and segments",
        "tests/service/daemon/test_daemon_lifecycle.py::test_ready_refuse_attach_kill9_recover_sigterm",
    ),
    Covered(
        "kill9-daemon-job-history",
        "processes",
        "kill -9 of the daemon: its running job is failed naming it at the next start",
        "tests/service/daemon/jobs/test_daemon_job_history.py::test_history_survives_restart_and_kill9_and_ids_are_not_reused",
    ),
    Covered(
        "kill9-producer",
        "processes",
        "kill -9 of a producer mid-job: the job fails naming pid and signal",
        "tests/service/daemon/jobs/test_daemon_jobs_e2e.py::test_cancel_and_killed_producer_on_one_shared_dataset",
    ),
    Covered(
        "kill9-rank",
        "processes",
        "kill -9 of a trainer rank: torchrun restarts it and it resumes",
        "tests/service/daemon/jobs/test_daemon_jobs_e2e.py::test_a_killed_rank_is_restarted_by_torchrun_and_resumes",
    ),
    Covered(
        "kill9-prepare",
        "processes",
        "kill -9 of `dataset prepare` mid-write: nothing under the name, reclaimed by the next writer",
        "tests/service/prepared/test_prepare.py::test_crash_while_writing_is_reclaimed_by_the_next_writer",
    ),
    Case(
        "sigstop-rank",
        "processes",
        "SIGSTOP of a trainer rank mid-job: the job fails within the stall timeout, naming the rank",
        _sigstop_rank,
        ("rank 0", "stopped"),
        expect_exit=None,
        deadline_units=40,
    ),
    Case(
        "sigstop-agent",
        "processes",
        "SIGSTOP of a job's torchrun agent mid-job: the job fails within the stall timeout, naming the agent",
        _sigstop_agent,
        ("torchrun agent", "stopped"),
        expect_exit=None,
        deadline_units=40,
    ),
    Case(
        "kill9-rank-no-restarts",
        "processes",
        "kill -9 of a job's rank without --max-restarts: `job status` names the rank and the signal",
        _kill9_rank_without_restarts,
        ("rank 0", "SIGKILL"),
        expect_exit=3,
        deadline_units=40,
    ),
    Case(
        "sigstop-daemon",
        "processes",
        "graphtier job list / metrics while the daemon is stopped (SIGSTOP): `not answering` within seconds",
        _stopped_daemon,
        ("not answering", "kill -CONT"),
        expect_exit=1,
    ),
    Case(
        "attached-job-shows-running",
        "processes",
        "a job a user's `python train.py` registers while the daemon's one job slot is taken: running, with its "
        "progress (its ranks run whatever the queue says), not pending behind the other job",
        _attached_rank("attached-job-shows-running"),
        ("RUNNING", "step"),
        expect_exit=None,
        handled=True,
        deadline_units=60,
    ),
    Case(
        "kill9-daemon-under-attached-rank",
        "processes",
        "kill -9 of the daemon under a rank that registered its job with graphtier.connect(): the rank ends at "
        "once, exit status 1, with one line saying the daemon died",
        _attached_rank("kill9-daemon-under-attached-rank"),
        ("graphtier daemon (pid", "ended while rank 0", "killed or crashed"),
        expect_exit=1,
        deadline_units=60,
    ),
    Case(
        "kill9-daemon-leaves-nothing",
        "processes",
        "kill -9 of a daemon: its reaper removes its scratch directory (pymp-*), sockets, endpoints and lock, its "
        "forkserver ends, its segments are reclaimed, without waiting for the next daemon",
        _attached_rank("kill9-daemon-leaves-nothing"),
        ("its reaper removed", "tmp", "daemon.sock"),
        expect_exit=None,
        handled=True,
        deadline_units=60,
    ),
    Covered(
        "forkserver-ends-with-daemon",
        "processes",
        "a daemon stopped with SIGTERM (`cluster stop`) waits for its forkserver: nothing of it outlives it",
        "tests/service/daemon/test_daemon_readiness.py::test_the_scratch_directory_lives_and_dies_with_the_daemon",
    ),
    Covered(
        "sigstop-producer",
        "processes",
        "SIGSTOP of a producer: the job fails within the stall timeout naming it",
        "tests/service/daemon/jobs/test_daemon_jobs_e2e.py::test_a_stalled_producer_fails_its_job_naming_it",
    ),
    Covered(
        "kill9-consumer",
        "processes",
        "kill -9 of a channel's consumer: the producer exits cleanly, segments go",
        "tests/service/pipeline/test_pipeline_faults.py::test_a_killed_consumer_makes_the_producer_exit_cleanly",
    ),
    Covered(
        "features-overwritten-mid-job",
        "values",
        "features.npy rewritten in place during a job reading storage rows (mmap, direct + window): the job "
        "fails naming the file and the block of rows",
        "tests/service/daemon/jobs/test_daemon_storage_integrity.py::"
        "test_features_overwritten_during_a_job_fail_it_naming_file_and_block",
    ),
    Covered(
        "event-stream-flood",
        "processes",
        "six times more followed event streams than gRPC workers: GetJob and ListJobs answer at once, one "
        "stream over --max-event-streams is refused naming it",
        "tests/service/daemon/jobs/test_daemon_event_streams.py::test_many_followed_streams_leave_unary_calls_answering",
    ),
    Covered(
        "full-disk-checkpoint",
        "files",
        "a checkpoint written to a full disk: the error names the file and the disk, nothing half-written is kept",
        "tests/launcher/runtime/test_runtime_checkpoint.py::test_a_full_disk_names_the_checkpoint_and_the_disk",
    ),
    Covered(
        "dataset-permissions",
        "access",
        "a prepared dataset is its owner's alone (0700/0600); --dataset-group lets one group read it",
        "tests/service/prepared/test_dataset_permissions.py::test_a_dataset_is_readable_by_its_owner_only",
    ),
    Covered(
        "leftover-trash-link",
        "files",
        "a .trash-<name>-* link left by an older --overwrite over a link: unlinked, its target kept",
        "tests/launcher/cli/test_cli_prepare_overwrite.py::test_leftover_trash_links_are_unlinked_and_their_targets_kept",
    ),
    Covered(
        "leftover-pymp-after-kill9",
        "processes",
        "<runtime>/tmp/pymp-* left by a daemon killed with -9: removed by its reaper, or by the next daemon's start "
        "when the reaper was killed too",
        "tests/service/daemon/test_daemon_readiness.py::test_the_scratch_directory_lives_and_dies_with_the_daemon",
    ),
    Covered(
        "nan-features-consistent",
        "values",
        "NaN features with matching checksums: the job fails naming rank and step",
        "tests/service/daemon/jobs/test_daemon_nonfinite.py::test_nan_features_fail_the_job_naming_rank_and_step",
    ),
    Covered(
        "forged-channel",
        "access",
        "a forged OpenChannel/ReportProgress from a non-job process is refused",
        "tests/service/daemon/jobs/test_daemon_channel_security.py::test_forged_channel_calls_are_refused_and_no_foreign_process_is_signalled",
    ),
    Covered(
        "tcp-without-token",
        "access",
        "TCP calls without TLS or the token are refused",
        "tests/service/daemon/test_daemon_tcp_security.py::test_tcp_needs_tls_and_the_token",
    ),
    Covered(
        "huge-strings-log",
        "fuzz",
        "16 refused calls with 3 MB strings keep daemon.log small",
        "tests/service/daemon/test_daemon_long_inputs.py::test_refused_calls_with_huge_strings_do_not_grow_the_log",
    ),
    Covered(
        "full-disk-prepare",
        "files",
        "prepare onto a full disk: one line, nothing left",
        "tests/launcher/cli/test_cli_prepare_errors.py::test_a_full_disk_is_one_line_and_leaves_nothing",
    ),
]


def wait_for(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()


def endpoints(runtime_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((runtime_dir / "endpoints.json").read_text())
    except (OSError, ValueError):
        return None
