// Tiered row gather: out[i] = row ids[i] of a table split into a resident part (rows
// [0, host_end), host shared memory holding the device tiers and the host tier) and a
// storage part (rows [host_end, num_rows), a memory-mapped file), counting rows per source.
//
// Three passes, each over chunks in parallel through parallel_chunks (graphtier/work_split.h),
// not OpenMP: the gather runs in producers beside busy trainer ranks, where OpenMP's spinning
// all-threads regions lost most of its bandwidth.
//
// 1. Over the ids, branch-free: validate, count rows per source and, for a batch that may be
//    grouped, count each chunk's ids per table region. No row is copied before every id has
//    been checked, so a bad id leaves `out` untouched.
// 2. A large batch of small rows is read region by region: each chunk writes its (id,
//    position) keys into its own slots of each of 256 contiguous regions of the table (the top
//    8 bits of the id), a stable grouping with batch order kept within a region. Reads within
//    a region share DRAM pages and TLB entries that random order wastes; each row is still
//    written to its own position. Ids that arrive sorted (no descent) skip it, and so do the
//    widths with a kernel of their own (pass 3), for which it cost more than it saved.
// 3. One copy per row, the row a few iterations ahead prefetched so several misses are in
//    flight per thread. Works on bytes, so any dtype and row width is supported; rows of 256,
//    512 or 1024 bytes into a large output take a kernel compiled for their width (below).
//
// The first two passes once ran on the calling thread (a helper's wake-up per pass looked too
// dear on a busy machine); each cost 5-10% of a 500,000-row gather while the other core idled.
// The grouping's keys are kept per thread between calls: allocating them afresh cost a page
// fault per 4 KiB, as much as the grouping itself. Outputs larger than the caches are written
// with non-temporal stores, a whole 64-byte line per store where the CPU has them: this op
// never re-reads them, and skipping the read-for-ownership of every destination line saves a
// third of the memory traffic.
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "graphtier/ops.h"
#include "graphtier/work_split.h"

namespace graphtier {
namespace {

constexpr int64_t kPrefetchLines = 16;          // cache lines of a row prefetched (1 KiB)
constexpr int64_t kPrefetchAheadBytes = 8192;   // prefetched bytes in flight per thread ...
constexpr int64_t kMaxRowPrefetch = 16;         // ... over at most this many rows ahead
constexpr int64_t kCopyGrainBytes = int64_t{1} << 20;  // bytes per chunk of the copy pass ...
constexpr int64_t kCopyGrain = 2048;                   // ... and at most this many rows
constexpr int64_t kScanMinGrain = 16384;        // least ids per chunk of the passes over the ids
constexpr int64_t kSortMinRows = 32768;         // batches at least this long are read ...
constexpr int64_t kSortMaxRowBytes = 2048;      // ... when their rows are at most this wide ...
constexpr int kRegionBits = 8;                  // ... grouped into 2^8 regions of the table
constexpr int64_t kStreamMinBytes = int64_t{8} << 20;  // outputs above this bypass the caches

enum Source : int { kReplicated = 0, kInterleavedLocal, kInterleavedPeer, kHost, kStorage };
// The result's last entry: the position of the first id out of range, or -1. Bad ids are reported
// there rather than by a c10 error, whose message formatting crashed the extension on one build
// (service/native_ops.py); nothing is copied then.
constexpr int kFirstBadId = 5;

// Copies one row of `bytes` from `src` to `dst`.
using RowCopy = void (*)(char* dst, const char* src, int64_t bytes);

void copy_row_cached(char* dst, const char* src, int64_t bytes) { std::memcpy(dst, src, bytes); }

// Where row r of the table starts: the resident part below host_end, the storage part above.
struct RowSource {
  uintptr_t resident, storage;  // storage: its base less host_end rows, so both add r * bytes
  int64_t host_end, bytes;
  const char* operator()(int64_t r) const {
    return reinterpret_cast<const char*>((r < host_end ? resident : storage) +
                                         static_cast<uintptr_t>(r) * static_cast<uintptr_t>(bytes));
  }
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// Whole cache lines with 64-byte non-temporal stores; `dst` 64-byte aligned, `bytes` % 64 == 0.
// One store per line fills its write-combining buffer at once.
__attribute__((target("avx512f"))) void copy_row_stream64(char* dst, const char* src,
                                                          int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) {
    const __m512i v = _mm512_loadu_si512(src + b);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + b), v);
  }
}

