// One-launch tiered gather on the GPU: every output row is read from wherever its id says it
// lives (this GPU's replica, a local or peer share of the interleaved tier over NVLink,
// registered host memory over PCIe, or the storage rows staged in pinned memory), and written
// to its place in the output. See graphtier/cuda_gather.h for the contract.
//
// A group of G lanes copies one row. The lanes walk the row in 16-byte chunks laid on the
// 128-byte lines that hold it (the group's first chunk is the line start, not the row start):
// every request the group issues is a whole, aligned 16-byte piece of a line the row touches,
// so a row that starts mid-line costs no extra line and no split request over PCIe (seed 003's
// circular shift, with int4 loads). Bytes of a chunk outside the row are loaded and dropped;
// the writes are exact. Sorting the ids (done by the caller) puts host rows in address order
// and makes each tier a contiguous run of positions: the device rows first, then the host rows.
// Each block finds that split (a binary search) and works on its part only, so the grid's host
// blocks, capped by the caller, are all the zero-copy reads there are in flight.
//
// The launch never waits for the host: the rows per source are counted in shared memory by
// each group's first lane and added to the caller's device counters once per block, and an id
// out of range is skipped and counted there too, for the caller to read back when it reports.
#include <cuda_runtime.h>

#include <cstdint>

#include "graphtier/cuda_gather.h"

