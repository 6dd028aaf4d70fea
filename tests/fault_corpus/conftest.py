"""The corpus's fixtures (one good dataset, one real graphtierd, the CLI) and its summary table."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from fault_cases import CASES, STALL_TIMEOUT_S, Covered, endpoints, wait_for
from fault_checks import COVERED_OUTCOMES, VERDICTS, Outcome, run_processes, run_segments


class CorpusDaemon:
    """`python -m graphtier.service.daemon` serving the corpus's dataset root."""

    def __init__(self, runtime_dir: Path, dataset_root: Path, output: Path) -> None:
        self.runtime_dir, self.dataset_root = runtime_dir, dataset_root
        with open(output, "wb") as out:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "graphtier.service.daemon",
                    "--runtime-dir",
                    str(runtime_dir),
                    "--dataset-root",
                    str(dataset_root),
                    "--producer-stall-timeout",
                    str(STALL_TIMEOUT_S),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        if not wait_for(
            lambda: (endpoints(runtime_dir) or {}).get("pid") == self.popen.pid or self.popen.poll() is not None, 120
        ):
            raise RuntimeError(f"graphtierd not ready after 120 s: {output.read_text(errors='replace')[-2000:]}")
        if self.popen.poll() is not None:
            raise RuntimeError(
                f"graphtierd exited {self.popen.returncode}: {output.read_text(errors='replace')[-2000:]}"
            )
        info = endpoints(runtime_dir) or {}
        self.socket, self.http_url, self.log_file = Path(info["grpc_unix"]), info["http_url"], Path(info["log_file"])

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_size(self) -> int:
        return self.log_file.stat().st_size if self.log_file.exists() else 0

    def log_since(self, mark: int) -> str:
        with open(self.log_file, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    def health(self) -> str:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        with grpc.insecure_channel(f"unix:{self.socket}") as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
            except grpc.RpcError as exc:
                return exc.code().name
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

    def jobs_created_since_start(self) -> list[str]:
        """A fact for every job this daemon holds: no corpus case may create one."""
        import grpc

        from graphtier.v1 import jobs_pb2

        with grpc.insecure_channel(f"unix:{self.socket}") as channel:
            reply = channel.unary_unary(
                "/graphtier.v1.JobService/ListJobs",
                request_serializer=jobs_pb2.ListJobsRequest.SerializeToString,
                response_deserializer=jobs_pb2.ListJobsResponse.FromString,
            )(jobs_pb2.ListJobsRequest(), timeout=10)
        return [f"job {job.job_id} was created ({job.state})" for job in reply.jobs]

    def stop(self) -> int:
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(60)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            return self.popen.wait()


@dataclass
class Corpus:
    """What a case works with: the dataset root (holding `good`), the daemon, a scratch directory."""

    root: Path
    shared: Path
    daemon: CorpusDaemon
    home: Path
    work: Path = Path()

    def cli(self, *args: str, timeout: float = 180) -> Outcome:
        """`graphtier ARGS` as a user runs it; refused when the exit status is not 0."""
        env = {**os.environ, "GRAPHTIER_HOME": str(self.home), "COLUMNS": "200"}
        try:
            done = subprocess.run(
                [sys.executable, "-m", "graphtier.launcher.cli", *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                cwd=self.work,
            )
        except subprocess.TimeoutExpired as exc:
            return Outcome(
                refused=True,
                output=str(exc.stdout or "") + str(exc.stderr or ""),
                exit_code=None,
                facts=[f"graphtier {' '.join(args)[:80]} hung for {timeout} s"],
            )
        return Outcome(refused=done.returncode != 0, output=done.stdout + done.stderr, exit_code=done.returncode)

    def unload(self, name: str) -> None:
        """UnloadDataset `name` with force (a no-op when it is not loaded)."""
        import grpc

        from graphtier.v1 import datasets_pb2

        with grpc.insecure_channel(f"unix:{self.daemon.socket}") as channel:
            try:
                channel.unary_unary(
                    "/graphtier.v1.DatasetService/UnloadDataset",
                    request_serializer=datasets_pb2.UnloadDatasetRequest.SerializeToString,
                )(datasets_pb2.UnloadDatasetRequest(name=name, force=True), timeout=60)
            except grpc.RpcError:
                pass

    def load_dataset(self, name: str) -> Outcome:
        """The daemon's LoadDataset for `name` (unloaded again if it wrongly succeeds)."""
        import grpc

        from graphtier.v1 import datasets_pb2

        mark = self.daemon.log_size()
        with grpc.insecure_channel(f"unix:{self.daemon.socket}") as channel:
            call = channel.unary_unary(
                "/graphtier.v1.DatasetService/LoadDataset",
                request_serializer=datasets_pb2.LoadDatasetRequest.SerializeToString,
                response_deserializer=datasets_pb2.LoadDatasetResponse.FromString,
            )
            try:
                call(datasets_pb2.LoadDatasetRequest(name=name), timeout=120)
            except grpc.RpcError as exc:
                return Outcome(
                    refused=True,
                    output=f"LoadDataset {exc.code().name}: {exc.details()}",
                    log=self.daemon.log_since(mark),
                )
        self.unload(name)
        return Outcome(refused=False, output=f"LoadDataset OK for {name}", log=self.daemon.log_since(mark))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, shared_datasets):
    """The good dataset `good` (R-MAT scale 10) in a fresh root, served by one graphtierd for the whole corpus."""
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    base = tmp_path_factory.mktemp("corpus")
    root = base / "datasets"
    prepare_dataset(
        PrepareConfig(
            source="synthetic:rmat",
            name="good",
            undirected=True,
            root=root,
            source_options={"scale": 10, "feature_dim": 8},
        )
    )
    segments_before, processes_before = run_segments(), run_processes()
    daemon = CorpusDaemon(base / "run", root, base / "graphtierd.out")
    try:
        yield Corpus(root=root, shared=shared_datasets, daemon=daemon, home=base / "home")
    finally:
        code = daemon.stop()
        assert code == 0, f"the corpus daemon exited {code} on SIGTERM"
        wait_for(lambda: not (run_processes() - processes_before), 30)
        assert not (run_processes() - processes_before), "the corpus daemon left processes behind"
        assert not (run_segments() - segments_before), "the corpus daemon left shared-memory segments behind"


class _CoveredObserver:
    """Records the outcome of every test a `Covered` row names (a plugin: it sees the whole session's
    reports, where a conftest hook sees only this directory's)."""

    covered = frozenset(row.test for row in CASES if isinstance(row, Covered))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = report.nodeid.split("[")[0]  # a parametrized test's rows count as one: failed if any row failed
        if test not in self.covered or (report.when != "call" and report.outcome == "passed"):
            return
        if COVERED_OUTCOMES.get(test) != "failed":
            COVERED_OUTCOMES[test] = report.outcome


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("fault-corpus-covered"):
        config.pluginmanager.register(_CoveredObserver(), "fault-corpus-covered")


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not VERDICTS and not COVERED_OUTCOMES:
        return
    write = terminalreporter.write_line
    terminalreporter.section("fault corpus")
    run = list(VERDICTS.values())
    for verdict in run:
        write(
            f"  {'ok  ' if verdict.ok else 'FAIL'} {verdict.case}"
            + ("" if verdict.ok else f": {'; '.join(verdict.problems + verdict.leaks)[:300]}")
        )
    for row in CASES:
        if isinstance(row, Covered):
            write(
                f"  {COVERED_OUTCOMES.get(row.test, 'not run in this test run'):<8} {row.id} "
                f"(by {row.test.split('::')[-1]})"
            )
    covered_failed = sum(1 for outcome in COVERED_OUTCOMES.values() if outcome == "failed")
    write(
        f"  cases {len(CASES)} ({len(run)} run here, {len(COVERED_OUTCOMES)} covered by the tests this run ran, "
        f"{covered_failed} of them failed); silent successes {sum(v.silent_success for v in run)}, "
        f"unnamed refusals {sum(v.unnamed for v in run)}, tracebacks {sum(v.traceback for v in run)}, "
        f"data lost {sum(v.data_lost for v in run)}, leaks {sum(bool(v.leaks) for v in run)}"
    )
