"""The cluster contract (cluster.proto): documented like the rest, and its bytes fields are the only
ones in the whole contract (a dataset's files on their way to another machine, and a partitioned
job's feature rows fetched from the node that owns them: features.proto)."""

from __future__ import annotations

from google.protobuf import descriptor_pb2
from test_proto_contract import undocumented  # tests/proto is on sys.path (rootdir conftest mode)

from graphtier.v1 import cluster_pb2, jobs_pb2

CLUSTER_FILE = "graphtier/v1/cluster.proto"
# bytes by value: a dataset file pushed to a peer, feature rows fetched from one, an exported model's files
BYTES_FIELDS = {"FileData.chunk", "FetchRowsResponse.data", "ArtifactChunk.data"}


def test_cluster_contract_is_documented(contract_descriptors):
    assert CLUSTER_FILE in {f.name for f in contract_descriptors.file}
    assert undocumented(contract_descriptors, {CLUSTER_FILE, "graphtier/v1/jobs.proto"}) == []


def test_only_files_and_feature_rows_travel_by_value(contract_descriptors):
    found = set()
    for file in contract_descriptors.file:
        if not file.name.startswith("graphtier/v1/"):
            continue
        stack = list(file.message_type)
        while stack:
            msg = stack.pop()
            stack.extend(msg.nested_type)
            found |= {
                f"{msg.name}.{f.name}" for f in msg.field if f.type == descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
            }
    assert found == BYTES_FIELDS


def test_cluster_service_methods():
    service = cluster_pb2.DESCRIPTOR.services_by_name["ClusterService"]
    assert {m.name for m in service.methods} == {
        "GetNode",
        "GetCluster",
        "StartJobPart",
        "ReceiveDataset",
        "PushDataset",
        "JoinCluster",
        "AdmitPeer",
    }
    receive = service.methods_by_name["ReceiveDataset"]
    assert receive.client_streaming and not receive.server_streaming
    job = jobs_pb2.Job(placement=jobs_pb2.JobPlacement(nnodes=2, node_rank=1), nodes=[jobs_pb2.JobNode(node="b")])
    assert jobs_pb2.Job.FromString(job.SerializeToString()) == job
