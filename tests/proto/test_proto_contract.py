"""The v1 contract: every element documented, no tensor bytes in messages, lossless round
trips, and the generated stubs serving over a real Unix-socket gRPC server with the
standard health and reflection services beside them."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from graphtier.v1 import (
    channels_pb2,
    channels_pb2_grpc,
    common_pb2,
    datasets_pb2,
    datasets_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
    progress_pb2,
    progress_pb2_grpc,
)

CONTRACT_FILES = {f"graphtier/v1/{name}.proto" for name in ("common", "datasets", "jobs", "channels", "progress")}
SERVICES = {
    "graphtier.v1.DatasetService": {"LoadDataset", "UnloadDataset", "ListDatasets", "GetDatasetLayout"},
    "graphtier.v1.JobService": {
        "SubmitJob",
        "AttachJob",
        "GetJob",
        "ListJobs",
        "CancelJob",
        "StreamJobEvents",
        "ExportJob",
    },
    "graphtier.v1.ChannelService": {"OpenChannel", "ReleaseChannel"},
    "graphtier.v1.ProgressService": {"ReportProgress"},
}

# Field numbers inside descriptor.proto, the steps of a SourceCodeInfo path.
_FILE_MESSAGE, _FILE_ENUM, _FILE_SERVICE = 4, 5, 6
_MESSAGE_FIELD, _MESSAGE_NESTED, _MESSAGE_ENUM, _MESSAGE_ONEOF = 2, 3, 4, 8
_ENUM_VALUE, _SERVICE_METHOD = 2, 2


def undocumented(files: descriptor_pb2.FileDescriptorSet, names: set[str]) -> list[str]:
    """Full names of every message, field, real oneof, enum, enum value, service and method
    in the files `names` that has no leading comment."""
    missing: list[str] = []
    for file in files.file:
        if file.name not in names:
            continue
        comments = {tuple(loc.path): loc.leading_comments.strip() for loc in file.source_code_info.location}

        def need(path: tuple[int, ...], full_name: str, comments: dict[tuple[int, ...], str] = comments) -> None:
            if not comments.get(path):
                missing.append(full_name)

        def enum(desc: descriptor_pb2.EnumDescriptorProto, path: tuple[int, ...], scope: str) -> None:
            need(path, f"{scope}.{desc.name}")
            for i, value in enumerate(desc.value):
                need((*path, _ENUM_VALUE, i), f"{scope}.{desc.name}.{value.name}")

        def message(desc: descriptor_pb2.DescriptorProto, path: tuple[int, ...], scope: str) -> None:
            if desc.options.map_entry:  # synthesised for a map<> field, which is documented itself
                return
            name = f"{scope}.{desc.name}"
            need(path, name)
            for i, field in enumerate(desc.field):
                need((*path, _MESSAGE_FIELD, i), f"{name}.{field.name}")
            for i, oneof in enumerate(desc.oneof_decl):
                members = [f for f in desc.field if f.HasField("oneof_index") and f.oneof_index == i]
                if not all(f.proto3_optional for f in members):  # skip the oneofs `optional` synthesises
                    need((*path, _MESSAGE_ONEOF, i), f"{name}.{oneof.name}")
            for i, nested in enumerate(desc.nested_type):
                message(nested, (*path, _MESSAGE_NESTED, i), name)
            for i, nested_enum in enumerate(desc.enum_type):
                enum(nested_enum, (*path, _MESSAGE_ENUM, i), name)

        for i, msg in enumerate(file.message_type):
            message(msg, (_FILE_MESSAGE, i), file.package)
        for i, top_enum in enumerate(file.enum_type):
            enum(top_enum, (_FILE_ENUM, i), file.package)
        for i, service in enumerate(file.service):
            need((_FILE_SERVICE, i), f"{file.package}.{service.name}")
            for j, method in enumerate(service.method):
                need((_FILE_SERVICE, i, _SERVICE_METHOD, j), f"{file.package}.{service.name}.{method.name}")
    return missing


def test_every_element_of_the_contract_has_a_leading_comment(contract_descriptors):
    assert {f.name for f in contract_descriptors.file} >= CONTRACT_FILES
    assert undocumented(contract_descriptors, CONTRACT_FILES) == []


def test_the_comment_check_finds_what_is_undocumented(tmp_path, compile_contract):
    package = tmp_path / "root" / "graphtier" / "v1"
    package.mkdir(parents=True)
    (package / "probe.proto").write_text(
        'syntax = "proto3";\npackage graphtier.v1;\n'
        "// Documented.\nmessage Probe {\n  // Documented.\n  string ok = 1;\n  string bare = 2;\n"
        "  // Documented.\n  optional int32 maybe = 3;\n"
        "  // Documented.\n  map<string, int32> counts = 4;\n"
        "  oneof choice {\n    // Documented.\n    int32 a = 5;\n  }\n}\n"
        "// Documented.\nenum Colour {\n  // Documented.\n  COLOUR_UNSPECIFIED = 0;\n  COLOUR_RED = 1;\n}\n"
        "service ProbeService {\n  // Documented.\n  rpc Get(Probe) returns (Probe);\n"
        "  rpc Put(Probe) returns (Probe);\n}\n"
    )
    files = compile_contract(tmp_path / "root", tmp_path / "probe.pb")
    assert sorted(undocumented(files, {"graphtier/v1/probe.proto"})) == [
        "graphtier.v1.Colour.COLOUR_RED",
        "graphtier.v1.Probe.bare",
        "graphtier.v1.Probe.choice",
        "graphtier.v1.ProbeService",
        "graphtier.v1.ProbeService.Put",
    ]


def test_services_and_methods_are_the_agreed_ones():
    found = {}
    for module in (datasets_pb2, jobs_pb2, channels_pb2, progress_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            found[service.full_name] = {m.name for m in service.methods}
    assert found == SERVICES
    stream = jobs_pb2.DESCRIPTOR.services_by_name["JobService"].methods_by_name["StreamJobEvents"]
    assert stream.server_streaming and not stream.client_streaming
    assert [v.name for v in jobs_pb2.JobState.DESCRIPTOR.values] == [
        "JOB_STATE_UNSPECIFIED",
        "JOB_STATE_PENDING",
        "JOB_STATE_STARTING",
        "JOB_STATE_RUNNING",
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
    ]


# The one bytes field of the contract: a job's exported model, streamed to a client that may be on
# another machine (`job export`). Tensors of a dataset or a batch never travel in a message.
FILE_BYTES = {"ArtifactChunk.data"}


def test_tensors_never_travel_in_messages(contract_descriptors):
    """No bytes fields but a file's chunks: data moves through shared memory, messages carry only where it lives."""
    for file in contract_descriptors.file:
        if file.name not in CONTRACT_FILES:
            continue
        stack = list(file.message_type)
        while stack:
            msg = stack.pop()
            stack.extend(msg.nested_type)
            for field in msg.field:
                if f"{msg.name}.{field.name}" not in FILE_BYTES:
                    assert field.type != descriptor_pb2.FieldDescriptorProto.TYPE_BYTES, f"{msg.name}.{field.name}"