// 32-byte non-temporal stores; `dst` 32-byte aligned, `bytes` % 32 == 0.
__attribute__((target("avx2"))) void copy_row_stream32(char* dst, const char* src,
                                                       int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + b));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + b), v);
  }
}

// The widest streaming copy this CPU, `dst` and the row width allow; the cached copy when the
// output is small enough to be read back from the caches, or no streaming copy fits.
RowCopy row_copy_for(const char* dst, int64_t row_bytes, bool large_output) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const auto at = reinterpret_cast<uintptr_t>(dst);
  if (large_output && avx512 && row_bytes % 64 == 0 && at % 64 == 0) return copy_row_stream64;
  if (large_output && avx2 && row_bytes % 32 == 0 && at % 32 == 0) return copy_row_stream32;
  return copy_row_cached;
}

void store_fence() { _mm_sfence(); }


// The copy pass for rows of exactly kBytes (a multiple of 64) into a large, 64-byte aligned
// output: `row_at(j)` and `position_at(j)` give the j-th row to read and where it goes. Its
// copy is unrolled at compile time, so the loads of a row issue back to back, and only the first
// half of each row kRowAhead rows ahead is prefetched: the demand loads and the hardware's
// stream prefetcher bring the rest. Against the generic loop (a call per row, every line
// prefetched), on random 512 B rows from a 1 GiB table, 2 threads, interleaved in one process:
// 27.4 GB/s against 23.0; prefetching every line inlined reached 23.8, half through the call 24.2.
// `source` is taken by value: through a reference, which the streamed stores could alias, the
// loop reloaded its fields for every row.
template <int64_t kBytes, typename RowAt, typename PositionAt>
__attribute__((target("avx512f"))) void stream_rows(int64_t begin, int64_t end, const RowSource source,
                                                     char* dst, RowAt row_at, PositionAt position_at) {
  constexpr int64_t kRowAhead = 16;
  constexpr int64_t kPrefetched = kBytes / 2;
  for (int64_t j = begin; j < end; ++j) {
    if (j + kRowAhead < end) {
      const char* ahead = source(row_at(j + kRowAhead));
      for (int64_t b = 0; b < kPrefetched; b += 64) __builtin_prefetch(ahead + b);
    }
    const char* src = source(row_at(j));
    char* out = dst + position_at(j) * kBytes;
    __m512i lines[kBytes / 64];
    for (int64_t l = 0; l < kBytes / 64; ++l) lines[l] = _mm512_loadu_si512(src + 64 * l);
    for (int64_t l = 0; l < kBytes / 64; ++l) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + 64 * l), lines[l]);
    }
  }
  _mm_sfence();  // order this run's streamed rows before the loop returns
}

// Runs the fixed-width copy pass over [begin, end) when the width has one; false otherwise.
template <typename RowAt, typename PositionAt>
bool stream_rows_fixed(int64_t bytes, int64_t begin, int64_t end, const RowSource& source, char* dst,
                       RowAt row_at, PositionAt position_at) {
  switch (bytes) {
    case 256:
      stream_rows<256>(begin, end, source, dst, row_at, position_at);
      return true;
    case 512:
      stream_rows<512>(begin, end, source, dst, row_at, position_at);
      return true;
    case 1024:
      stream_rows<1024>(begin, end, source, dst, row_at, position_at);
      return true;
    default:
      return false;
  }
}

bool fixed_width_kernel(const char* dst, int64_t row_bytes, bool large_output) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool width = row_bytes == 256 || row_bytes == 512 || row_bytes == 1024;
  return large_output && avx512 && width && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
}
#else
RowCopy row_copy_for(const char*, int64_t, bool) { return copy_row_cached; }
void store_fence() {}
template <typename RowAt, typename PositionAt>
bool stream_rows_fixed(int64_t, int64_t, int64_t, const RowSource&, char*, RowAt, PositionAt) {
  return false;
}
bool fixed_width_kernel(const char*, int64_t, bool) { return false; }
#endif

// What one pass over a run of ids finds: rows per tier boundary, bad ids, descents.
struct IdTally {
  int64_t at_least_rep = 0, at_least_inter = 0, at_least_host = 0, local = 0;
  int64_t bad = 0;       // ids outside [0, num_rows), negative ones included
  int64_t descents = 0;  // positions whose id is below the previous one
  void add(const IdTally& o) {
    at_least_rep += o.at_least_rep;
    at_least_inter += o.at_least_inter;
    at_least_host += o.at_least_host;
    local += o.local;
    bad += o.bad;
    descents += o.descents;
  }
};

