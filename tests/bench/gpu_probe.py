"""GPU limits for the compass: H2D copy, zero-copy gather from registered shm (512, 400, 256, 128 B rows), device gather,
NVML PCIe counters vs bytes moved, green contexts / MPS availability. Run on the device machine.

    python3 tests/bench/gpu_probe.py      # prints one table; nothing written outside /dev/shm (removed)

A verbatim copy of ../shared/reference-bench/gpu_probe.py (the machine's limits measured
independently of graphtier's code), kept here so it travels to the GPU machine with the repo.
"""
import json, mmap, os, shutil, subprocess, sys, time

import cupy as cp
import numpy as np
import torch

GiB = 1 << 30
res = {}


def timed(fn, reps=5):
    fn(); cp.cuda.Device().synchronize()
    s, e = cp.cuda.Event(), cp.cuda.Event()
    best = 1e9
    for _ in range(reps):
        s.record(); fn(); e.record(); e.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(s, e) / 1e3)
    return best


KERNEL = r"""
extern "C" __global__ void gather_rows(const char* __restrict__ src, const long long* __restrict__ ids,
                                        char* __restrict__ dst, long long n, int row_bytes) {
  int lane = threadIdx.x & 31;
  long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
  long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
  int vecs = row_bytes / 16;
  for (long long i = warp; i < n; i += nwarps) {
    const int4* s = (const int4*)(src + ids[i] * (long long)row_bytes);
    int4* d = (int4*)(dst + i * (long long)row_bytes);
    for (int k = lane; k < vecs; k += 32) d[k] = s[k];
  }
}
"""
gather = cp.RawKernel(KERNEL, "gather_rows")

# ---- host table in /dev/shm, registered (mapped|portable) -----------------------------------
size = 8 * GiB
path = "/dev/shm/gt-probe-table"
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, size)
mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
host = np.frombuffer(mm, dtype=np.uint8)
t0 = time.time()
host[:] = 1  # prefault
res["prefault_8GiB_s"] = round(time.time() - t0, 2)
hptr = host.ctypes.data
t0 = time.time()
cp.cuda.runtime.hostRegister(hptr, size, 1 | 2)  # portable | mapped
res["hostRegister_8GiB_s"] = round(time.time() - t0, 3)
dptr = cp.cuda.runtime.hostGetDevicePointer(hptr, 0)
res["uva_same_pointer"] = dptr == hptr
hostdev = cp.ndarray((size,), cp.uint8, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(dptr, size, None), 0))

# ---- H2D copy limit (contiguous, from the registered shm) ------------------------------------
nbytes = 2 * GiB
dbuf = cp.empty(nbytes, cp.uint8)
t = timed(lambda: cp.cuda.runtime.memcpy(dbuf.data.ptr, hptr, nbytes, 1))
res["h2d_memcpy_GBps"] = round(nbytes / t / 1e9, 1)

# ---- zero-copy gather from host (512 B and 480 B rows, random ids) ---------------------------
for row in (512, 400, 256, 128):
    nrows_total = size // row
    n = (1 * GiB) // row
    ids = cp.random.randint(0, nrows_total, n, dtype=cp.int64)
    out = cp.empty(n * row, cp.uint8)
    for blocks in (132 * 4, 132 * 16):
        t = timed(lambda: gather((blocks,), (256,), (hostdev, ids, out, cp.int64(n), cp.int32(row))))
        res[f"zerocopy_gather_{row}B_{blocks}blk_GBps"] = round(n * row / t / 1e9, 1)
    # SM-limited: 13 blocks ~ 10% of 132 SMs (one block per SM)
    for blocks in (13, 26):
        t = timed(lambda: gather((blocks,), (1024,), (hostdev, ids, out, cp.int64(n), cp.int32(row))), reps=3)
        res[f"zerocopy_gather_{row}B_{blocks}x1024thr_GBps"] = round(n * row / t / 1e9, 1)

