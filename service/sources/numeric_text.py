"""Vectorised reading of numeric text tables (edge lists, id/value files, OGB csv.gz).

A table is a file of lines of numbers separated by whitespace or commas, with CRLF or LF
line ends and optional comment lines; gzip is detected from the magic bytes. The whole
file is tokenised with numpy array operations over its bytes (no Python loop over lines),
integers are parsed exactly with a digit-wise Horner scheme, floats with numpy's C
parser. Every problem is reported as `DatasetSourceError` naming the file and, where it
applies, the 1-based line number in the (decompressed) text.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import NoReturn

import numpy as np

from graphtier.contract.errors import DatasetSourceError

_GZIP_MAGIC = b"\x1f\x8b"
_SEPARATORS = b" \t\r\n\v\f,"
_FLOAT_CHARS = b"0123456789+-.eEnNaAiIfFtTyY"
_MAX_DIGITS = 18  # every 18-digit integer fits in int64
_TO_SPACE = bytes.maketrans(_SEPARATORS, b" " * len(_SEPARATORS))


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when they start with the gzip magic."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DatasetSourceError(path, "file not found") from None
    except IsADirectoryError:
        raise DatasetSourceError(path, "is a directory, expected a file") from None
    except OSError as exc:
        raise DatasetSourceError(path, f"cannot be read ({exc.strerror})") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise DatasetSourceError(path, f"truncated or corrupt gzip data ({exc})") from None
    return data


def _byte_table(chars: bytes) -> np.ndarray:
    table = np.zeros(256, dtype=bool)
    table[np.frombuffer(chars, dtype=np.uint8)] = True
    return table


class NumericText:
    """The data rows of a numeric text file, as token offsets into its bytes."""

    def __init__(
        self,
        path: Path,
        raw: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        row_first: np.ndarray,
        row_width: np.ndarray,
        row_line: np.ndarray,
        comments: tuple[np.ndarray, np.ndarray],
    ) -> None:
        self.path = path
        self._raw = raw  # uint8 bytes of the whole text
        self._starts, self._ends = starts, ends  # data tokens: [start, end) byte offsets
        self._row_first = row_first  # index of each row's first token
        self._row_width = row_width  # tokens per row
        self._row_line = row_line  # 0-based physical line of each row
        self._comments = comments  # [start, end) byte spans of the comment lines
        self._columns: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # parsed int columns

    @classmethod
    def read(cls, path: Path, *, comment: str = "#%") -> NumericText:
        """Tokenise `path`; lines whose first token starts with a `comment` char are dropped."""
        raw = np.frombuffer(read_bytes(path), dtype=np.uint8)
        content = ~_byte_table(_SEPARATORS)[raw]
        edges = np.diff(content.view(np.int8), prepend=np.int8(0), append=np.int8(0))
        del content
        starts = np.flatnonzero(edges == 1)
        ends = np.flatnonzero(edges == -1)
        del edges
        newlines = np.flatnonzero(raw == 10)
        line = np.searchsorted(newlines, starts)
        first = np.ones(starts.size, dtype=bool)
        first[1:] = line[1:] != line[:-1]
        spans = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        if comment:
            commented = _byte_table(comment.encode())[raw[starts]] & first
            if commented.any():
                spans = (starts[commented], np.append(newlines, raw.size)[line[commented]])
                keep = ~commented[np.flatnonzero(first)][np.cumsum(first) - 1]
                starts, ends, line, first = starts[keep], ends[keep], line[keep], first[keep]
        row_first = np.flatnonzero(first)
        row_width = np.diff(np.append(row_first, starts.size))
        return cls(path, raw, starts, ends, row_first, row_width, line[row_first], spans)

    @property
    def num_rows(self) -> int:
        return int(self._row_first.size)

    def line_of(self, row: int) -> int:
        """1-based line number of data row `row`."""
        return int(self._row_line[row]) + 1

    def row_width(self, row: int) -> int:
        return int(self._row_width[row])

    def drop_rows(self, count: int) -> NumericText:
        """The same table without its first `count` data rows."""
        if count == 0:
            return self
        cut = int(self._row_first[count]) if count < self.num_rows else self._starts.size
        rest = NumericText(
            self.path,
            self._raw,
            self._starts[cut:],
            self._ends[cut:],
            self._row_first[count:] - cut,
            self._row_width[count:],
            self._row_line[count:],
            self._comments,
        )
        rest._columns = {c: (v[count:], ok[count:]) for c, (v, ok) in self._columns.items()}
        return rest

    def require_columns(self, minimum: int, *, exact: bool) -> int:
        """Check every row has >= `minimum` fields (and, if `exact`, the same count); return it."""
        width = int(self._row_width[0])
        bad = self._row_width < minimum
        if exact:
            bad |= self._row_width != width
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            expected = f"{width if exact and width >= minimum else minimum}{'' if exact else ' or more'}"
            raise DatasetSourceError(
                self.path, f"line {self.line_of(row)}: has {self.row_width(row)} fields, expected {expected}"
            )
        return width

    def _parse_ints(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values of the given tokens and a mask of the tokens that are valid integers."""
        raw, starts, ends = self._raw, self._starts[tokens], self._ends[tokens]
        sign = raw[starts]
        negative = sign == ord("-")
        begin = starts + (negative | (sign == ord("+")))
        length = ends - begin
        ok = (length > 0) & (length <= _MAX_DIGITS)
        values = np.zeros(tokens.size, dtype=np.int64)
        for j in range(min(int(length.max(initial=0)), _MAX_DIGITS)):
            active = ok & (j < length)
            digit = raw[np.minimum(begin + j, raw.size - 1)].astype(np.int64) - ord("0")
            ok &= ~active | ((digit >= 0) & (digit <= 9))
            values = np.where(active, values * 10 + digit, values)
        values = np.where(negative, -values, values)
        for i in np.flatnonzero(length == _MAX_DIGITS + 1):  # 19 digits: int64 holds some; check each exactly
            text = self._raw[starts[i] : ends[i]].tobytes().decode("ascii", "replace")
            if text.lstrip("+-").isdigit() and -(2**63) <= int(text) < 2**63:
                values[i], ok[i] = int(text), True
        return values, ok

    def _column(self, column: int) -> tuple[np.ndarray, np.ndarray]:
        """Parsed int64 values of one column and the mask of rows where it is a valid integer."""
        if column not in self._columns:
            present = self._row_width > column
            tokens = np.where(present, self._row_first + column, self._row_first)
            values, ok = self._parse_ints(tokens)
            self._columns[column] = (values, ok & present)
        return self._columns[column]

    def ints(self, column: int) -> np.ndarray:
        """Column `column` as int64; a missing or non-integer field is an error naming its line."""
        values, ok = self._column(column)
        if not ok.all():
            row = int(np.flatnonzero(~ok)[0])
            if self.row_width(row) <= column:
                raise DatasetSourceError(self.path, f"line {self.line_of(row)}: has no field {column + 1}")
            token = self._token_text(int(self._row_first[row]) + column)
            problem = "is outside the int64 range" if token.lstrip("+-").isdigit() else "is not an integer"
            raise DatasetSourceError(self.path, f"line {self.line_of(row)}: {token!r} {problem} (field {column + 1})")
        return values

    def columns_are_integer(self, columns: tuple[int, ...]) -> bool:
        return all(bool(self._column(c)[1].all()) for c in columns)

    def leading_rows_not_integer(self, columns: tuple[int, ...]) -> int:
        """How many rows at the top have a field in `columns` that is not an integer (a text header)."""
        ok = np.ones(self.num_rows, dtype=bool)
        for column in columns:
            ok &= self._column(column)[1]
        return int(np.argmax(ok)) if ok.any() else self.num_rows

    def row_is_integer(self, row: int) -> bool:
        first = int(self._row_first[row])
        return bool(self._parse_ints(np.arange(first, first + self.row_width(row)))[1].all())

    def int_at(self, row: int, column: int) -> int:
        return int(self._parse_ints(np.array([int(self._row_first[row]) + column]))[0][0])

    def floats(self, width: int) -> np.ndarray:
        """All fields as float64 `[rows, width]`; rows must have `width` fields (see require_columns)."""
        text = self._raw.tobytes().translate(_TO_SPACE)
        buffer = np.frombuffer(text, dtype=np.uint8).copy()
        if self._starts.size:
            buffer[: self._starts[0]] = 32  # skipped header rows and leading comments
        marks = np.zeros(buffer.size + 1, dtype=np.int8)
        marks[self._comments[0]] = 1
        marks[self._comments[1]] = -1
        buffer[np.cumsum(marks[:-1], dtype=np.int8).astype(bool)] = 32  # blank comment lines
        try:
            values = np.fromstring(buffer.tobytes(), dtype=np.float64, sep=" ")
        except ValueError:
            values = None
        if values is None or values.size != self._starts.size:
            self._raise_first_non_float()
        return values.reshape(self.num_rows, width)

    def _raise_first_non_float(self) -> NoReturn:
        """Find and report the first field that is not a number (error path only)."""
        odd = np.flatnonzero(~(_byte_table(_FLOAT_CHARS) | _byte_table(_SEPARATORS))[self._raw])
        token = np.searchsorted(self._starts, odd, side="right") - 1
        inside = (token >= 0) & (odd < self._ends[token.clip(min=0)])
        candidates = token[inside][:1].tolist() or range(self._starts.size)
        for first in candidates:
            text = self._token_text(first)
            try:
                float(text)
            except ValueError:
                row = int(np.searchsorted(self._row_first, first, side="right")) - 1
                raise DatasetSourceError(self.path, f"line {self.line_of(row)}: {text!r} is not a number") from None
        raise DatasetSourceError(self.path, "contains fields that are not numbers")

    def row_text(self, row: int, limit: int = 60) -> str:
        """Data row `row` as written (separators normalised to one space), cut to `limit` characters."""
        first = int(self._row_first[row])
        piece = self._raw[self._starts[first] : self._ends[first + self.row_width(row) - 1]].tobytes()
        return " ".join(piece.decode("utf-8", errors="replace").translate(str.maketrans(",\t", "  ")).split())[:limit]

    def _token_text(self, token: int) -> str:
        piece = self._raw[self._starts[token] : self._ends[token]].tobytes()
        return piece[:40].decode("utf-8", errors="replace")
