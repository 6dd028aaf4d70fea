"""The FeatureService servicer: a partitioned job's rows this node owns, read-only, to its peers.

Served on the daemon's listeners like every service: a TCP caller has passed the token check
(and TLS) before it gets here, and only the daemon's admins get rows (the peers' producers present
the daemon's token): a user who cannot read a dataset's files gets none of its rows this way.
See graphtier.service.daemon.datasets.partitions for what else is refused and why.
"""

from __future__ import annotations

import grpc
import numpy as np

from graphtier.contract.errors import InvalidRequestError
from graphtier.service.daemon.datasets.partitions import PartitionCopies, PartitionKey
from graphtier.service.daemon.rpc.access import Access
from graphtier.service.daemon.rpc.grpc_status import grpc_method
from graphtier.v1 import features_pb2, features_pb2_grpc


class FeatureServicer(features_pb2_grpc.FeatureServiceServicer):
    """FetchRows."""

    def __init__(self, copies: PartitionCopies, access: Access) -> None:
        self.copies, self.access = copies, access

    @grpc_method
    def FetchRows(
        self, request: features_pb2.FetchRowsRequest, context: grpc.ServicerContext
    ) -> features_pb2.FetchRowsResponse:
        self.access.admin(context, "FetchRows (a partitioned job's rows, for its peers' producers)")
        if not request.dataset or not request.version:
            raise InvalidRequestError("FetchRows needs the dataset and its version")
        if request.nnodes < 2 or request.owner_rank >= request.nnodes:
            raise InvalidRequestError(
                f"FetchRows: owner_rank {request.owner_rank} of nnodes {request.nnodes} is not a "
                "node of a partitioned job (nnodes >= 2)"
            )
        key = PartitionKey(
            request.dataset,
            request.version,
            request.nnodes,
            request.owner_rank,
            request.replicated_rows,
            request.node_type,
        )
        row_bytes, data = self.copies.fetch(key, np.asarray(request.rows, dtype=np.int64))
        return features_pb2.FetchRowsResponse(row_bytes=row_bytes, data=data)
