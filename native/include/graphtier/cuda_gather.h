// The GPU tiered gather's pointer table and launcher. Plain CUDA (no torch headers), so the
// kernel file compiles with nvcc alone, on any machine that has it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace graphtier {
namespace cuda {

constexpr int kMaxDevices = 16;

// The gather's device counters (int64, accumulated by every launch until the caller reads and
// zeroes them): rows per source in graphtier.contract.traffic.GATHER_SOURCES order, then the
// ids found out of range (skipped, nothing written for them) and one such id.
constexpr int kCounterReplicated = 0;
constexpr int kCounterInterleavedLocal = 1;
constexpr int kCounterInterleavedPeer = 2;
constexpr int kCounterHost = 3;
constexpr int kCounterStorage = 4;
constexpr int kCounterBadIds = 5;
constexpr int kCounterBadId = 6;
constexpr int kGatherCounters = 7;

// Where every row of the feature table lives, as seen from one GPU. Row ids are in the
// hotness order, so a row's source follows from its id (see service/placement/plan.py):
//   [0, replicated_end)               replicated: this GPU's replica
//   [replicated_end, interleaved_end) interleaved[(id - replicated_end) % num_devices],
//                                     row (id - replicated_end) / num_devices of that share;
//                                     share `device_index` is this GPU's own; a null share
//                                     is unreachable and read (and counted) from `host`
//   [interleaved_end, host_end)       host: registered host memory read in place (UVA)
//   [host_end, num_rows)              storage: rows staged in `staged` (pinned host memory), in
//                                     sorted-id order, the first at sorted position `storage_first`
// Every base pointer is 16-byte aligned and readable up to the next 128-byte boundary past
// its last row (allocations are padded; host mappings are whole pages).
struct GatherTable {
  const char* replicated;
  const char* interleaved[kMaxDevices];
  const char* host;
  const char* staged;
  int64_t replicated_end;
  int64_t interleaved_end;
  int64_t host_end;
  int64_t num_rows;
  int64_t storage_first;
  int32_t num_devices;
  int32_t device_index;
  int32_t row_bytes;
};

// out[positions[i]] = row sorted_ids[i], for i < n, and counters[source of each row] += 1 (an
// id outside [0, num_rows) is skipped and counted in kCounterBadIds). `sorted_ids` ascending (so
// the host rows are read in address order and the storage rows match the staging order);
// `positions` restores the caller's order. The sorted ids split at the first id past the device
// tiers: at most `device_blocks` blocks of `threads` threads copy the device part (device
// memory, NVLink) and at most `host_blocks` the host part (zero-copy host tier, staged storage),
// so the host reads in flight stay near what PCIe serves while device reads use the SMs they
// are given; a producer keeps both to a slice of the SMs. Reads are 16-byte loads aligned to
// 128-byte lines (a row that starts mid-line costs no extra line); writes are exact. Nothing
// synchronises with the host. Returns the launch error (cudaSuccess when enqueued).
cudaError_t launch_tiered_gather(const GatherTable& table, const int64_t* sorted_ids,
                                 const int64_t* positions, int64_t n, char* out,
                                 int64_t* counters, int device_blocks, int host_blocks, int threads,
                                 cudaStream_t stream);

}  // namespace cuda
}  // namespace graphtier