namespace graphtier {
namespace cuda {
namespace {

// The address of row `id` (at sorted position `pos`) and the counter of the source it is read from.
__device__ __forceinline__ int row_source(const GatherTable& t, int64_t id, int64_t pos,
                                          const char** src) {
  const int64_t rb = t.row_bytes;
  if (id < t.replicated_end) {
    *src = t.replicated + id * rb;
    return kCounterReplicated;
  }
  if (id < t.interleaved_end) {
    const int64_t off = id - t.replicated_end;
    const int64_t share_index = off % t.num_devices;
    const char* share = t.interleaved[share_index];
    if (share != nullptr) {
      *src = share + (off / t.num_devices) * rb;
      return share_index == t.device_index ? kCounterInterleavedLocal : kCounterInterleavedPeer;
    }
    *src = t.host + id * rb;  // an unreachable peer's rows are read from the host copy
    return kCounterHost;
  }
  if (id < t.host_end) {
    *src = t.host + id * rb;
    return kCounterHost;
  }
  *src = t.staged + (pos - t.storage_first) * rb;
  return kCounterStorage;
}

// Writes the bytes of chunk `v` (loaded from address c) that fall inside the row [s, e) to
// the matching bytes of the destination row d. kWords: rows and bases are 4-byte multiples.
template <bool kWords>
__device__ __forceinline__ void store_partial(const int4& v, uintptr_t c, uintptr_t s, uintptr_t e,
                                              char* d) {
  if (kWords) {
    const uint32_t w[4] = {static_cast<uint32_t>(v.x), static_cast<uint32_t>(v.y),
                           static_cast<uint32_t>(v.z), static_cast<uint32_t>(v.w)};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uintptr_t a = c + 4 * k;
      if (a >= s && a < e) *reinterpret_cast<uint32_t*>(d + (a - s)) = w[k];
    }
  } else {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(&v);
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const uintptr_t a = c + k;
      if (a >= s && a < e) d[a - s] = static_cast<char>(b[k]);
    }
  }
}

// The first sorted position whose id is past the device tiers (binary search): the host part
// (host tier, staged storage rows, ids out of range past the end) starts there.
__device__ int64_t host_part_begin(const int64_t* sorted_ids, int64_t n, int64_t interleaved_end) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (sorted_ids[mid] < interleaved_end) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Blocks [0, device_blocks) copy the device part of the sorted ids, the others the host part, so
// the zero-copy reads in flight are capped by the host blocks alone.
template <int G, bool kWords>
__global__ void tiered_gather_kernel(const GatherTable t, const int64_t* __restrict__ sorted_ids,
                                     const int64_t* __restrict__ positions, int64_t n,
                                     char* __restrict__ out, int64_t* __restrict__ counters,
                                     int device_blocks) {
  __shared__ unsigned long long block_counts[kCounterBadId];  // the sources, then the bad ids
  __shared__ int64_t split;
  if (threadIdx.x < kCounterBadId) block_counts[threadIdx.x] = 0;
  // without device blocks (no device tiers) the host part is everything, negative bad ids too
  if (threadIdx.x == 0) {
    split = device_blocks > 0 ? host_part_begin(sorted_ids, n, t.interleaved_end) : 0;
  }
  __syncthreads();
  const bool device_part = static_cast<int>(blockIdx.x) < device_blocks;
  const int64_t begin = device_part ? 0 : split;
  const int64_t end = device_part ? split : n;
  const int64_t part_blocks = device_part ? device_blocks : gridDim.x - device_blocks;
  const int64_t block = device_part ? blockIdx.x : blockIdx.x - device_blocks;
  const int lane = threadIdx.x % G;
  const int64_t groups = (part_blocks * blockDim.x) / G;
  const int64_t rb = t.row_bytes;
  for (int64_t i = begin + (block * blockDim.x + threadIdx.x) / G; i < end; i += groups) {
    const int64_t id = sorted_ids[i];
    if (id < 0 || id >= t.num_rows) {
      if (lane == 0) {
        atomicAdd(&block_counts[kCounterBadIds], 1ULL);
        counters[kCounterBadId] = id;  // any one of them: racing stores all write a bad id
      }
      continue;
    }
    const char* src_row;
    const int source = row_source(t, id, i, &src_row);
    if (lane == 0) atomicAdd(&block_counts[source], 1ULL);
    const uintptr_t s = reinterpret_cast<uintptr_t>(src_row);
    const uintptr_t e = s + rb;
    char* d = out + positions[i] * rb;
    const uintptr_t line = s & ~static_cast<uintptr_t>(127);
    for (uintptr_t c = line + 16 * lane; c < e; c += 16 * G) {
      if (c + 16 <= s) continue;  // a chunk of the first line before the row starts
      const int4 v = *reinterpret_cast<const int4*>(c);
      char* dst = d + (static_cast<intptr_t>(c) - static_cast<intptr_t>(s));
      if (c >= s && c + 16 <= e && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
        *reinterpret_cast<int4*>(dst) = v;
      } else {
        store_partial<kWords>(v, c, s, e, d);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x < kCounterBadId && block_counts[threadIdx.x] != 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(counters + threadIdx.x),
              block_counts[threadIdx.x]);
  }
}

// 4-byte stores are safe when every row starts 4-byte aligned at the source and the destination.
bool word_aligned(const GatherTable& t, const char* out) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(t.replicated) |
                   reinterpret_cast<uintptr_t>(t.host) | reinterpret_cast<uintptr_t>(t.staged) |
                   static_cast<uintptr_t>(t.row_bytes);
  for (int d = 0; d < t.num_devices; ++d) bits |= reinterpret_cast<uintptr_t>(t.interleaved[d]);
  return (bits & 3) == 0;
}

template <int G>
cudaError_t launch_group(const GatherTable& t, const int64_t* ids, const int64_t* pos, int64_t n,
                         char* out, int64_t* counters, int device_blocks, int host_blocks,
                         int threads, cudaStream_t stream) {
  const int64_t wanted = (n * G + threads - 1) / threads;  // blocks giving every row a group
  int device = static_cast<int>(wanted < device_blocks ? wanted : device_blocks);
  if (t.interleaved_end == 0) device = 0;  // no device tiers: no device part
  const int host = static_cast<int>(wanted < host_blocks ? wanted : host_blocks);  // >= 1: bad ids
  const int blocks = device + host;
  if (word_aligned(t, out)) {
    tiered_gather_kernel<G, true><<<blocks, threads, 0, stream>>>(t, ids, pos, n, out, counters,
                                                                   device);
  } else {
    tiered_gather_kernel<G, false><<<blocks, threads, 0, stream>>>(t, ids, pos, n, out, counters,
                                                                    device);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_tiered_gather(const GatherTable& table, const int64_t* sorted_ids,
                                 const int64_t* positions, int64_t n, char* out,
                                 int64_t* counters, int device_blocks, int host_blocks, int threads,
                                 cudaStream_t stream) {
  if (n <= 0 || table.row_bytes <= 0) return cudaSuccess;
  if (counters == nullptr || device_blocks < 1 || host_blocks < 1 || threads < 32 ||
      threads > 1024 || threads % 32 != 0 || table.num_devices < 1 ||
      table.num_devices > kMaxDevices || table.device_index < 0 ||
      table.device_index >= table.num_devices) {
    return cudaErrorInvalidValue;
  }
  // Lanes per row: enough 16-byte chunks to cover a row in one pass, 4 to 32.
  const int chunks = (table.row_bytes + 15) / 16;
  const int g = chunks > 16 ? 32 : chunks > 8 ? 16 : chunks > 4 ? 8 : 4;
  switch (g) {
    case 32:
      return launch_group<32>(table, sorted_ids, positions, n, out, counters, device_blocks,
                              host_blocks, threads, stream);
    case 16:
      return launch_group<16>(table, sorted_ids, positions, n, out, counters, device_blocks,
                              host_blocks, threads, stream);
    case 8:
      return launch_group<8>(table, sorted_ids, positions, n, out, counters, device_blocks,
                             host_blocks, threads, stream);
    default:
      return launch_group<4>(table, sorted_ids, positions, n, out, counters, device_blocks,
                             host_blocks, threads, stream);
  }
}

}  // namespace cuda
}  // namespace graphtier
