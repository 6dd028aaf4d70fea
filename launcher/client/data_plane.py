"""`DataPlaneClient`: a `DaemonClient` that also fetches what a process attaches to.

Loading a dataset, a dataset's layout and a rank's channel grant carry the data plane's
handles (shared-memory segments, the placement plan, slot layouts), whose types come with
torch. Trainer ranks, producers and tests that attach use this client; the CLI's control
commands use the plain `DaemonClient` and start without torch.
"""

from __future__ import annotations

from graphtier.contract.conversions import budgets_to_proto
from graphtier.contract.datasets import BudgetSpec
from graphtier.launcher.client import DaemonClient, job_token_metadata
from graphtier.service.pipeline.wire import ChannelGrant, grant_from_proto
from graphtier.service.store.wire import DatasetLayoutInfo, LoadResult, layout_from_proto
from graphtier.v1 import channels_pb2, datasets_pb2


class DataPlaneClient(DaemonClient):
    """A connection to one daemon for a process that attaches to its shared memory."""

    def load_dataset(self, name: str, budgets: BudgetSpec | None = None, *, timeout_s: float = 600.0) -> LoadResult:
        """Load a prepared dataset into the daemon's tiers (or get the loaded copy's layout)."""
        request = datasets_pb2.LoadDatasetRequest(name=name)
        if budgets is not None:
            request.budgets.CopyFrom(budgets_to_proto(budgets))
        reply = self._call(self._datasets.LoadDataset, request, timeout_s)
        return LoadResult(layout=layout_from_proto(reply.layout), already_loaded=reply.already_loaded)

    def dataset_layout(self, name: str, *, job_id: str = "") -> DatasetLayoutInfo:
        """The layout of loaded dataset `name`; with `job_id`, of the copy that job trains on."""
        request = datasets_pb2.GetDatasetLayoutRequest(name=name, job_id=job_id)
        reply = self._call(self._datasets.GetDatasetLayout, request)
        return layout_from_proto(reply)

    def open_channel(self, job_id: str, rank: int, trainer_pid: int, *, timeout_s: float = 300.0) -> ChannelGrant:
        """The producer channel of one rank of a job (a restarted rank gets a fresh producer)."""
        request = channels_pb2.OpenChannelRequest(job_id=job_id, rank=rank, trainer_pid=trainer_pid)
        reply = self._call(self._channels.OpenChannel, request, timeout_s, extra_metadata=job_token_metadata())
        return grant_from_proto(reply)