def _segment(label: str, shape: list[int], dtype: str, offset: int = 0) -> common_pb2.SegmentRef:
    return common_pb2.SegmentRef(name=f"graphtier.4242.17.abcd.{label}", offset=offset, shape=shape, dtype=dtype)


def _job_spec() -> jobs_pb2.JobSpec:
    return jobs_pb2.JobSpec(
        dataset="rmat-18",
        model=jobs_pb2.MODEL_GAT,
        fanouts=[15, 10, -1],
        batch_size=1024,
        hidden=256,
        epochs=3,
        lr=0.003,
        dropout=0.0,
        nproc_per_node=2,
        nnodes=1,
        checkpoint_every_steps=50,
        seed=0,
        budgets=common_pb2.TierBudgetSpec(num_devices=2, device_replicated="10%", host="512MiB"),
        name="sage-demo",
        heads=4,
        num_slots=3,
        max_restarts=0,
        weight_decay=0.0005,
        device=jobs_pb2.DEVICE_CUDA,
    )


def test_domain_job_spec_survives_the_wire_and_unset_fields_take_defaults():
    from graphtier.contract.jobs.conversions import spec_from_proto, spec_to_proto
    from graphtier.contract.jobs.spec import JobSpec

    spec = JobSpec(dataset="d", model="gcn", fanouts=[5, -1], weight_decay=5e-4, device="cuda", dropout=0.0, seed=7)
    assert spec_from_proto(jobs_pb2.JobSpec.FromString(spec_to_proto(spec).SerializeToString())) == spec
    bare = spec_from_proto(jobs_pb2.JobSpec(dataset="d", model=jobs_pb2.MODEL_SAGE))
    assert (bare.device, bare.weight_decay, bare.dropout) == ("cpu", 0.0, 0.5)


