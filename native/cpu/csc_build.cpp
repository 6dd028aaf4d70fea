// The passes of the out-of-core CSC build (service/prepared/out_of_core/external_sort.py) as single loops.
//
// Each replaces a chain of numpy calls that allocated one or more temporaries per chunk as
// large as the chunk (ids widened to int64, relabelled ids, keys, bucket ids, a grouping
// order, a dedup mask, destinations): those temporaries outgrow the caches as the graph
// doubles, and on a VM freshly mapped memory is slow to fault in, so the numpy chain grew
// faster than the graph. Here every pass reads its inputs once and writes its output once,
// with no temporaries; the results are exactly the numpy path's (tested against it).
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "graphtier/ops.h"

namespace graphtier {
namespace {

constexpr int64_t kLookahead = 16;     // ids ahead whose table entries are prefetched
constexpr int64_t kLinearBuckets = 16;  // up to this many buckets, found by a linear count
constexpr int64_t kMaxKeyedNodes = 3037000499;  // every key column * N + source fits in int64

void check_vector(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 1 && t.is_contiguous(), name,
              " must be a contiguous 1-D CPU tensor");
}

void check_ids(const at::Tensor& t, const char* name) {
  check_vector(t, name);
  TORCH_CHECK(t.scalar_type() == at::kInt || t.scalar_type() == at::kLong, name,
              " must be int32 or int64, got ", t.scalar_type());
}

// Reads id i of an int32 or int64 vector without a dispatch per element.
struct IdReader {
  const int32_t* i32 = nullptr;
  const int64_t* i64 = nullptr;
  explicit IdReader(const at::Tensor& t) {
    if (t.scalar_type() == at::kInt) {
      i32 = t.data_ptr<int32_t>();
    } else {
      i64 = t.data_ptr<int64_t>();
    }
  }
  int64_t operator[](int64_t i) const { return i32 ? int64_t{i32[i]} : i64[i]; }
};

}  // namespace

void count_entries_(at::Tensor& counts, const at::Tensor& ids) {
  check_vector(counts, "counts");
  TORCH_CHECK(counts.scalar_type() == at::kLong, "counts must be int64");
  check_ids(ids, "ids");
  int64_t* c = counts.data_ptr<int64_t>();
  const auto limit = static_cast<uint64_t>(counts.numel());
  const int64_t m = ids.numel();
  AT_DISPATCH_INDEX_TYPES(ids.scalar_type(), "count_entries_", [&] {
    const index_t* id = ids.data_ptr<index_t>();
    for (int64_t i = 0; i < m; ++i) {
      const auto v = static_cast<uint64_t>(static_cast<int64_t>(id[i]));
      TORCH_CHECK_INDEX(v < limit, "id ", id[i], " at position ", i, " is out of range [0, ",
                        counts.numel(), ")");
      ++c[v];
    }
  });
}

