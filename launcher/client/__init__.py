"""`DaemonClient`: talk to the local graphtier daemon from the CLI, a producer or a trainer rank.

Finds the daemon through `<runtime_dir>/endpoints.json` (written only once the daemon is
ready) or takes an explicit gRPC target. Methods take and return the contract's types
(`graphtier.contract`), never `_pb2` messages, and failures are `DaemonError`s with the
daemon's own message: the CLI prints them as one line. Neither the daemon nor torch is
imported here; the layouts a process attaches to come through `DataPlaneClient`. A service's
generated stubs and its contract conversions load when a method first calls it, and the daemon is
found without pydantic (`contract.runtime_dir`), so `graphtier job status`, which asks for its
job as a plain document (`get_job_document`, `job_document.py`), loads the jobs messages alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from graphtier.contract.environment import JOB_TOKEN_ENV
from graphtier.contract.errors import (
    DaemonError,
    DaemonNotAnsweringError,
    DaemonNotRunningError,
    DaemonRequestError,
    InvalidRequestError,
)
from graphtier.contract.identity import AUTH_HEADER, identity_socket_path
from graphtier.contract.jobs.state import JOB_TOKEN_HEADER
from graphtier.contract.runtime_dir import DaemonAddress, default_runtime_dir, read_daemon_address, running_daemon_pid
from graphtier.launcher.client.session import SessionSource

if TYPE_CHECKING:
    from graphtier.contract.cluster.models import ClusterView, PushResult
    from graphtier.contract.datasets import DatasetSummary, UnloadResult
    from graphtier.contract.endpoints import Endpoints
    from graphtier.contract.jobs.artifact import ArtifactManifest
    from graphtier.contract.jobs.progress import ProgressReport
    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.contract.jobs.state import JobState
    from graphtier.contract.jobs.view import JobEvent, JobInfo
    from graphtier.contract.status import DaemonStatus
    from graphtier.launcher.client.job_document import JobDocument

Reply = TypeVar("Reply")
START_HINT = "start one with `graphtier cluster start`"


def locate_daemon(runtime_dir: Path | None = None) -> DaemonAddress:
    """The address of the daemon running for `runtime_dir`; DaemonNotRunningError when there is none."""
    runtime_dir = Path(runtime_dir) if runtime_dir else default_runtime_dir()
    pid = running_daemon_pid(runtime_dir)
    if pid is None:
        raise DaemonNotRunningError(f"no graphtier daemon at {runtime_dir}; {START_HINT}")
    address = read_daemon_address(runtime_dir)
    if address is None or (pid > 0 and address.pid != pid):
        raise DaemonNotRunningError(
            f"the graphtier daemon at {runtime_dir} (pid {pid}) is still starting; wait for it or see its log "
            f"{runtime_dir / 'daemon.log'}"
        )
    return address


def process_state(pid: int) -> str | None:
    """The state letter of process `pid` (`/proc/<pid>/stat`: R, S, D, T stopped, t traced, Z...), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


def job_token_metadata() -> tuple[tuple[str, str], ...]:
    """The job token the daemon gave this process's job ($GRAPHTIER_JOB_TOKEN), as call metadata:
    what a rank needs to report progress and open its channel."""
    return ((JOB_TOKEN_HEADER, os.environ.get(JOB_TOKEN_ENV, "")),)


