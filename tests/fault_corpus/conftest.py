"""The corpus's fixtures (one good dataset, one real graphtierd, the CLI), the time a case may take,
and its summary table.

Run alone (`pytest tests/fault_corpus`), the corpus also collects the tests its `Covered` rows name,
so every row runs and has a verdict; in the whole suite those tests run where they are.

Time is judged against the machine's load, never a fixed wall time: the corpus measures one unit,
the start of the `graphtier` command (`graphtier --version`, which every CLI case pays at least
once), when it begins, and scales it by how much busier the machine is since (the load average
per core). Each case gets `deadline_units` of them; a command still running at its case's
deadline is killed and counted as a hang, and so is a case that returns after it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fault_cases import CASES, STALL_TIMEOUT_S, Covered, endpoints, wait_for
from fault_checks import COVERED_OUTCOMES, VERDICTS, Outcome, run_processes, run_segments

REPO = Path(__file__).resolve().parents[2]
MIN_DEADLINE_S = 30.0  # a case's deadline, however fast the unit: process start-up varies by more


def _load_per_core() -> float:
    return os.getloadavg()[0] / (os.cpu_count() or 1)


@dataclass(frozen=True)
class TimeUnit:
    """The start of the `graphtier` command when the corpus began, and the load then."""

    seconds: float
    load: float

    @classmethod
    def measure(cls) -> TimeUnit:
        load = _load_per_core()
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "graphtier.launcher.cli", "--version"], capture_output=True, timeout=300, check=True
        )
        return cls(time.monotonic() - started, load)

    def now(self) -> float:
        """The unit now: as measured, longer when the machine has become busier since."""
        return self.seconds * max(1.0, (1.0 + _load_per_core()) / (1.0 + self.load))


class CorpusDaemon:
    """`python -m graphtier.service.daemon` serving the corpus's dataset root (with `flags`)."""

    def __init__(self, runtime_dir: Path, dataset_root: Path, output: Path, *flags: str) -> None:
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
                    *flags,
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

    def session(self) -> tuple[tuple[str, str], ...]:
        """The call metadata of this process's session credential (what the graphtier client sends)."""
        from graphtier.contract.identity import identity_socket_path
        from graphtier.launcher.client.session import SessionSource

        return SessionSource(identity_socket_path(self.socket)).metadata()

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
    """What a case works with: the dataset root (holding `good`), the daemon, a scratch directory, and
    its deadline (`begin`)."""

    root: Path
    shared: Path
    daemon: CorpusDaemon
    home: Path
    unit: TimeUnit
    work: Path = Path()
    deadline: float = 0.0  # time.monotonic() by which the current case must be done
    hung: list[str] = field(default_factory=list)  # what of the current case outlived its deadline

    def begin(self, units: float) -> float:
        """Start a case that may take `units` time units (at least MIN_DEADLINE_S); its deadline in seconds."""
        budget = max(MIN_DEADLINE_S, units * self.unit.now())
        self.deadline, self.hung = time.monotonic() + budget, []
        return budget

    def left(self, cap: float | None = None) -> float:
        """Seconds the current case has left (at most `cap`), never less than a moment."""
        left = max(0.5, self.deadline - time.monotonic())
        return left if cap is None else min(cap, left)

    def run(self, argv: list[str], *, env: dict[str, str] | None = None, what: str = "") -> Outcome:
        """`argv` as a user runs it, killed at the case's deadline (a hang); refused when its exit status is not 0."""
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.left(),
                env=env,
                cwd=self.work,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            said = what or " ".join(argv)[:100]
            self.hung.append(f"{said} still ran at the case's deadline")
            return Outcome(
                refused=True,
                output=_text(exc.stdout) + _text(exc.stderr),
                exit_code=None,
                facts=[f"{said} hung (killed at the case's deadline)"],
                hung=True,
            )
        return Outcome(refused=done.returncode != 0, output=done.stdout + done.stderr, exit_code=done.returncode)

    def cli(self, *args: str) -> Outcome:
        """`graphtier ARGS` as a user runs it (see `run`)."""
        env = {**os.environ, "GRAPHTIER_HOME": str(self.home), "COLUMNS": "200"}
        argv = [sys.executable, "-m", "graphtier.launcher.cli", *args]
        return self.run(argv, env=env, what=f"graphtier {' '.join(args)[:80]}")

    def tidy(self, *args: str) -> None:
        """`graphtier ARGS` to clean up after a case (a cancel): not held to the case's deadline, not judged."""
        env = {**os.environ, "GRAPHTIER_HOME": str(self.home)}
        argv = [sys.executable, "-m", "graphtier.launcher.cli", *args]
        subprocess.run(argv, capture_output=True, timeout=120, env=env, cwd=self.work, stdin=subprocess.DEVNULL)

    def start_daemon(self, runtime_dir: Path, *flags: str) -> CorpusDaemon:
        """Another graphtierd of the corpus's dataset root, for a case that must kill or fill one."""
        return CorpusDaemon(runtime_dir, self.root, runtime_dir.parent / f"{runtime_dir.name}.out", *flags)

    def unload(self, name: str) -> None:
        """UnloadDataset `name` with force (a no-op when it is not loaded)."""
        import grpc

        from graphtier.v1 import datasets_pb2

        with grpc.insecure_channel(f"unix:{self.daemon.socket}") as channel:
            try:
                channel.unary_unary(
                    "/graphtier.v1.DatasetService/UnloadDataset",
                    request_serializer=datasets_pb2.UnloadDatasetRequest.SerializeToString,
                )(datasets_pb2.UnloadDatasetRequest(name=name, force=True), timeout=60, metadata=self.daemon.session())
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
                call(datasets_pb2.LoadDatasetRequest(name=name), timeout=self.left(), metadata=self.daemon.session())
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
    unit = TimeUnit.measure()
    daemon = CorpusDaemon(base / "run", root, base / "graphtierd.out")
    try:
        yield Corpus(root=root, shared=shared_datasets, daemon=daemon, home=base / "home", unit=unit)
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
    corpus = Path(__file__).resolve().parent
    given = [Path(str(arg).split("::")[0]).resolve() for arg in config.args]
    if given and all(path == corpus or corpus in path.parents for path in given):  # the corpus run alone
        config.args.extend(sorted({str(REPO / row.test) for row in CASES if isinstance(row, Covered)}))


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
    covered = [row for row in CASES if isinstance(row, Covered)]
    covered_run = sum(1 for row in covered if row.test in COVERED_OUTCOMES)
    covered_failed = sum(1 for row in covered if COVERED_OUTCOMES.get(row.test) == "failed")
    not_run = len(CASES) - len(run) - covered_run
    write(
        f"  cases {len(CASES)}: {len(run)} run here, {covered_run} by the tests they name ({covered_failed} of "
        f"those failed), {not_run} not run; silent successes {sum(v.silent_success for v in run)}, "
        f"unnamed refusals {sum(v.unnamed for v in run)}, tracebacks {sum(v.traceback for v in run)}, "
        f"hangs {sum(v.hang for v in run)}, data lost {sum(v.data_lost for v in run)}, "
        f"leaks {sum(bool(v.leaks) for v in run)}"
    )


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""
