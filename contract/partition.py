"""Which node holds which feature rows of a partitioned multi-node job (`features: partitioned`).

Prepared datasets are ordered by hotness (row id order = the dataset's score order, weighted
reverse PageRank by default), so "the hottest R rows" are rows [0, R). Those are replicated on
every node; every other row r belongs to exactly one node, `(r - R) % nnodes`, the nodes
numbered as the job's placement lists them (node rank 0 the coordinator). Round-robin keeps
each node's share equally hot. A node keeps its rows compactly: the replicated rows first,
then its own rows in id order, so row r's place in the node's copy is arithmetic
(`local_index`), with no table to build or ship. Every daemon and producer derives the same
answer from (num_rows, replicated_rows, nnodes, node_rank).
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from graphtier.contract.sizes import SIZE_UNITS, UNIT_HELP, split_size

if TYPE_CHECKING:  # numpy only where ids are mapped: a job spec or a CLI command never loads it
    import numpy as np

DEFAULT_REPLICATE = "10%"  # of the rows, hottest first, on every node
# One FetchRows call: at most this many rows (the request stays far below gRPC's 4 MiB default)
# and this many reply bytes; a producer splits a larger ask, a daemon refuses it.
MAX_FETCH_ROWS = 262_144
MAX_FETCH_BYTES = 64 << 20


def _parse(value: str) -> tuple[Decimal, str]:
    parsed = split_size(value)
    if parsed is None:
        raise ValueError(
            f"replicate {value!r} is neither a share of the rows (10% or 0.1) nor a size of feature "
            "bytes per node (512MiB)"
        )
    number, spelled = parsed
    unit = spelled.lower()
    if unit == "%" and number > 100:
        raise ValueError(f"replicate {value!r} is more than 100% of the rows")
    if unit == "" and number > 1:
        raise ValueError(f"replicate {value!r}: a share of the rows is at most 1 (or 100%); a size needs a unit (MiB)")
    if unit not in ("", "%") and unit not in SIZE_UNITS:
        raise ValueError(f"replicate {value!r} has unknown unit {spelled!r}; use % or {UNIT_HELP}")
    return number, unit


def check_replicate(value: object) -> str:
    """The replicated budget as text: a share of the rows ('10%'; 0.1 or '0.1' becomes '10%') or a size of
    feature bytes on every node ('512MiB'); ValueError saying what is wrong."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"replicate {value!r} must be a share of the rows (10% or 0.1) or a size (512MiB)")
    number, unit = _parse(str(value))
    if unit in ("", "%"):
        return f"{(number * 100 if unit == '' else number).normalize():f}%"
    return str(value).strip()


def replicated_rows(num_rows: int, replicate: str, row_bytes: int) -> int:
    """Rows on every node for the budget `replicate` (see check_replicate), rounded down."""
    number, unit = _parse(check_replicate(replicate))
    if unit == "%":
        return min(num_rows, int(number * num_rows / 100))
    return min(num_rows, int(number * SIZE_UNITS[unit]) // max(1, row_bytes))


class FeaturePartition(BaseModel):
    """One node's view of a job's row split; see the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_rows: int = Field(ge=0, description="Feature rows of the dataset.")
    replicated_rows: int = Field(ge=0, description="Rows [0, replicated_rows) are on every node.")
    nnodes: int = Field(ge=2, le=1024)
    node_rank: int = Field(ge=0, description="This node's rank in the job's node list.")

    @model_validator(mode="after")
    def _check(self) -> FeaturePartition:
        if self.replicated_rows > self.num_rows:
            raise ValueError(f"replicated_rows {self.replicated_rows} exceeds the dataset's {self.num_rows} rows")
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} is not below nnodes {self.nnodes}")
        return self

    def owned_rows(self, node_rank: int | None = None) -> int:
        """Rows past the replicated ones that `node_rank` (default this node) owns."""
        k = self.node_rank if node_rank is None else node_rank
        cold = self.num_rows - self.replicated_rows
        return max(0, (cold - k + self.nnodes - 1) // self.nnodes)

    @property
    def local_rows(self) -> int:
        """Rows this node holds: the replicated ones and its own."""
        return self.replicated_rows + self.owned_rows()

    def owner(self, ids: np.ndarray) -> np.ndarray:
        """The node rank owning each id; -1 for a replicated row (every node holds it)."""
        import numpy as np

        ids = np.asarray(ids, dtype=np.int64)
        return np.where(ids < self.replicated_rows, -1, (ids - self.replicated_rows) % self.nnodes)

    def is_local(self, ids: np.ndarray) -> np.ndarray:
        """True where this node holds the row (replicated, or its own)."""
        owner = self.owner(ids)
        return (owner < 0) | (owner == self.node_rank)

    def local_index(self, ids: np.ndarray) -> np.ndarray:
        """Each row's place in this node's copy (ids must be local: see `is_local`)."""
        import numpy as np

        ids = np.asarray(ids, dtype=np.int64)
        r = self.replicated_rows
        return np.where(ids < r, ids, r + (ids - r) // self.nnodes)

    def owned_ids(self) -> np.ndarray:
        """The global ids of this node's own rows, in the order its copy holds them."""
        import numpy as np

        return np.arange(self.replicated_rows + self.node_rank, self.num_rows, self.nnodes, dtype=np.int64)

    def describe(self) -> str:
        return (
            f"node {self.node_rank} of {self.nnodes}: rows [0, {self.replicated_rows}) replicated and "
            f"{self.owned_rows():,} of its own, {self.local_rows:,} of {self.num_rows:,}"
        )
