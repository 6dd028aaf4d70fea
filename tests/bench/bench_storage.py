"""Storage tier reads against the disk's own bandwidth, for the same request size, in one run.

Writes a feature file (`--file-gib`, 128 float32 per row = 512 B rows) on the filesystem of
`--dir`, then measures, in this order and within one run:
- `dd iflag=direct` reading the file with requests of the file's O_DIRECT block (statx; 512 B
  on most devices, 4 KiB where unreported) and with 1 MiB requests (the disk's own bandwidth at
  that request size, one request at a time);
- `StorageReader` in `direct` mode on batches of random rows (requests of that block, a row or
  two per request; `--inflight` requests in flight);
- batches of adjacent rows (coalesced into 1 MiB requests), each read twice, in turn: by
  `StorageReader` into rows from its `empty_rows` (what a producer reads into) and by `dd
  iflag=direct bs=1M` over the same aligned byte range, the order alternating from batch to
  batch so that neither gains from the other having read the range first (the disk of a VM
  may sit on the host's page cache);
- the same random batches in `page-cache` mode and through the memory mapping the storage
  tier used before (`index_select` on `np.memmap`), each from a cold cache (the file's pages
  are dropped with posix_fadvise before each measurement).
Bandwidth is device bytes read per second (whole aligned requests); the rows the batches
needed per second is printed beside it.

Run: python tests/bench/bench_storage.py [--dir /var/tmp] [--file-gib 2] [--batch-rows 20000] [--batches 20]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from graphtier.service.prepared.npy_io import npy_data_offset
from graphtier.service.storage import StorageReader
from graphtier.service.storage.dio_alignment import direct_io_alignment

ROW_FLOATS = 128
MiB = 2**20


def write_file(path: Path, gib: float) -> int:
    rows = int(gib * 2**30) // (ROW_FLOATS * 4)
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, ROW_FLOATS))
    gen = np.random.default_rng(0)
    for start in range(0, rows, 1 << 18):
        array[start : start + (1 << 18)] = gen.standard_normal((min(1 << 18, rows - start), ROW_FLOATS), np.float32)
    array.flush()
    del array
    return rows


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def dd_bandwidth(path: Path, block: int, total: int) -> float:
    """Bytes/s of `dd iflag=direct` reading `total` bytes in `block`-byte requests."""
    count = max(1, total // block)
    done = subprocess.run(
        ["dd", f"if={path}", "of=/dev/null", f"bs={block}", f"count={count}", "iflag=direct"],
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"(\d+) bytes .* copied, ([0-9.]+) s", done.stderr)
    if not match:
        raise SystemExit(f"cannot read dd's output: {done.stderr}")
    return int(match[1]) / float(match[2])


def device_bytes_read() -> int:
    """Bytes this process has caused to be fetched from storage (the kernel's count, /proc/self/io)."""
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("read_bytes:")).split()[1])


def run_reader(path: Path, rows: int, batches: list[np.ndarray], mode: str, inflight: int) -> tuple[float, ...]:
    """Bytes/s: fetched from the device (/proc/self/io), asked for while requests were in flight,
    asked for over the whole reads (planning and the copy to the slots included), and needed by the rows."""
    reader = StorageReader(
        path,
        data_offset=npy_data_offset(path),
        row_bytes=ROW_FLOATS * 4,
        first_row=0,
        num_rows=rows,
        mode=mode,
        inflight=inflight,
    )  # type: ignore[arg-type]  # the mode as the command line gives it
    out = reader.empty_rows(max(b.size for b in batches)).numpy()  # the rows a producer reads into
    try:
        before, started = device_bytes_read(), time.perf_counter()
        for batch in batches:
            reader.read(batch, out)
        seconds = time.perf_counter() - started
        device, st = device_bytes_read() - before, reader.stats
        return device / seconds, st.bytes_read / st.io_seconds, st.bytes_read / seconds, st.row_bytes / seconds
    finally:
        reader.close()