// tally()'s common case, no regions and a power-of-two device count, in a form the compiler
// vectorises, compiled for the widest vectors the CPU has: the pass over the ids must finish
// before any row is copied, so its time is the gather's.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GRAPHTIER_WIDEST_VECTORS __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GRAPHTIER_WIDEST_VECTORS
#endif
GRAPHTIER_WIDEST_VECTORS IdTally tally_plain(
    const int64_t* id, int64_t begin, int64_t end, uint64_t limit, int64_t rep_end,
    int64_t inter_end, int64_t host_end, int64_t device_mask, int64_t device_index) {
  int64_t bad = 0, descents = 0, at_least_rep = 0, at_least_inter = 0, at_least_host = 0, local = 0;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t r = id[i];
    const int64_t previous = i > begin ? id[i - 1] : r;
    bad += static_cast<uint64_t>(r) >= limit;
    descents += r < previous;
    at_least_rep += r >= rep_end;
    at_least_inter += r >= inter_end;
    at_least_host += r >= host_end;
    local += (r >= rep_end) & (r < inter_end) & (((r - rep_end) & device_mask) == device_index);
  }
  IdTally t;
  t.bad = bad;
  t.descents = descents;
  t.at_least_rep = at_least_rep;
  t.at_least_inter = at_least_inter;
  t.at_least_host = at_least_host;
  t.local = local;
  return t;
}

// The tiers' boundaries, to tally ids against them.
struct IdScan {
  int64_t rep_end, inter_end, host_end, num_devices, device_index;

  // Tallies ids[begin, end) (branch-free) and, when `regions` is given, counts them per region
  // (id >> region_shift) there.
  IdTally tally(const int64_t* id, int64_t begin, int64_t end, uint64_t limit, int64_t* regions,
                int region_shift) const {
    const bool pow2_devices = (num_devices & (num_devices - 1)) == 0;
    const int64_t device_mask = num_devices - 1;
    if (regions == nullptr && pow2_devices && end > begin) {
      return tally_plain(id, begin, end, limit, rep_end, inter_end, host_end, device_mask, device_index);
    }
    IdTally t;
    int64_t previous = id[begin];
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = id[i];
      t.bad += static_cast<uint64_t>(r) >= limit;
      t.descents += r < previous;
      previous = r;
      const bool interleaved = (r >= rep_end) & (r < inter_end);
      t.at_least_rep += r >= rep_end;
      t.at_least_inter += r >= inter_end;
      t.at_least_host += r >= host_end;
      if (pow2_devices) {
        t.local += interleaved & (((r - rep_end) & device_mask) == device_index);
      } else if (interleaved) {
        t.local += ((r - rep_end) % num_devices) == device_index;
      }
      // Clamped, so a bad id (reported after the pass) cannot count outside the regions.
      if (regions != nullptr) {
        ++regions[std::min(static_cast<uint64_t>(r), limit - 1) >> region_shift];
      }
    }
    return t;
  }
};

int64_t row_bytes_of(const at::Tensor& t) {
  int64_t n = t.element_size();
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

void check_table(const at::Tensor& t, const char* name, const at::Tensor& like) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.dim() >= 1, name, " must have a row dimension");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), name, " has dtype ", t.scalar_type(),
              " but out has ", like.scalar_type());
  TORCH_CHECK(t.sizes().slice(1) == like.sizes().slice(1), name, " rows have shape ",
              t.sizes().slice(1), " but out rows have shape ", like.sizes().slice(1));
}

}  // namespace