@pytest.mark.parametrize(
    ("device", "sampler", "recorded"),
    [("cuda", "gpu", "gpu"), ("cuda", "auto", "auto"), ("cpu", "auto", "cpu"), ("cpu", "cpu", "cpu")],
)
def test_the_sampler_survives_the_wire_and_a_cpu_jobs_auto_is_cpu(device, sampler, recorded):
    from graphtier.contract.jobs.conversions import spec_from_proto, spec_to_proto
    from graphtier.contract.jobs.spec import JobSpec

    spec = JobSpec(dataset="d", device=device, sampler=sampler)
    assert spec.sampler == recorded
    back = spec_from_proto(jobs_pb2.JobSpec.FromString(spec_to_proto(spec).SerializeToString()))
    assert back == spec and back.sampler == recorded
    assert spec_from_proto(jobs_pb2.JobSpec(dataset="d", model=jobs_pb2.MODEL_SAGE)).sampler == "cpu"  # empty = auto


@pytest.mark.parametrize(
    ("device", "mps", "share", "recorded"),
    [("cuda", "manage", 25.5, "manage"), ("cuda", "auto", 10.0, "auto"), ("cpu", "auto", 3.0, "off")],
)
def test_the_mps_mode_and_sm_share_survive_the_wire_and_a_cpu_jobs_auto_is_off(device, mps, share, recorded):
    from datetime import datetime, timezone

    from graphtier.contract.jobs.conversions import job_from_proto, job_to_proto, spec_from_proto, spec_to_proto
    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.contract.jobs.state import JobState
    from graphtier.contract.jobs.view import JobInfo

    spec = JobSpec(dataset="d", device=device, mps=mps, producer_sm_share=share)
    assert spec.mps == recorded
    back = spec_from_proto(jobs_pb2.JobSpec.FromString(spec_to_proto(spec).SerializeToString()))
    assert back == spec and (back.mps, back.producer_sm_share) == (recorded, share)
    bare = spec_from_proto(jobs_pb2.JobSpec(dataset="d", model=jobs_pb2.MODEL_SAGE))
    assert (bare.mps, bare.producer_sm_share) == ("off", 10.0)  # empty = auto (resolved for a cpu job), 0 = 10%
    job = JobInfo(
        job_id="3",
        spec=spec,
        state=JobState.RUNNING,
        message="",
        created_at=datetime.now(timezone.utc),
        gpu_share="producers under MPS (manage) at 25.5% of the SMs: the daemon's own control daemon",
    )
    assert job_from_proto(jobs_pb2.Job.FromString(job_to_proto(job).SerializeToString())).gpu_share == job.gpu_share


def test_a_gpu_sampler_on_a_cpu_job_is_refused_naming_both():
    from graphtier.contract.errors import InvalidRequestError
    from graphtier.contract.jobs.spec import JobSpec

    with pytest.raises(
        InvalidRequestError, match="sampler 'gpu' samples on the ranks' GPUs: it needs device cuda, not cpu"
    ):
        JobSpec.build({"dataset": "d", "sampler": "gpu"})
    with pytest.raises(InvalidRequestError, match="sampler: Input should be 'cpu', 'gpu' or 'auto'"):
        JobSpec.build({"dataset": "d", "sampler": "tpu"})
    with pytest.raises(InvalidRequestError, match="sampler 'gpu' samples node seeds only: task 'link'"):
        JobSpec.build({"dataset": "d", "device": "cuda", "sampler": "gpu", "task": "link"})


def test_link_and_gpu_share_fields_travel_together():
    """The link fields (33-36) and the GPU share fields (31-32) are distinct on the wire."""
    from graphtier.contract.jobs.conversions import spec_from_proto, spec_to_proto
    from graphtier.contract.jobs.spec import JobSpec

    spec = JobSpec(
        dataset="d",
        device="cuda",
        mps="use",
        producer_sm_share=20.0,
        task="link",
        negatives=3,
        negative_sampling="corrupt-tail",
        decoder="mlp",
    )
    back = spec_from_proto(jobs_pb2.JobSpec.FromString(spec_to_proto(spec).SerializeToString()))
    assert back == spec