# ---- CPU gather + H2D (what CPU loaders do) ---------------------------------------------------
row = 512
tbl = torch.from_numpy(host[: 4 * GiB].view(np.float32).reshape(-1, row // 4))
n = 262144
idx = torch.randint(0, tbl.shape[0], (n,))
pinned = torch.empty((n, row // 4), dtype=torch.float32).pin_memory()
torch.set_num_threads(16)
t0 = time.time()
for _ in range(3):
    torch.index_select(tbl, 0, idx, out=pinned)
    g = pinned.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
res["cpu_gather16thr_plus_h2d_512B_GBps"] = round(3 * n * row / (time.time() - t0) / 1e9, 2)

# ---- device gather vs D2D copy ----------------------------------------------------------------
dt = torch.empty((16 * 1024 * 1024, 128), dtype=torch.float32, device="cuda")  # 8 GiB, 512 B rows
didx = torch.randint(0, dt.shape[0], (2 * 1024 * 1024,), device="cuda")
dout = torch.empty((didx.numel(), 128), dtype=torch.float32, device="cuda")
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
def tt(fn):
    fn(); torch.cuda.synchronize(); best = 1e9
    for _ in range(5):
        s.record(); fn(); e.record(); e.synchronize(); best = min(best, s.elapsed_time(e) / 1e3)
    return best
t = tt(lambda: torch.index_select(dt, 0, didx, out=dout))
res["device_index_select_512B_GBps(read+write)"] = round(2 * dout.numel() * 4 / t / 1e9, 0)
src = dt[: didx.numel()]
t = tt(lambda: dout.copy_(src))
res["device_d2d_copy_GBps(read+write)"] = round(2 * dout.numel() * 4 / t / 1e9, 0)
del dt

# ---- NVML PCIe counters vs bytes moved ----------------------------------------------------------
try:
    import pynvml as nv
    nv.nvmlInit(); h = nv.nvmlDeviceGetHandleByIndex(0)
    FI_TX, FI_RX = 197, 198  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES / RX_BYTES
    def rd():
        v = nv.nvmlDeviceGetFieldValues(h, [FI_TX, FI_RX])
        return [(x.nvmlReturn, x.value.ullVal) for x in v]
    a = rd()
    for _ in range(4):
        cp.cuda.runtime.memcpy(dbuf.data.ptr, hptr, nbytes, 1)
    cp.cuda.Device().synchronize()
    b = rd()
    res["nvml_pcie_fields_ret"] = [a[0][0], a[1][0]]
    res["nvml_pcie_rx_delta_per_h2d_byte"] = round((b[1][1] - a[1][1]) / (4 * nbytes), 3) if a[1][0] == 0 else None
    res["nvml_pcie_tx_delta_per_h2d_byte"] = round((b[0][1] - a[0][1]) / (4 * nbytes), 3) if a[0][0] == 0 else None
    try:
        res["nvml_pcie_throughput_rx_KBps"] = nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES)
    except Exception as ex:
        res["nvml_pcie_throughput_err"] = str(ex)
    res["nvml_pcie_link"] = [nv.nvmlDeviceGetCurrPcieLinkGeneration(h), nv.nvmlDeviceGetCurrPcieLinkWidth(h)]
except Exception as ex:
    res["nvml_err"] = repr(ex)

# ---- green contexts, MPS ---------------------------------------------------------------------------
try:
    import torch.cuda.green_contexts as gc
    res["green_contexts"] = [n for n in dir(gc) if not n.startswith("_")]
    try:
        ctx = gc.GreenContext.create(num_sms=16, device_id=0)
        res["green_ctx_create"] = "ok"
    except Exception as ex:
        res["green_ctx_create"] = repr(ex)[:200]
except Exception as ex:
    res["green_contexts"] = repr(ex)[:200]
res["mps_control"] = shutil.which("nvidia-cuda-mps-control")
res["torch"] = torch.__version__
res["gpu"] = torch.cuda.get_device_name(0)

cp.cuda.runtime.hostUnregister(hptr)
del host, hostdev
mm.close(); os.close(fd); os.unlink(path)
print(json.dumps(res, indent=1))
