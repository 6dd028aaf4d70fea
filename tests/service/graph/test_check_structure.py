"""`check_structure` names the dataset, the array and the first bad index of every kind of damage."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.graph.validate import check_structure

COLPTR = [0, 2, 3, 3, 5]
ROW = [1, 2, 0, 3, 1]


def _check(colptr: list[int], row: list[int], num_nodes: int = 4) -> None:
    check_structure(torch.tensor(colptr), torch.tensor(row), num_nodes, dataset="toy")


def test_a_well_formed_structure_passes():
    _check(COLPTR, ROW)
    _check([0, 0, 0], [], num_nodes=2)


@pytest.mark.parametrize(
    "colptr,row,said",
    [
        ([0, 2, 3, 5], ROW, "colptr has shape (4,), expected (5,) for 4 nodes"),
        ([1, 2, 3, 3, 5], ROW, "colptr starts at 1 (colptr[0] must be 0)"),
        ([0, 2, 3, 3, 4], ROW, "colptr ends at 4 (colptr[4] must be 5, the edges in row)"),
        ([0, 2, 1, 3, 5], ROW, "colptr decreases at index 2: colptr[2] = 1 < colptr[1] = 2"),
        (COLPTR, [1, 2, 0, 4, 1], "row holds node id 4 at index 3, outside [0, 4)"),
        (COLPTR, [1, -1, 0, 3, 1], "row holds node id -1 at index 1, outside [0, 4)"),
    ],
)
def test_damage_is_named_with_the_first_bad_index(colptr, row, said):
    with pytest.raises(PreparedDatasetError) as failure:
        _check(colptr, row)
    assert str(failure.value).startswith(f"dataset 'toy': {said}; ")
