"""`check_structure`: a prepared graph's CSC arrays are well formed before anything samples them.

A colptr that decreases, does not start at 0 or end at the number of edges, or a row id outside
[0, num_nodes), makes the sampler index past its arrays: a crash at best, wrong neighbours at worst.
Checksums do not catch it (a file can be rewritten and its checksums recomputed), so the load checks
the arrays themselves: colptr's order in chunks (bounded temporaries), row's range in one pass of
torch's vectorised, multi-threaded aminmax (no copy, no temporary); only when something is wrong is
it searched again for the first bad index, which the error names with the dataset and the array.
"""

from __future__ import annotations

import torch

from graphtier.contract.errors import PreparedDatasetError

CHUNK = 1 << 24  # elements per step of a search: bounded temporaries whatever the graph's size


def check_structure(colptr: torch.Tensor, row: torch.Tensor, num_nodes: int, *, dataset: str) -> None:
    """PreparedDatasetError unless colptr is [num_nodes + 1], starts at 0, never decreases and ends at
    len(row), and every row id lies in [0, num_nodes)."""

    def bad(array: str, what: str) -> PreparedDatasetError:
        return PreparedDatasetError(
            f"dataset {dataset!r}: {array} {what}; the graph structure is damaged: prepare the dataset again"
        )

    if colptr.dim() != 1 or colptr.numel() != num_nodes + 1:
        raise bad("colptr", f"has shape {tuple(colptr.shape)}, expected ({num_nodes + 1},) for {num_nodes} nodes")
    if int(colptr[0]) != 0:
        raise bad("colptr", f"starts at {int(colptr[0])} (colptr[0] must be 0)")
    if int(colptr[-1]) != row.numel():
        raise bad("colptr", f"ends at {int(colptr[-1])} (colptr[{num_nodes}] must be {row.numel()}, the edges in row)")
    for start in range(0, colptr.numel() - 1, CHUNK):  # bool temporaries of at most CHUNK elements
        chunk = colptr[start : start + CHUNK + 1]
        falls = chunk[1:] < chunk[:-1]
        if bool(falls.any()):
            i = start + 1 + int(falls.nonzero()[0])
            raise bad(
                "colptr",
                f"decreases at index {i}: colptr[{i}] = {int(colptr[i])} < colptr[{i - 1}] = {int(colptr[i - 1])}",
            )
    if row.numel() == 0:
        return
    lo, hi = torch.aminmax(row)  # one pass, no temporary: the common case costs about a read of the array
    if int(lo) >= 0 and int(hi) < num_nodes:
        return
    for start in range(0, row.numel(), CHUNK):  # where: the first id out of range
        chunk = row[start : start + CHUNK]
        out = (chunk < 0) | (chunk >= num_nodes)
        if bool(out.any()):
            i = start + int(out.nonzero()[0])
            raise bad("row", f"holds node id {int(row[i])} at index {i}, outside [0, {num_nodes})")