def test_job_spec_round_trips_with_presence_of_zero_optionals():
    spec = _job_spec()
    back = jobs_pb2.JobSpec.FromString(spec.SerializeToString())
    assert back == spec
    # dropout 0, seed 0, max_restarts 0 were set explicitly: presence survives the wire.
    assert back.HasField("dropout") and back.HasField("seed") and back.HasField("max_restarts")
    assert back.budgets.HasField("host") and not common_pb2.TierBudgetSpec().HasField("host")  # "512MiB" vs "all"
    assert list(back.fanouts) == [15, 10, -1]
    assert jobs_pb2.JobSpec.FromString(jobs_pb2.JobSpec(dataset="x").SerializeToString()).HasField("dropout") is False
    assert json_format.Parse(json_format.MessageToJson(spec), jobs_pb2.JobSpec()) == spec


def _channel_layout() -> channels_pb2.ChannelLayout:
    slots = [
        channels_pb2.ChannelSlot(
            index=k,
            generation=k,
            capacity=channels_pb2.SlotCapacity(nodes=5000, edges=20000, expanded=1200),
            memory=common_pb2.MemoryHandle(
                location="device",
                mechanism="vmm_fd",
                nbytes=2777800,
                owner_pid=4242,
                export_socket="/run/graphtier/channels/job7-rank1/memory.sock",
                export_id=f"job7-rank1-s{k}-g{k}",
                pci_bus_id="0000:18:00.0",
            ),
            node_ids=common_pb2.Region(offset=0, shape=[5000], dtype="int64"),
            indptr=common_pb2.Region(offset=40000, shape=[1201], dtype="int64"),
            indices=common_pb2.Region(offset=49608, shape=[20000], dtype="int64"),
            labels=common_pb2.Region(offset=209608, shape=[1024], dtype="int64"),
            features=common_pb2.Region(offset=217800, shape=[5000, 128], dtype="float32"),
            ready_event="ab" * 64,
            released_event="cd" * 64,
        )
        for k in range(2)
    ]
    return channels_pb2.ChannelLayout(
        version=1,
        channel="job7-rank1",
        job_id="7",
        rank=1,
        world_size=2,
        slots=slots,
        control=_segment("control", [256], "int64"),
        error_text=_segment("control", [4096], "uint8", offset=2048),
        socket_path="/run/graphtier/channels/job7-rank1/producer.sock",
        producer_pid=4242,
        producer_start_time=123456,
        stall_timeout_seconds=30.0,
        dataset="rmat-18",
        num_nodes=262144,
        feature_dim=128,
        num_classes=16,
        fanouts=[15, 10, 5],
        batch_size=1024,
        steps_per_epoch=12,
        epochs=3,
    )


def test_channel_layout_round_trips():
    layout = _channel_layout()
    back = channels_pb2.ChannelLayout.FromString(layout.SerializeToString())
    assert back == layout
    assert [s.index for s in back.slots] == [0, 1]
    assert list(back.slots[1].features.shape) == [5000, 128] and back.slots[1].features.dtype == "float32"
    assert back.slots[0].features.offset == 217800
    assert back.slots[1].memory.mechanism == "vmm_fd" and back.slots[1].ready_event == "ab" * 64
    assert channels_pb2.ChannelSlot().HasField("features") is False  # a featureless slot is distinguishable
    assert json_format.Parse(json_format.MessageToJson(layout), channels_pb2.ChannelLayout()) == layout


class _Jobs(jobs_pb2_grpc.JobServiceServicer):
    """A trivial in-memory JobService: enough to exercise the generated server and client code."""

    def __init__(self) -> None:
        self.jobs: dict[str, jobs_pb2.Job] = {}

    def SubmitJob(self, request: jobs_pb2.SubmitJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        if not request.spec.dataset:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "spec.dataset: must name a prepared dataset")
        job = jobs_pb2.Job(job_id=str(len(self.jobs) + 1), spec=request.spec, state=jobs_pb2.JOB_STATE_PENDING)
        job.created_at.GetCurrentTime()
        self.jobs[job.job_id] = job
        return job

    def GetJob(self, request: jobs_pb2.GetJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        if request.job_id not in self.jobs:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.job_id!r}")
        return self.jobs[request.job_id]

    def StreamJobEvents(
        self, request: jobs_pb2.StreamJobEventsRequest, context: grpc.ServicerContext
    ) -> Iterator[jobs_pb2.JobEvent]:
        states = [jobs_pb2.JOB_STATE_PENDING, jobs_pb2.JOB_STATE_STARTING, jobs_pb2.JOB_STATE_RUNNING]
        for seq, (before, after) in enumerate(zip(states, states[1:], strict=False)):
            yield jobs_pb2.JobEvent(
                sequence=seq,
                job_id=request.job_id,
                state_change=jobs_pb2.JobStateChange(previous=before, current=after),
            )
        yield jobs_pb2.JobEvent(
            sequence=2,
            job_id=request.job_id,
            progress=jobs_pb2.JobProgress(global_step=5, loss=1.25),
        )