def dd_range(path: Path, offset: int, length: int) -> float:
    """Seconds `dd iflag=direct bs=1M` takes (its own count) for `length` bytes at `offset` (both aligned)."""
    done = subprocess.run(
        [
            "dd",
            f"if={path}",
            "of=/dev/null",
            f"bs={MiB}",
            "iflag=direct,skip_bytes,count_bytes",
            f"skip={offset}",
            f"count={length}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"(\d+) bytes .* copied, ([0-9.]+) s", done.stderr)
    if not match or int(match[1]) != length:
        raise SystemExit(f"cannot read dd's output: {done.stderr}")
    return float(match[2])


def run_coalesced_paired(path: Path, rows: int, batches: list[np.ndarray], inflight: int) -> tuple[float, ...]:
    """Bytes/s over the same aligned ranges: the reader's whole reads (rows in the output array), the reader's
    requests in flight only, and dd, each batch read by both, the order alternating (the rows checked against
    the file outside the timing); then the share of the reader's requests read straight into the rows."""
    offset = npy_data_offset(path)
    reader = StorageReader(
        path, data_offset=offset, row_bytes=ROW_FLOATS * 4, first_row=0, num_rows=rows, mode="direct", inflight=inflight
    )
    out = reader.empty_rows(max(b.size for b in batches)).numpy()  # the rows a producer reads into
    reader_s = dd_s = 0.0
    try:
        for i, batch in enumerate(batches):
            lo = (offset + int(batch[0]) * ROW_FLOATS * 4) // 4096 * 4096
            hi = -(-(offset + (int(batch[-1]) + 1) * ROW_FLOATS * 4) // 4096) * 4096
            for turn in (0, 1) if i % 2 else (1, 0):
                drop_cache(path)
                if turn:
                    dd_s += dd_range(path, lo, hi - lo)
                else:
                    started = time.perf_counter()
                    reader.read(batch, out)
                    reader_s += time.perf_counter() - started
                    stored = np.load(path, mmap_mode="r")
                    assert np.array_equal(out[: batch.size].view(np.float32), stored[batch])
        st = reader.stats
        return (
            st.bytes_read / reader_s,
            st.bytes_read / st.io_seconds,
            st.bytes_read / dd_s,
            st.direct_requests / st.requests,
        )
    finally:
        reader.close()


def run_mmap(path: Path, batches: list[np.ndarray]) -> tuple[float, float]:
    """(device bytes/s, row bytes/s) of index_select on the file's memory mapping."""
    table = torch.from_numpy(np.load(path, mmap_mode="r+"))
    before, started = device_bytes_read(), time.perf_counter()
    needed = 0
    for batch in batches:
        ids = torch.from_numpy(np.unique(batch))
        table.index_select(0, ids)
        needed += ids.numel() * ROW_FLOATS * 4
    seconds = time.perf_counter() - started
    return (device_bytes_read() - before) / seconds, needed / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", default=os.environ.get("TMPDIR", "/var/tmp"), help="a directory on the disk to measure"
    )
    parser.add_argument("--file-gib", type=float, default=2.0)
    parser.add_argument("--batch-rows", type=int, default=20000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--inflight", type=int, default=16)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="graphtier-bench-storage-", dir=args.dir) as tmp:
        path = Path(tmp) / "features.npy"
        rows = write_file(path, args.file_gib)
        gen = np.random.default_rng(1)
        random_batches = [np.sort(gen.choice(rows, args.batch_rows, replace=False)) for _ in range(args.batches)]
        run = args.batch_rows * 4
        dense_batches = [np.arange(s, s + run) for s in gen.integers(0, rows - run, args.batches)]
        dense_bytes = sum(b.size for b in dense_batches) * ROW_FLOATS * 4

        print(
            f"graphtier storage reads: {path.parent} ({os.statvfs(tmp).f_bsize} B blocks), file {args.file_gib} GiB, "
            f"{rows:,} rows of {ROW_FLOATS * 4} B; batches of {args.batch_rows:,} random rows, "
            f"{args.inflight} in flight; load average {os.getloadavg()[0]:.2f}"
        )
        results = []
        drop_cache(path)
        block = direct_io_alignment(path).block  # the reader's staged requests are whole blocks
        dd_block = dd_bandwidth(path, block, min(sum(b.size for b in random_batches) * block, 1 << 30))
        dd_1m = dd_bandwidth(path, MiB, min(dense_bytes * 4, 2 << 30))
        for label, batches, mode, inflight in (
            ("direct, random rows", random_batches, "direct", args.inflight),
            ("direct, random rows, 1 in flight", random_batches[: max(1, args.batches // 4)], "direct", 1),
            ("page-cache, random rows (cold)", random_batches, "page-cache", args.inflight),
        ):
            drop_cache(path)
            results.append((label, *run_reader(path, rows, batches, mode, inflight)))
        paired = run_coalesced_paired(path, rows, dense_batches, args.inflight)
        drop_cache(path)
        mmap_device, mmap_needed = run_mmap(path, random_batches)

    print(
        f"\n{'reads':38s} {'device':>8} {'I/O':>8} {'batch':>8} {'rows':>8} "
        f"{'I/O vs dd':>10} {'batch vs dd':>12}  (MB/s)"
    )
    print(f"{f'dd iflag=direct bs={block} (sequential)':38s} {dd_block / 1e6:>8.1f}")
    print(f"{'dd iflag=direct bs=1M (sequential)':38s} {dd_1m / 1e6:>8.1f}")
    for label, device, io, batch, needed in results:
        print(
            f"{label:38s} {device / 1e6:>8.1f} {io / 1e6:>8.1f} {batch / 1e6:>8.1f} {needed / 1e6:>8.1f} "
            f"{io / dd_block:>9.2f}x {batch / dd_block:>11.2f}x  ({block} B requests)"
        )
    print(
        f"{'mmap index_select, random rows (cold)':38s} {mmap_device / 1e6:>8.1f} {'':>8} {'':>8} "
        f"{mmap_needed / 1e6:>8.1f}"
    )
    print(
        "device = fetched from the device for this process (/proc/self/io read_bytes); I/O = aligned bytes the "
        "reader asked for, over the time its requests were in flight; batch = the same over whole reads (plan, "
        "requests, copy to the slots); rows = bytes the batches needed"
    )
    whole, io, dd_same, straight = paired
    print(
        f"\ncoalesced 1 MiB requests, {len(dense_batches)} batches of {run:,} adjacent rows "
        f"({run * ROW_FLOATS * 4 / MiB:.0f} MiB), each read by both in turn over the same ranges (MB/s); "
        f"{straight:.0%} of the reader's requests straight into the rows:"
    )
    print(f"  dd iflag=direct bs=1M, same ranges {dd_same / 1e6:8.1f}")
    print(f"  reader, requests in flight only    {io / 1e6:8.1f}  {io / dd_same:.2f}x dd")
    print(
        f"  reader, rows in the output array   {whole / 1e6:8.1f}  {whole / dd_same:.2f}x dd  (end to end: plan, "
        f"requests, copy to the slots)"
    )
    print(f"load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