void scatter_csc_keys_(at::Tensor& out, at::Tensor& cursor, const at::Tensor& limit,
                       const at::Tensor& owner, const at::Tensor& other,
                       const at::Tensor& relabel, const at::Tensor& bucket_starts,
                       int64_t num_nodes, bool both_ways) {
  check_vector(out, "out");
  TORCH_CHECK(out.scalar_type() == at::kLong, "out must be int64");
  check_vector(cursor, "cursor");
  check_vector(limit, "limit");
  TORCH_CHECK(cursor.scalar_type() == at::kLong && limit.scalar_type() == at::kLong &&
                  cursor.numel() == limit.numel() && cursor.numel() >= 1,
              "cursor and limit must be int64 vectors of one entry per bucket");
  check_ids(owner, "owner");
  check_ids(other, "other");
  TORCH_CHECK(owner.numel() == other.numel(), "owner has ", owner.numel(), " ids but other has ",
              other.numel());
  TORCH_CHECK(num_nodes >= 1 && num_nodes <= kMaxKeyedNodes, "num_nodes must be in [1, ",
              kMaxKeyedNodes, "] for its keys to fit in int64, got ", num_nodes);
  const bool mapped = relabel.numel() > 0;
  if (mapped) {
    check_ids(relabel, "relabel");
    TORCH_CHECK(relabel.numel() == num_nodes, "relabel has ", relabel.numel(),
                " entries, expected num_nodes = ", num_nodes);
  }
  const int64_t num_buckets = cursor.numel();
  check_vector(bucket_starts, "bucket_starts");
  TORCH_CHECK(bucket_starts.scalar_type() == at::kLong && bucket_starts.numel() == num_buckets,
              "bucket_starts must be int64 with one entry per bucket");
  const int64_t* starts = bucket_starts.data_ptr<int64_t>();
  TORCH_CHECK(starts[0] == 0, "the first bucket must start at column 0, not ", starts[0]);
  for (int64_t b = 1; b < num_buckets; ++b) {
    TORCH_CHECK(starts[b - 1] < starts[b], "bucket_starts must increase, got ", starts[b - 1],
                " then ", starts[b]);
  }
  const int64_t* lim = limit.data_ptr<int64_t>();
  int64_t* cur = cursor.data_ptr<int64_t>();
  for (int64_t b = 0; b < num_buckets; ++b) {
    TORCH_CHECK(0 <= cur[b] && cur[b] <= lim[b] && lim[b] <= out.numel(), "bucket ", b,
                ": cursor ", cur[b], " and limit ", lim[b], " do not lie in out (",
                out.numel(), " entries)");
  }
  int64_t* keys = out.data_ptr<int64_t>();
  const IdReader own(owner), oth(other), map(mapped ? relabel : owner);
  const auto n = static_cast<uint64_t>(num_nodes);
  const int64_t m = owner.numel();

  auto node = [&](const IdReader& ids, int64_t i) -> int64_t {
    const int64_t raw = ids[i];
    TORCH_CHECK_INDEX(static_cast<uint64_t>(raw) < n, "id ", raw, " at position ", i,
                      " is out of range [0, ", num_nodes, ")");
    if (!mapped) return raw;
    const int64_t v = map[raw];
    TORCH_CHECK_INDEX(static_cast<uint64_t>(v) < n, "relabel[", raw, "] = ", v,
                      " is out of range [0, ", num_nodes, ")");
    return v;
  };
  // A column's bucket from the bucket starts (a count of those at or below it; a branch-free
  // binary search over them padded to a power of two past kLinearBuckets), not from a table
  // of N entries: the columns come in random order, and such a table would be one more cache
  // miss per key.
  int64_t padded_size = 1;
  while (padded_size < num_buckets) padded_size *= 2;
  std::vector<int64_t> padded(padded_size, std::numeric_limits<int64_t>::max());
  std::copy(starts, starts + num_buckets, padded.begin());
  const int64_t* sorted_starts = padded.data();
  auto bucket_of = [&](int64_t column) -> int64_t {
    int64_t b = 0;
    if (num_buckets <= kLinearBuckets) {
      for (int64_t k = 1; k < num_buckets; ++k) b += column >= starts[k];
      return b;
    }
    for (int64_t half = padded_size / 2; half > 0; half /= 2) {
      b += sorted_starts[b + half] <= column ? half : 0;
    }
    return b;
  };
  auto put = [&](int64_t key, int64_t column) {
    const int64_t b = bucket_of(column);
    TORCH_CHECK(cur[b] < lim[b], "bucket ", b, " is full (", lim[b],
                " entries): more entries than counted");
    keys[cur[b]++] = key;
  };
  const void* table = mapped ? relabel.data_ptr() : nullptr;
  const int64_t entry = relabel.element_size();
  for (int64_t i = 0; i < m; ++i) {
    if (mapped && i + kLookahead < m) {
      const auto* base = static_cast<const char*>(table);
      const auto a = static_cast<uint64_t>(own[i + kLookahead]);
      const auto c = static_cast<uint64_t>(oth[i + kLookahead]);
      if (a < n) __builtin_prefetch(base + a * entry);
      if (c < n) __builtin_prefetch(base + c * entry);
    }
    const int64_t dst = node(own, i), src = node(oth, i);
    put(dst * num_nodes + src, dst);
    if (both_ways) put(src * num_nodes + dst, src);
  }
}

int64_t compact_csc_keys_(at::Tensor& keys, int64_t start, int64_t stop, int64_t dest,
                          int64_t num_nodes, int64_t first_column, at::Tensor& degree) {
  check_vector(keys, "keys");
  TORCH_CHECK(keys.scalar_type() == at::kLong, "keys must be int64");
  check_vector(degree, "degree");
  TORCH_CHECK(degree.scalar_type() == at::kLong, "degree must be int64");
  TORCH_CHECK(num_nodes >= 1 && num_nodes <= kMaxKeyedNodes && first_column >= 0,
              "need 1 <= num_nodes <= ", kMaxKeyedNodes, " and first_column >= 0");
  TORCH_CHECK(0 <= dest && dest <= start && start <= stop && stop <= keys.numel(),
              "need 0 <= dest <= start <= stop <= ", keys.numel(), ", got dest ", dest, ", start ",
              start, ", stop ", stop);
  int64_t* k = keys.data_ptr<int64_t>();
  int64_t* deg = degree.data_ptr<int64_t>();
  const int64_t width = degree.numel();
  // Writes trail reads (dest <= start, one write per distinct key read), so the compaction
  // is in place. Sorted keys visit the columns in order: divide only when a key leaves the
  // current column. The first key is checked to be >= 0 and every later one to be larger than
  // the one before, so none is negative.
  TORCH_CHECK(start == stop || k[start] >= 0, "keys must be non-negative: key ", k[start],
              " at position ", start);
  int64_t out = dest, prev = -1, column = -1, column_start = 0, column_end = 0;
  for (int64_t i = start; i < stop; ++i) {
    const int64_t key = k[i];
    if (key == prev) continue;
    TORCH_CHECK(key > prev, "keys must be sorted: key ", key, " at position ", i, " follows ", prev);
    prev = key;
    if (key >= column_end) {
      column = key / num_nodes;
      TORCH_CHECK(column >= first_column && column - first_column < width, "key ", key,
                  " at position ", i, " is in column ", column, ", outside [", first_column, ", ",
                  first_column + width, ")");
      column_start = column * num_nodes;
      column_end = column_start + num_nodes;
    }
    ++deg[column - first_column];
    k[out++] = key - column_start;
  }
  return out - dest;
}

}  // namespace graphtier