@pytest.fixture
def loopback() -> Iterator[grpc.Channel]:
    """A real gRPC server on a Unix socket with JobService, the other stubs, health and reflection."""
    directory = tempfile.mkdtemp(prefix="gt-proto-", dir="/tmp")  # short: AF_UNIX paths are limited to 107 bytes
    address = f"unix:{Path(directory) / 'daemon.sock'}"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    jobs_pb2_grpc.add_JobServiceServicer_to_server(_Jobs(), server)
    datasets_pb2_grpc.add_DatasetServiceServicer_to_server(datasets_pb2_grpc.DatasetServiceServicer(), server)
    channels_pb2_grpc.add_ChannelServiceServicer_to_server(channels_pb2_grpc.ChannelServiceServicer(), server)
    progress_pb2_grpc.add_ProgressServiceServicer_to_server(progress_pb2_grpc.ProgressServiceServicer(), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ("", *SERVICES):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection((*SERVICES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    assert server.add_insecure_port(address) == 1
    server.start()
    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=10)
        yield channel
    finally:
        channel.close()
        server.stop(grace=None).wait()
        shutil.rmtree(directory, ignore_errors=True)


def test_loopback_server_serves_jobs_health_and_reflection(loopback):
    health_stub = health_pb2_grpc.HealthStub(loopback)
    for name in ("", "graphtier.v1.JobService"):
        reply = health_stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

    jobs = jobs_pb2_grpc.JobServiceStub(loopback)
    job = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=_job_spec()), timeout=5)
    assert job.job_id == "1" and job.state == jobs_pb2.JOB_STATE_PENDING and job.spec == _job_spec()
    assert job.created_at.seconds > 0
    assert jobs.GetJob(jobs_pb2.GetJobRequest(job_id="1"), timeout=5) == job
    with pytest.raises(grpc.RpcError) as not_found:
        jobs.GetJob(jobs_pb2.GetJobRequest(job_id="99"), timeout=5)
    assert not_found.value.code() == grpc.StatusCode.NOT_FOUND and "99" in not_found.value.details()
    with pytest.raises(grpc.RpcError) as unimplemented:
        channels_pb2_grpc.ChannelServiceStub(loopback).OpenChannel(channels_pb2.OpenChannelRequest(), timeout=5)
    assert unimplemented.value.code() == grpc.StatusCode.UNIMPLEMENTED

    events = list(jobs.StreamJobEvents(jobs_pb2.StreamJobEventsRequest(job_id="1", follow=True), timeout=5))
    assert [e.sequence for e in events] == [0, 1, 2]
    assert [e.WhichOneof("event") for e in events] == ["state_change", "state_change", "progress"]
    assert events[-1].progress.global_step == 5

    database = ProtoReflectionDescriptorDatabase(loopback)
    listed = set(database.get_services())
    assert listed >= {*SERVICES, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}
    # A client that knows nothing of graphtier rebuilds the contract, dependencies included.
    pool = descriptor_pool.DescriptorPool(database)
    for service_name, methods in SERVICES.items():
        service = pool.FindServiceByName(service_name)
        assert {m.name for m in service.methods} == methods
    job_type = pool.FindMessageTypeByName("graphtier.v1.Job")
    assert job_type.fields_by_name["created_at"].message_type.full_name == "google.protobuf.Timestamp"
    layout_type = pool.FindMessageTypeByName("graphtier.v1.DatasetLayout")
    assert layout_type.fields_by_name["colptr"].message_type.full_name == "graphtier.v1.SegmentRef"