at::Tensor tiered_gather(const at::Tensor& ids, const at::Tensor& resident,
                         const at::Tensor& storage, at::IntArrayRef boundaries,
                         int64_t num_devices, int64_t device_index, const at::Tensor& out) {
  TORCH_CHECK(ids.device().is_cpu() && ids.dim() == 1 && ids.scalar_type() == at::kLong &&
                  ids.is_contiguous(),
              "ids must be a contiguous 1-D int64 CPU tensor");
  TORCH_CHECK(out.device().is_cpu() && out.dim() >= 1 && out.is_contiguous(),
              "out must be a contiguous CPU tensor with a row dimension");
  check_table(resident, "resident", out);
  check_table(storage, "storage", out);
  TORCH_CHECK(boundaries.size() == 4,
              "boundaries must be [replicated_end, interleaved_end, host_end, num_rows]");
  const int64_t rep_end = boundaries[0], inter_end = boundaries[1];
  const int64_t host_end = boundaries[2], num_rows = boundaries[3];
  TORCH_CHECK(0 <= rep_end && rep_end <= inter_end && inter_end <= host_end &&
                  host_end <= num_rows,
              "boundaries must be monotone, got ", boundaries);
  TORCH_CHECK(resident.size(0) == host_end, "resident has ", resident.size(0),
              " rows but host_end is ", host_end);
  TORCH_CHECK(storage.size(0) == num_rows - host_end, "storage has ", storage.size(0),
              " rows but num_rows - host_end is ", num_rows - host_end);
  TORCH_CHECK(num_devices >= 1 && 0 <= device_index && device_index < num_devices,
              "need num_devices >= 1 and 0 <= device_index < num_devices, got ", num_devices,
              " and ", device_index);
  const int64_t n = ids.numel();
  TORCH_CHECK(out.size(0) >= n, "out has ", out.size(0), " rows, fewer than the ", n, " ids");

  const int64_t rb = row_bytes_of(out);
  const int64_t* id = ids.data_ptr<int64_t>();
  auto* dst = static_cast<char*>(out.data_ptr());
  // Branch-free source address: base of the part holding row r, plus r * rb.
  const RowSource src_of{reinterpret_cast<uintptr_t>(resident.data_ptr()),
                         reinterpret_cast<uintptr_t>(storage.data_ptr()) -
                             static_cast<uintptr_t>(host_end) * static_cast<uintptr_t>(rb),
                         host_end, rb};
  const bool large_output = n * rb >= kStreamMinBytes;
  const RowCopy copy_row = row_copy_for(dst, rb, large_output);
  const bool fixed_width = fixed_width_kernel(dst, rb, large_output);
  const int nthreads = std::max(1, at::get_num_threads());
  // The fixed-width kernel reads random rows in batch order faster than grouped plus the
  // grouping's pass (500,000 rows of 512 B: 1.07-1.09 of the copy against 1.00 with a 23 GB/s
  // copy, 0.74 against 0.66 with a 38 GB/s one), so only the generic loop groups.
  const bool may_group = !fixed_width && n >= kSortMinRows && rb <= kSortMaxRowBytes &&
                         n < (int64_t{1} << 32) && num_rows <= (int64_t{1} << 32);
  int region_shift = 0;  // region of id r: r >> region_shift, below 2^kRegionBits
  while ((num_rows - 1) >> region_shift >= (int64_t{1} << kRegionBits)) ++region_shift;

  // Pass 1, over chunks of the ids in parallel: validate, count per source, count descents and,
  // for a batch that may be grouped, each region's ids per chunk. No row is copied before every
  // id has been checked, so a bad id leaves `out` untouched.
  const int64_t scan_grain =
      std::max<int64_t>(kScanMinGrain, (n + 4 * nthreads - 1) / (4 * nthreads));
  const int64_t scan_chunks = n > 0 ? (n + scan_grain - 1) / scan_grain : 0;
  std::vector<IdTally> tallies(scan_chunks);
  std::vector<int64_t> region_count(may_group ? scan_chunks << kRegionBits : 0);
  const IdScan scan{rep_end, inter_end, host_end, num_devices, device_index};
  // Each pass over the ids works chunk by chunk of scan_grain ids, also when parallel_chunks
  // hands it a longer range (one thread, or its pool busy with another caller's loop): pass 2
  // writes into the slots pass 1 counted for each chunk.
  auto each_scan_chunk = [&](int64_t begin, int64_t end, auto&& body) {
    for (int64_t c = begin / scan_grain; c * scan_grain < end; ++c) {
      body(c, c * scan_grain, std::min(end, (c + 1) * scan_grain));
    }
  };
  parallel_chunks(n, scan_grain, nthreads, [&](int64_t begin, int64_t end) {
    each_scan_chunk(begin, end, [&](int64_t chunk, int64_t from, int64_t to) {
      int64_t* regions = may_group ? region_count.data() + (chunk << kRegionBits) : nullptr;
      tallies[chunk] =
          scan.tally(id, from, to, static_cast<uint64_t>(num_rows), regions, region_shift);
    });
  });
  IdTally total;
  for (int64_t c = 0; c < scan_chunks; ++c) {
    total.add(tallies[c]);
    // A descent between chunks counts too: only ids sorted across the batch skip the grouping.
    if (c > 0 && id[c * scan_grain] < id[c * scan_grain - 1]) ++total.descents;
  }
  at::Tensor counts = at::detail::empty_cpu({6}, at::kLong);
  int64_t* c = counts.data_ptr<int64_t>();
  c[kFirstBadId] = -1;
  if (total.bad > 0) {  // nothing copied: the caller words the error from the position
    c[kFirstBadId] = std::find_if(id, id + n, [&](int64_t r) {
                       return static_cast<uint64_t>(r) >= static_cast<uint64_t>(num_rows);
                     }) - id;
    return counts;
  }

  // Chunks of the copy pass by bytes, so that a batch of wide rows (a few hundred rows of bag-of-words
  // features, megabytes) is not copied by one thread.
  const int64_t copy_grain = std::clamp<int64_t>(kCopyGrainBytes / std::max<int64_t>(rb, 1), 1, kCopyGrain);
  // One copy per row (pass 3), the lines of the row `row_prefetch` iterations ahead prefetched:
  // 16 rows of 512 B, 8 rows of 1 KiB or more (of which the first KiB).
  const int64_t prefetch_bytes = std::min(rb, kPrefetchLines * 64);
  const int64_t row_prefetch = std::clamp<int64_t>(
      kPrefetchAheadBytes / std::max<int64_t>(prefetch_bytes, 1), 1, kMaxRowPrefetch);
  auto prefetch_row = [&](const char* ahead) {
    for (int64_t b = 0; b < prefetch_bytes; b += 64) __builtin_prefetch(ahead + b);
  };
  if (may_group && total.descents > 0) {
    // Pass 2, over the chunks of pass 1: each chunk writes its keys (id << 32 | position)
    // to its own slots of each region, so the grouping is stable (batch order within a region).
    thread_local std::vector<uint64_t> keys;  // kept between calls (see the header)
    if (static_cast<int64_t>(keys.size()) < n) keys.resize(n);
    int64_t running = 0;  // region-major, chunk-minor: slot of chunk c's first id of region g
    for (int64_t g = 0; g < (int64_t{1} << kRegionBits); ++g) {
      for (int64_t c = 0; c < scan_chunks; ++c) {
        int64_t& slot = region_count[(c << kRegionBits) + g];
        const int64_t count = slot;
        slot = running;
        running += count;
      }
    }
    uint64_t* key = keys.data();
    parallel_chunks(n, scan_grain, nthreads, [&](int64_t begin, int64_t end) {
      each_scan_chunk(begin, end, [&](int64_t chunk, int64_t from, int64_t to) {
        int64_t* slot = region_count.data() + (chunk << kRegionBits);
        for (int64_t i = from; i < to; ++i) {
          const auto r = static_cast<uint64_t>(id[i]);
          key[slot[r >> region_shift]++] = r << 32 | static_cast<uint64_t>(i);
        }
      });
    });
    auto row_at = [key](int64_t j) { return static_cast<int64_t>(key[j] >> 32); };
    auto position_at = [key](int64_t j) { return static_cast<int64_t>(key[j] & 0xffffffffu); };
    parallel_chunks(n, copy_grain, nthreads, [&](int64_t begin, int64_t end) {
      if (fixed_width && stream_rows_fixed(rb, begin, end, src_of, dst, row_at, position_at)) return;
      for (int64_t j = begin; j < end; ++j) {
        if (j + row_prefetch < end) {
          prefetch_row(src_of(static_cast<int64_t>(key[j + row_prefetch] >> 32)));
        }
        copy_row(dst + static_cast<int64_t>(key[j] & 0xffffffffu) * rb,
                 src_of(static_cast<int64_t>(key[j] >> 32)), rb);
      }
      store_fence();  // order this chunk's streamed rows before the loop returns
    });
  } else {
    auto row_at = [id](int64_t i) { return id[i]; };
    auto position_at = [](int64_t i) { return i; };
    parallel_chunks(n, copy_grain, nthreads, [&](int64_t begin, int64_t end) {
      if (fixed_width && stream_rows_fixed(rb, begin, end, src_of, dst, row_at, position_at)) return;
      for (int64_t i = begin; i < end; ++i) {
        if (i + row_prefetch < end) prefetch_row(src_of(id[i + row_prefetch]));
        copy_row(dst + i * rb, src_of(id[i]), rb);
      }
      store_fence();
    });
  }

  c[kReplicated] = n - total.at_least_rep;
  c[kInterleavedLocal] = total.local;
  c[kInterleavedPeer] = total.at_least_rep - total.at_least_inter - total.local;
  c[kHost] = total.at_least_inter - total.at_least_host;
  c[kStorage] = total.at_least_host;
  return counts;
}

}  // namespace graphtier
