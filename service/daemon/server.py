"""`Daemon`: one running graphtierd, wiring gRPC, the status app, datasets, jobs and metrics.

Start order: take the runtime directory's lock (stale files of a dead daemon are removed),
reclaim stale shared-memory segments, bind HTTP, start gRPC with health NOT_SERVING,
start the status app, flip health to SERVING, and only then write endpoints.json. Stop
order: health NOT_SERVING, gRPC stops accepting and drains in-flight calls, the status app
stops, every dataset is unloaded (segments unlinked), and socket, endpoints and lock go.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent import futures
from datetime import datetime, timezone
from pathlib import Path

import grpc
import torch
import uvicorn
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from graphtier.contract.endpoints import Endpoints, daemon_file_dir
from graphtier.contract.errors import DaemonError
from graphtier.contract.identity import identity_socket_path
from graphtier.contract.status import EndpointsStatus
from graphtier.service.daemon.cluster.node import ClusterNode
from graphtier.service.daemon.cluster.node_info import SelfDescription
from graphtier.service.daemon.config import DaemonConfig
from graphtier.service.daemon.credentials import TokenInterceptor, ensure_self_signed, ensure_token, server_credentials
from graphtier.service.daemon.datasets.gpu_placement import GpuPlacement
from graphtier.service.daemon.datasets.lifetime import LifetimePolicy
from graphtier.service.daemon.datasets.partitions import FetchAccess
from graphtier.service.daemon.datasets.registry import DatasetRegistry
from graphtier.service.daemon.instance import InstanceLock
from graphtier.service.daemon.jobs.admission import Admission, machine_capacity
from graphtier.service.daemon.jobs.artifacts import ArtifactPolicy, ArtifactStore
from graphtier.service.daemon.jobs.manager import JobManager
from graphtier.service.daemon.jobs.memory_need import parse_memory_limit
from graphtier.service.daemon.jobs.mps import MpsControl
from graphtier.service.daemon.jobs.progress import ProgressTracker
from graphtier.service.daemon.jobs.table import JobTable
from graphtier.service.daemon.metrics.registry import MetricsRegistry
from graphtier.service.daemon.rpc.access import Access
from graphtier.service.daemon.rpc.identity import Callers, IdentityListener, SessionSigner
from graphtier.service.daemon.rpc.user_tokens import UserTokens
from graphtier.service.daemon.servicers import SERVICE_NAMES, add_servicers
from graphtier.service.daemon.status.app import create_status_app
from graphtier.service.daemon.status.builder import StatusBuilder
from graphtier.service.daemon.wire_guard import WireGuardInterceptor
from graphtier.service.gather.tiers import DEVICE_TIERS_SIMULATED
from graphtier.service.hardware.machine import MachineFacts
from graphtier.service.hardware.nvml_collector import NvmlCollector
from graphtier.service.pipeline.forkserver import forkserver_context
from graphtier.service.shm import reclaim_stale_segments

log = logging.getLogger("graphtierd")

HTTP_START_TIMEOUT_S = 30.0


def _bind_http(host: str, port: int) -> tuple[socket.socket, str]:
    """A bound TCP socket for the status app (port 0 = a free one) and its URL."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        raise DaemonError(f"cannot listen for HTTP on {host}:{port}: {exc.strerror or exc}") from None
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return sock, f"http://{shown}:{bound}"


