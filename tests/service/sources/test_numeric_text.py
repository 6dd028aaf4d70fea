"""The vectorised numeric-text tokenizer that every text reader builds on."""

from __future__ import annotations

import numpy as np
import pytest

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.sources.numeric_text import NumericText


def test_rows_lines_and_integer_columns(write):
    path = write("t.txt", "% banner\r\n\r\n  -3\t+4 x\r\n# mid comment 1 2\n123456789012345678 0\n")
    table = NumericText.read(path)
    assert table.num_rows == 2
    assert [table.line_of(0), table.line_of(1)] == [3, 5]
    assert [table.row_width(0), table.row_width(1)] == [3, 2]
    assert table.ints(0).tolist() == [-3, 123456789012345678]
    assert table.ints(1).tolist() == [4, 0]
    assert not table.row_is_integer(0) and table.row_is_integer(1)
    with pytest.raises(DatasetSourceError, match=r"line 3: 'x' is not an integer \(field 3\)"):
        table.ints(2)


def test_integers_too_long_or_malformed(write):
    table = NumericText.read(write("t.txt", "1234567890123456789 -9223372036854775808\n9223372036854775807 1\n"))
    assert table.ints(0).tolist() == [1234567890123456789, 2**63 - 1]  # 19 digits: int64 holds them
    assert table.ints(1).tolist() == [-(2**63), 1]
    table = NumericText.read(write("v.txt", "9223372036854775808 1\n12345678901234567890 2\n"))
    with pytest.raises(DatasetSourceError, match="line 1: '9223372036854775808' is outside the int64 range"):
        table.ints(0)
    table = NumericText.read(write("u.txt", "1 -\n"))
    with pytest.raises(DatasetSourceError, match="line 1: '-' is not an integer"):
        table.ints(1)


def test_floats_skip_comments_and_dropped_rows(write):
    path = write("f.csv.gz", "9 9 9\n# comment 1,2,3\n1.5,-2e3,nan\n%x\n4,5,inf\n", gz=True)
    table = NumericText.read(path).drop_rows(1)
    values = table.floats(table.require_columns(3, exact=True))
    assert values.shape == (2, 3)
    assert values[0, :2].tolist() == [1.5, -2000.0] and np.isnan(values[0, 2])
    assert values[1].tolist() == [4.0, 5.0, np.inf]


def test_first_bad_float_is_reported(write):
    table = NumericText.read(write("f.txt", "1 2\n3 4\n5 1.2.3\n"))
    with pytest.raises(DatasetSourceError, match=r"line 3: '1.2.3' is not a number"):
        table.floats(2)
    table = NumericText.read(write("g.txt", "1 2\n# ok here: words\n3 4o\n"))
    with pytest.raises(DatasetSourceError, match=r"line 3: '4o' is not a number"):
        table.floats(2)