class DaemonClient:
    """A connection to one daemon; use as a context manager or call `close()`."""

    def __init__(
        self,
        target: str | None = None,
        *,
        runtime_dir: Path | None = None,
        http_url: str | None = None,
        timeout_s: float = 30.0,
        token: str | None = None,
        tls_cert: Path | None = None,
    ) -> None:
        """`target`: `unix:/path` or `HOST:PORT`; None = the Unix socket of the daemon in `runtime_dir`.
        Over TCP, `token` is the daemon's token (its token file) and `tls_cert` the certificate to
        trust (the daemon's `tls/server.crt`, or a CA's); without `tls_cert` the channel is plaintext,
        which a daemon accepts only when started with --insecure."""
        self.runtime_dir = Path(runtime_dir) if runtime_dir else default_runtime_dir()
        self.address: DaemonAddress | None = None  # the local daemon's, when found through runtime_dir
        if target is None:
            self.address = locate_daemon(self.runtime_dir)
            target = self.address.grpc_target
            http_url = http_url or self.address.http_url
        self.target = target
        self.http_url = http_url
        self.timeout_s = timeout_s
        self._metadata = ((AUTH_HEADER, f"Bearer {token}"),) if token else ()
        # on the Unix socket, who this process is: a credential from the daemon's identity socket
        unix = target.startswith("unix:")
        self._session = SessionSource(identity_socket_path(target[len("unix:") :])) if unix else None
        self._tls = tls_cert is not None
        if tls_cert is not None:
            try:
                trusted = Path(tls_cert).read_bytes()
            except OSError as exc:
                raise DaemonError(f"{tls_cert}: cannot read the certificate to trust ({exc.strerror})") from None
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=trusted))
        else:
            self._channel = grpc.insecure_channel(target)

    @cached_property
    def endpoints(self) -> Endpoints | None:
        """Everything the local daemon's endpoints.json says (validated; None for a client given a target);
        read on first use so a client that only calls needs no pydantic."""
        if self.address is None:
            return None
        from graphtier.contract.endpoints import read_endpoints

        endpoints = read_endpoints(self.runtime_dir)
        if endpoints is None or endpoints.pid != self.address.pid:
            raise DaemonNotRunningError(f"the graphtier daemon at {self.runtime_dir} (pid {self.address.pid}) is gone")
        return endpoints

    # Each service's stub, made (and its generated module imported) on first use.

    @cached_property
    def _health(self) -> Any:
        from grpc_health.v1 import health_pb2_grpc

        return health_pb2_grpc.HealthStub(self._channel)

    @cached_property
    def _datasets(self) -> Any:
        from graphtier.v1 import datasets_pb2_grpc

        return datasets_pb2_grpc.DatasetServiceStub(self._channel)

    @cached_property
    def _progress(self) -> Any:
        from graphtier.v1 import progress_pb2_grpc

        return progress_pb2_grpc.ProgressServiceStub(self._channel)

    @cached_property
    def _jobs(self) -> Any:
        from graphtier.v1 import jobs_pb2_grpc

        return jobs_pb2_grpc.JobServiceStub(self._channel)

    @cached_property
    def _channels(self) -> Any:
        from graphtier.v1 import channels_pb2_grpc

        return channels_pb2_grpc.ChannelServiceStub(self._channel)

    @cached_property
    def _cluster(self) -> Any:
        from graphtier.v1 import cluster_pb2_grpc

        return cluster_pb2_grpc.ClusterServiceStub(self._channel)

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _where(self) -> str:
        return str(self.runtime_dir) if self.address else self.target

    def _check_answering(self) -> None:
        """DaemonNotAnsweringError at once when the local daemon's process is stopped (SIGSTOP, Ctrl-Z, a
        debugger): its socket still accepts connections, so a call would only wait for its deadline."""
        pid = self.address.pid if self.address else 0
        if pid > 0 and process_state(pid) in ("T", "t"):
            raise DaemonNotAnsweringError(
                f"the graphtier daemon at {self._where()} (pid {pid}) is not answering: its process is stopped "
                f"(SIGSTOP, Ctrl-Z or a debugger); `kill -CONT {pid}` resumes it"
            )

    def _unanswered(self, details: str) -> DaemonError:
        """What a call that got no answer means: a daemon not answering when its process is alive, else none."""
        pid = self.address.pid if self.address else 0
        if pid > 0 and process_state(pid) not in (None, "Z"):
            self._check_answering()
            return DaemonNotAnsweringError(
                f"the graphtier daemon at {self._where()} (pid {pid}) is running but not answering ({details}); "
                f"see its log {self.runtime_dir / 'daemon.log'}"
            )
        return DaemonNotRunningError(f"no graphtier daemon at {self._where()} ({details}); {START_HINT}")

    def _call_metadata(self, extra: tuple[tuple[str, str], ...] = ()) -> tuple[tuple[str, str], ...]:
        """What every call carries: the token (TCP), the session credential (Unix socket), then `extra`."""
        session = self._session.metadata() if self._session is not None else ()
        return (*self._metadata, *session, *extra)

    def _call(
        self,
        method: Callable[..., Reply],
        request: Any,
        timeout_s: float | None = None,
        extra_metadata: tuple[tuple[str, str], ...] = (),
    ) -> Reply:
        self._check_answering()

        def invoke() -> Reply:
            return method(request, timeout=timeout_s or self.timeout_s, metadata=self._call_metadata(extra_metadata))

        try:
            return invoke()
        except grpc.RpcError as error:
            code, details = error.code(), error.details() or ""
            stale = code == grpc.StatusCode.UNAUTHENTICATED and "session credential sent" in details
            if not stale or self._session is None:
                raise self._failure(code, details) from None
        self._session.forget()  # a restarted daemon honours no earlier credential: ask for a new one, once
        try:
            return invoke()
        except grpc.RpcError as error:
            raise self._failure(error.code(), error.details() or "") from None

    def _failure(self, code: grpc.StatusCode, details: str) -> DaemonError:
        """The DaemonError a failed call with `code` and `details` is."""
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and self.address is not None:
            return self._unanswered(details)
        if code == grpc.StatusCode.UNAVAILABLE:
            where = self._where()
            if not self._tls and not self.target.startswith("unix:"):
                return DaemonNotRunningError(
                    f"no answer from {where} over plaintext TCP ({details}); a graphtier daemon's TCP listener is "
                    "TLS unless started with --insecure: pass tls_cert (its tls/server.crt) and its token"
                )
            return self._unanswered(details)
        return DaemonRequestError(code.name, details)

    # Health

    def health(self, service: str = "") -> str:
        """The health status name of `service` ('' = the whole daemon): SERVING, NOT_SERVING, ..."""
        from grpc_health.v1 import health_pb2

        reply = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service), timeout_s=5.0)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

    def wait_until_serving(self, timeout_s: float = 30.0) -> None:
        """Block until health is SERVING; DaemonNotRunningError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            try:
                last = self.health()
                if last == "SERVING":
                    return
            except DaemonError as error:
                last = str(error)
            time.sleep(0.1)
        raise DaemonNotRunningError(
            f"the graphtier daemon at {self._where()} is not serving after {timeout_s:.0f} s ({last})"
        )

    # Datasets

    def unload_dataset(self, name: str, *, force: bool = False) -> UnloadResult:
        from graphtier.contract.datasets import UnloadResult
        from graphtier.v1 import datasets_pb2

        reply = self._call(self._datasets.UnloadDataset, datasets_pb2.UnloadDatasetRequest(name=name, force=force))
        return UnloadResult(released_bytes=reply.released_bytes, cancelled_job_ids=list(reply.cancelled_job_ids))

    def list_datasets(self, *, include_prepared: bool = False) -> list[DatasetSummary]:
        from graphtier.contract import conversions
        from graphtier.v1 import datasets_pb2

        reply = self._call(
            self._datasets.ListDatasets, datasets_pb2.ListDatasetsRequest(include_prepared=include_prepared)
        )
        return [conversions.summary_from_proto(summary) for summary in reply.datasets]

    # Progress

    def report_progress(self, report: ProgressReport) -> bool:
        """Send one report; True when the job is being cancelled and the reporter should stop."""
        from graphtier.contract.jobs import conversions as job_conversions

        return self._call(
            self._progress.ReportProgress, job_conversions.report_to_proto(report), extra_metadata=job_token_metadata()
        ).cancel_requested

    # Jobs

    def submit_job(self, spec: JobSpec) -> JobInfo:
        """Start a job; the daemon validates the spec and loads its dataset first."""
        from graphtier.contract.jobs import conversions as job_conversions
        from graphtier.v1 import jobs_pb2

        request = jobs_pb2.SubmitJobRequest(spec=job_conversions.spec_to_proto(spec))
        return job_conversions.job_from_proto(self._call(self._jobs.SubmitJob, request, 600.0))

    def attach_job(
        self, spec: JobSpec, launch_id: str, node_rank: int, agent_pid: int, launch_secret: str
    ) -> tuple[JobInfo, str]:
        """This node's part of a launch another launcher started (a TrainJob's torchrun), found by the secret its
        ranks share: (job, job token)."""
        from graphtier.contract.jobs import conversions as job_conversions
        from graphtier.v1 import jobs_pb2

        request = jobs_pb2.AttachJobRequest(
            spec=job_conversions.spec_to_proto(spec),
            launch_id=launch_id,
            node_rank=node_rank,
            agent_pid=agent_pid,
            launch_secret=launch_secret,
        )
        reply = self._call(self._jobs.AttachJob, request, 600.0)
        return job_conversions.job_from_proto(reply.job), reply.job_token

    def get_job(self, job_id: str) -> JobInfo:
        from graphtier.contract.jobs import conversions as job_conversions
        from graphtier.v1 import jobs_pb2

        return job_conversions.job_from_proto(self._call(self._jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id)))

    def get_job_document(self, job_id: str) -> JobDocument:
        """`get_job`'s job as `--json` prints it, read from the wire without the contract's models."""
        from graphtier.launcher.client.job_document import job_document
        from graphtier.v1 import jobs_pb2

        return job_document(self._call(self._jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id)))

    def list_job_documents(self) -> list[JobDocument]:
        """Every job (`list_jobs()`) as `--json` prints it, read from the wire without the contract's models."""
        from graphtier.launcher.client.job_document import job_document
        from graphtier.v1 import jobs_pb2

        return [job_document(job) for job in self._call(self._jobs.ListJobs, jobs_pb2.ListJobsRequest()).jobs]

    def list_jobs(self, states: list[JobState] | None = None, dataset: str = "") -> list[JobInfo]:
        from graphtier.contract.jobs import conversions as job_conversions
        from graphtier.v1 import jobs_pb2

        request = jobs_pb2.ListJobsRequest(
            states=[job_conversions.state_to_proto(s) for s in states or []], dataset=dataset
        )
        return [job_conversions.job_from_proto(job) for job in self._call(self._jobs.ListJobs, request).jobs]

    def cancel_job(self, job_id: str, reason: str = "") -> JobInfo:
        """Cancel a job and return it once every one of its processes has stopped."""
        from graphtier.contract.jobs import conversions as job_conversions
        from graphtier.v1 import jobs_pb2

        request = jobs_pb2.CancelJobRequest(job_id=job_id, reason=reason)
        return job_conversions.job_from_proto(self._call(self._jobs.CancelJob, request, 120.0))

    def job_events(
        self, job_id: str, *, from_sequence: int = 0, follow: bool = False, include_logs: bool = False, node: str = ""
    ) -> Iterator[JobEvent]:
        """A job's events in order; with `follow`, until the job ends. `node`: of that node's part of a
        multi-node job (relayed by its coordinating daemon)."""
        from graphtier.contract.jobs import conversions as job_conversions
        from graphtier.v1 import jobs_pb2

        request = jobs_pb2.StreamJobEventsRequest(
            job_id=job_id, from_sequence=from_sequence, follow=follow, include_logs=include_logs, node=node
        )
        self._check_answering()
        stream = self._jobs.StreamJobEvents(
            request, timeout=None if follow else self.timeout_s, metadata=self._call_metadata()
        )
        try:
            for message in stream:
                yield job_conversions.event_from_proto(message)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                raise DaemonNotRunningError(
                    f"lost the graphtier daemon at {self._where()} ({error.details()})"
                ) from None
            raise DaemonRequestError(error.code().name, error.details() or "") from None
        finally:
            stream.cancel()

    def export_job(self, job_id: str, out: Path, *, timeout_s: float = 3600.0) -> ArtifactManifest:
        """Copy a succeeded job's exported model from the daemon into the directory `out` (made; it must
        not exist, or be empty), checked against its manifest; the manifest. DaemonRequestError naming why
        the daemon has none to send (the job did not succeed, its model expired, ...)."""
        import shutil

        from graphtier.contract.jobs.artifact import ArtifactError, read_manifest, weights_path
        from graphtier.v1 import jobs_pb2

        out = Path(out)
        if out.is_symlink():
            raise InvalidRequestError(f"--out {out}: a symbolic link; give a new directory (the link is left as it is)")
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise InvalidRequestError(f"--out {out}: exists and is not an empty directory; give a new one")
        self._check_answering()  # before anything is made: a stopped daemon leaves nothing behind
        made = [parent for parent in reversed(out.parents) if not parent.exists()]  # removed again on failure
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.parent / f".{out.name}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        files: dict[str, Any] = {}
        stream = None
        exported = False
        try:
            partial.mkdir()
            stream = self._jobs.ExportJob(
                jobs_pb2.ExportJobRequest(job_id=job_id), timeout=timeout_s, metadata=self._call_metadata()
            )
            for chunk in stream:
                name = Path(chunk.path).name
                if not name or name != chunk.path or name.startswith("."):
                    raise DaemonError(f"the daemon sent a file named {chunk.path!r}: not a plain file name")
                handle = files.get(name)
                if handle is None:
                    handle = files[name] = open(partial / name, "wb")  # closed below, whatever happens
                if handle.tell() != chunk.offset:
                    raise DaemonError(f"{name}: a piece at {chunk.offset} where {handle.tell()} was expected")
                handle.write(chunk.data)
            for handle in files.values():
                handle.close()
            manifest = read_manifest(partial)
            weights_path(partial, manifest)  # its size and sha256, as the manifest records them
            if out.exists():
                out.rmdir()  # empty, as checked first
            os.replace(partial, out)
            exported = True
            return manifest
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.UNAVAILABLE:
                raise self._unanswered(error.details() or "") from None
            raise DaemonRequestError(error.code().name, error.details() or "") from None
        except ArtifactError as exc:
            raise DaemonError(f"the exported model of job {job_id} arrived damaged: {exc}") from None
        finally:
            for handle in files.values():
                handle.close()
            if stream is not None:
                stream.cancel()
            shutil.rmtree(partial, ignore_errors=True)
            if not exported:
                for parent in reversed(made):  # the folders made for --out, innermost first, if still empty
                    with contextlib.suppress(OSError):
                        parent.rmdir()

    # Cluster

    def cluster_view(self) -> ClusterView:
        """Every node of the daemon's cluster (itself first), each asked now."""
        from graphtier.contract.cluster import conversions as cluster_conversions
        from graphtier.v1 import cluster_pb2

        return cluster_conversions.view_from_proto(
            self._call(self._cluster.GetCluster, cluster_pb2.GetClusterRequest())
        )

    def join_cluster(self, address: str, *, timeout_s: float = 120.0) -> ClusterView:
        """Have the daemon join the cluster of the daemon at `address`; the cluster as it then sees it."""
        from graphtier.contract.cluster import conversions as cluster_conversions
        from graphtier.v1 import cluster_pb2

        request = cluster_pb2.JoinClusterRequest(address=address)
        return cluster_conversions.view_from_proto(self._call(self._cluster.JoinCluster, request, timeout_s))

    def push_dataset(self, name: str, node: str, *, replace: bool = False, timeout_s: float = 3600.0) -> PushResult:
        """Have the daemon stream its prepared dataset `name` to peer `node` (checked, atomic there)."""
        from graphtier.contract.cluster import conversions as cluster_conversions
        from graphtier.v1 import cluster_pb2

        request = cluster_pb2.PushDatasetRequest(name=name, node=node, replace=replace)
        return cluster_conversions.push_from_proto(self._call(self._cluster.PushDataset, request, timeout_s))

    # Channels

    def release_channel(self, job_id: str, rank: int, reason: str = "") -> int:
        from graphtier.v1 import channels_pb2

        request = channels_pb2.ReleaseChannelRequest(job_id=job_id, rank=rank, reason=reason)
        return self._call(self._channels.ReleaseChannel, request, extra_metadata=job_token_metadata()).batches_consumed

    # HTTP status

    def _get(self, path: str) -> bytes:
        import urllib.error
        import urllib.request

        if not self.http_url:
            raise DaemonError(f"no HTTP address known for the daemon at {self.target}; pass http_url")
        try:
            self._check_answering()
            with urllib.request.urlopen(self.http_url + path, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as error:
            raise DaemonRequestError(f"HTTP {error.code}", f"{self.http_url}{path}: {error.reason}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise DaemonNotRunningError(
                f"no graphtier daemon answers at {self.http_url} ({reason}); {START_HINT}"
            ) from None

    def status(self) -> DaemonStatus:
        """The daemon's `/v1/status`: datasets, jobs, traffic, throughput."""
        from graphtier.contract.status import DaemonStatus

        return DaemonStatus.model_validate(json.loads(self._get("/v1/status")))

    def metrics_text(self) -> str:
        """The Prometheus exposition at `/metrics`."""
        return self._get("/metrics").decode()