class Daemon:
    """The daemon's parts; `start()` makes it ready, `stop()` takes everything down (idempotent)."""

    def __init__(self, config: DaemonConfig, *, lock: InstanceLock | None = None) -> None:
        self.config = config
        self.lock = lock or InstanceLock(config)
        self.jobs = JobTable(config.state_path, retire_after_s=config.job_retire_s)
        for job_id in self.jobs.restore(os.getpid()):
            log.warning("job %s was unfinished when its daemon ended: marked failed", job_id)
        self.metrics = MetricsRegistry(simulated_devices=DEVICE_TIERS_SIMULATED)
        gpus = GpuPlacement(
            mode=config.gpu_tiers,
            device_budget=config.device_budget,
            device_reserve=config.device_reserve,
            device_memory=config.device_memory,
            fd_socket=config.runtime_dir / "memory.sock",
            fd_socket_gid=config.socket_gid,
        )
        policy = LifetimePolicy.from_config(config.idle_unload_s, config.shm_budget)
        self.datasets = DatasetRegistry(
            config.dataset_root, users=self.jobs.jobs_using, cancel=self._cancel_jobs, gpus=gpus, policy=policy
        )
        self._sweeper_stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self.metrics.simulated.set_function(  # real once a loaded dataset has its device tiers on GPUs
            lambda: 0 if any(not d.store.simulated_devices for d in self.datasets.loaded()) else 1
        )
        self.tracker = ProgressTracker(self.metrics, self.jobs)
        capacity = machine_capacity(config.max_running_jobs, config.core_oversubscription, torch.cuda.device_count())
        self.job_manager = JobManager(
            config.runtime_dir,
            self.jobs,
            self.datasets,
            self.tracker,
            stall_timeout_s=config.producer_stall_timeout_s,
            admission=Admission(capacity),
            keep_checkpoints=config.keep_checkpoints,
            mps=MpsControl(config.runtime_dir),
            memory_limit=parse_memory_limit(config.memory_limit),
            artifacts=ArtifactStore(
                config.runtime_dir,
                self.jobs,
                ArtifactPolicy(keep_jobs=config.artifact_keep, budget_bytes=config.artifact_budget_bytes),
            ),
        )
        self.health = health.HealthServicer()
        self.machine = MachineFacts(probe_timeout_s=config.cuda_probe_timeout_s)
        self.nvml = NvmlCollector(interval_s=config.nvml_interval_s)
        self.endpoints: Endpoints | None = None
        self.started_at = datetime.now(timezone.utc)
        self._grpc: grpc.Server | None = None
        self._http: uvicorn.Server | None = None
        self._http_thread: threading.Thread | None = None
        self._serving = False
        self._stopped = False
        self.tls_cert: Path | None = None
        self._token: str | None = None
        self._signer = SessionSigner()
        self.identity = IdentityListener(identity_socket_path(config.socket), self._signer, gid=config.socket_gid)
        self.access: Access | None = None  # who may do what; made once the daemon's token is known
        self.cluster = ClusterNode(
            config.cluster,
            dataset_root=config.dataset_root,
            describe=self._describe_node,
            submit_part=self.job_manager.submit_part,
            cancel_local=self.job_manager.cancel,
            joined_file=config.state_path / "cluster-peers",
        )

    def _describe_node(self, name: str, address: str) -> SelfDescription:
        """This daemon as a node of its cluster, named `name`, reached at `address`."""
        return SelfDescription(
            name=name,
            address=address,
            dataset_root=self.config.dataset_root,
            loaded=lambda: {d.name for d in self.datasets.loaded()},
            active_jobs=lambda: sum(n for state, n in self.jobs.counts_by_state().items() if not state.final),
            serving=lambda: self._serving,
            gpus=torch.cuda.device_count(),
            started_at=self.started_at,
        )

    def _join_cluster(self, tcp: str | None) -> None:
        """Peers are called with this daemon's token over TLS trusting peer_ca (default: its own certificate)."""
        trusted = None
        if tcp is not None and not self.config.insecure:
            ca = self.config.cluster.peer_ca or self.tls_cert
            try:
                trusted = ca.read_bytes() if ca is not None else None
            except OSError as exc:
                raise DaemonError(f"cannot read the peers' CA certificate {ca} ({exc.strerror})") from None
        self.cluster.bind(tcp, token=self._token, trusted_pem=trusted)
        if tcp is not None:  # partitioned jobs' producers call the peers' FetchRows the same way
            ca = None if self.config.insecure else (self.config.cluster.peer_ca or self.tls_cert)
            self.job_manager.fetch_access = FetchAccess(self.config.token_path, ca)

    def _cancel_jobs(self, job_ids: list[str], reason: str) -> None:
        for job_id in job_ids:
            self.jobs.request_cancel(job_id, reason)

    @property
    def serving(self) -> bool:
        return self._serving

    def start(self) -> Endpoints:
        """Make the daemon ready; on any failure everything started so far is stopped again."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> Endpoints:
        if not self.lock.held:
            for path in self.lock.acquire():
                log.info("removed stale %s left by a daemon that died", path)
        for name in reclaim_stale_segments():
            log.info("reclaimed stale shared-memory segment %s", name)
        for job_id in self.job_manager.artifacts.enforce():  # the policy may have changed since the last daemon
            log.info("job %s: its exported model is past the artifact retention: removed", job_id)
        forkserver_context()  # producers and torchrun agents fork from it: warm before the first job
        self.job_manager.mps.recover()  # an MPS control daemon an earlier, killed daemon left running
        self.machine.start()  # NVML and host checks here (fork-safe); CUDA ones in a subprocess
        self._start_nvml()
        self._sweeper = threading.Thread(target=self._sweep_datasets, name="graphtier-dataset-sweeper", daemon=True)
        self._sweeper.start()
        self.metrics.watch(self._dataset_tiers, self._job_states)
        for name in ("", *SERVICE_NAMES):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        http_socket, http_url = _bind_http(self.config.http_host, self.config.http_port)
        tcp = self._start_grpc()
        builder = StatusBuilder(
            endpoints=EndpointsStatus(
                grpc_unix=str(self.config.socket),
                grpc_tcp=tcp,
                http_url=http_url,
                tcp_security=self._tcp_security_name(tcp),
            ),
            dataset_root=str(self.config.dataset_root),
            datasets=self.datasets,
            jobs=self.jobs,
            tracker=self.tracker,
            metrics=self.metrics,
            started_at=self.started_at,
            machine=lambda: self.machine.report,
            measured=self.nvml.status,
            artifacts=self.job_manager.artifacts,
        )
        self._start_http(builder, http_socket)
        self._serving = True
        for name in ("", *SERVICE_NAMES):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.endpoints = Endpoints(
            pid=os.getpid(),
            started_at=self.started_at,
            runtime_dir=str(self.config.runtime_dir),
            grpc_unix=str(self.config.socket),
            grpc_tcp=tcp,
            tcp_tls_cert=str(self.tls_cert) if tcp and self.tls_cert else None,
            token_file=str(self.config.token_path) if tcp else None,
            http_url=http_url,
            log_file=str(self.config.log_path),
            dataset_root=str(self.config.dataset_root),
        )
        self.lock.publish(self.endpoints)
        log.info(
            "ready: gRPC unix:%s%s, HTTP %s, datasets from %s",
            self.config.socket,
            f" and tcp {tcp}" if tcp else "",
            http_url,
            self.config.dataset_root,
        )
        return self.endpoints

    def _start_nvml(self) -> None:
        self.nvml.start()
        self.metrics.add_collector(self.nvml)
        measured = self.nvml.status()
        if measured.enabled:
            methods = ", ".join(
                f"GPU {g.gpu}: {g.method or 'PCIe not measured'}, {len(g.nvlink)} NVLink links" for g in measured.gpus
            )
            log.info("NVML collector: sampling every %g s (%s)", measured.interval_s, methods)
        else:
            log.info("NVML collector off: %s", measured.reason)

    def _sweep_datasets(self) -> None:
        """Every few seconds: unload retired versions no job uses and datasets idle too long; retire
        jobs that ended longer ago than job_retire_s."""
        period = min(10.0, max(0.5, self.config.idle_unload_s / 4)) if self.config.idle_unload_s else 10.0
        while not self._sweeper_stop.wait(period):
            try:
                self.datasets.sweep()
                self.job_manager.retire_finished()
            except Exception:  # a bug here must not take the daemon down
                log.exception("sweep of datasets and ended jobs failed")

    def _tcp_security(self) -> tuple[list[grpc.ServerInterceptor], grpc.ServerCredentials | None]:
        """The token check for TCP callers and the TLS credentials of the TCP listener (None: plaintext);
        makes `access`, which knows the daemon's token and the users' (the Unix socket's callers are
        told by the identity socket)."""
        users: UserTokens | None = None
        address = self.config.tcp_address
        if address is not None:
            self._token = ensure_token(self.config.token_path)
            if self.config.user_tokens is not None:
                users = UserTokens(self.config.user_tokens, daemon_token=self._token)
        callers = Callers(self._signer, admin_gid=self.config.admin_gid, daemon_token=self._token, user_tokens=users)
        self.access = Access(callers, lambda job_id: self.jobs.get(job_id).owner, socket_path=str(self.config.socket))
        if address is None or self._token is None:
            return [], None
        token = self._token
        if self.config.insecure:
            log.warning(
                "SECURITY: gRPC on tcp %s is PLAINTEXT (--insecure): the token and every reply cross the "
                "network unencrypted",
                self.config.tcp,
            )
            return [TokenInterceptor(token, users)], None
        cert, key = self.config.tls_cert, self.config.tls_key
        if cert is None or key is None:
            cert, key = ensure_self_signed(self.config.runtime_dir / "tls", address[0])
        self.tls_cert = cert
        return [TokenInterceptor(token, users)], server_credentials(cert, key)

    def _start_grpc(self) -> str | None:
        interceptors, tls = self._tcp_security()
        assert self.access is not None
        interceptors.append(WireGuardInterceptor())  # after the token check: strangers get UNAUTHENTICATED first
        server = grpc.server(
            # grpc_workers threads for every call but the followed event streams, which hold theirs while they
            # wait and are capped at max_event_streams (EventStreamSlots): however many are open, the rest is served
            futures.ThreadPoolExecutor(
                max_workers=self.config.grpc_workers + self.config.max_event_streams,
                thread_name_prefix="graphtier-grpc",
            ),
            options=[("grpc.so_reuseport", 0)],
            interceptors=interceptors,
        )
        self._grpc = server
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        add_servicers(
            server,
            self.datasets,
            self.tracker,
            self.access,
            self.job_manager,
            self.cluster,
            max_event_streams=self.config.max_event_streams,
        )
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        daemon_file_dir(self.config.socket.parent, self.config.runtime_dir, self.config.socket_gid)
        try:
            server.add_insecure_port(f"unix:{self.config.socket}")
        except RuntimeError as exc:
            raise DaemonError(f"cannot listen for gRPC on unix:{self.config.socket}: {exc}") from None
        if self.config.socket.exists():  # not the umask's choice: this user (and the socket group) only
            if self.config.socket_gid is not None:
                os.chown(self.config.socket, -1, self.config.socket_gid)
            os.chmod(self.config.socket, 0o600 if self.config.socket_gid is None else 0o660)
        self.identity.start()  # beside the socket: who calls on it
        tcp = None
        if self.config.tcp_address is not None:
            host, port = self.config.tcp_address
            shown = f"[{host}]" if ":" in host else host
            try:
                address = f"{shown}:{port}"
                bound = server.add_insecure_port(address) if tls is None else server.add_secure_port(address, tls)
            except RuntimeError as exc:
                raise DaemonError(f"cannot listen for gRPC on tcp {self.config.tcp}: {exc}") from None
            tcp = f"{shown}:{bound}"
        self._join_cluster(tcp)
        server.start()
        return tcp

    def _tcp_security_name(self, tcp: str | None) -> str | None:
        if tcp is None:
            return None
        return "plaintext+token (insecure)" if self.config.insecure else "tls+token"

    def _start_http(self, builder: StatusBuilder, sock: socket.socket) -> None:
        app = create_status_app(
            status=builder.snapshot,
            metrics=self.metrics,
            serving=lambda: self._serving,
            pid=os.getpid(),
            history=self.jobs.history,
        )
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            log_config=None,
            timeout_graceful_shutdown=max(1, int(self.config.shutdown_grace_s)),
        )
        self._http = uvicorn.Server(config)
        self._http_thread = threading.Thread(
            target=self._http.run, kwargs={"sockets": [sock]}, name="graphtier-http", daemon=True
        )
        self._http_thread.start()
        deadline = time.monotonic() + HTTP_START_TIMEOUT_S
        while not self._http.started:
            if not self._http_thread.is_alive() or time.monotonic() > deadline:
                raise DaemonError(f"the status app did not start on {sock.getsockname()} (see the log)")
            time.sleep(0.01)

    def _dataset_tiers(self) -> list[tuple[str, str, int]]:
        return [
            (loaded.name, tier, size.bytes)
            for loaded in self.datasets.loaded()
            for tier, size in loaded.plan.tier_sizes(num_edges=loaded.manifest.num_edges).items()
        ]

    def _job_states(self) -> list[tuple[str, int]]:
        return [(state.value, count) for state, count in self.jobs.counts_by_state().items()]

    def stop(self) -> None:
        """Stop accepting, drain, unload every dataset, remove socket, endpoints and lock."""
        if self._stopped:
            return
        self._stopped = True
        self._serving = False
        if self.lock.held:
            self.lock.unpublish()
        self.health.enter_graceful_shutdown()
        self.job_manager.shutdown()  # every job's processes end before the tiers they read go
        if self._grpc is not None:
            self._grpc.stop(self.config.shutdown_grace_s).wait()
        self.identity.stop()
        self.cluster.close()
        if self._http is not None and self._http_thread is not None:
            self._http.should_exit = True
            self._http_thread.join(timeout=10)
        self.nvml.stop()
        self._sweeper_stop.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=10)
        self.machine.stop()
        for name in self.datasets.close():
            log.info("unloaded %s", name)
        self.jobs.close()
        self.lock.release()
        log.info("stopped")
