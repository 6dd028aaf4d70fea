// Registers the GPU ops as torch.ops.graphtier_cuda.* and makes the shared object importable
// as graphtier.service._native_cuda. Built only when torch has CUDA (see setup.py).
//
// The ops validate nothing the caller can get wrong: service/gpu/gather.py and sampler.py check every
// shape, dtype, device and bound first and passes raw pointers; here a CUDA error is returned
// as its code, never formatted into a message (formatting c10 messages inside an extension
// crashed under torch 2.11 on the CUDA image, see service/native_ops.py).
#include <Python.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>

#include "graphtier/cuda_gather.h"
#include "graphtier/cuda_sampler.h"

namespace graphtier {
namespace cuda {
namespace {

// pointers: int64 [3 + num_devices] = replicated, host, staged, interleaved shares... (CPU)
// bounds:   int64 [6] = replicated_end, interleaved_end, host_end, num_rows, storage_first,
//           device_index (CPU)
// counters: int64 [kGatherCounters] on out's device, added to by the kernel
// Returns the cudaError_t of the launch (0 = enqueued on the current stream of out's device).
int64_t tiered_gather(const at::Tensor& sorted_ids, const at::Tensor& positions,
                      const at::Tensor& pointers, const at::Tensor& bounds, int64_t row_bytes,
                      int64_t device_blocks, int64_t host_blocks, int64_t threads,
                      const at::Tensor& out, const at::Tensor& counters) {
  const int64_t* p = pointers.data_ptr<int64_t>();
  const int64_t* b = bounds.data_ptr<int64_t>();
  const int64_t devices = pointers.numel() - 3;
  if (devices < 1 || devices > kMaxDevices || bounds.numel() != 6 ||
      counters.numel() != kGatherCounters) {
    return cudaErrorInvalidValue;
  }
  GatherTable t{};
  t.replicated = reinterpret_cast<const char*>(p[0]);
  t.host = reinterpret_cast<const char*>(p[1]);
  t.staged = reinterpret_cast<const char*>(p[2]);
  for (int64_t d = 0; d < devices; ++d) t.interleaved[d] = reinterpret_cast<const char*>(p[3 + d]);
  t.replicated_end = b[0];
  t.interleaved_end = b[1];
  t.host_end = b[2];
  t.num_rows = b[3];
  t.storage_first = b[4];
  t.device_index = static_cast<int32_t>(b[5]);
  t.num_devices = static_cast<int32_t>(devices);
  t.row_bytes = static_cast<int32_t>(row_bytes);
  const c10::cuda::CUDAGuard guard(out.device());
  (void)cudaGetLastError();  // a stale, non-sticky error of earlier work is not this launch's
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(out.device().index()).stream();
  return launch_tiered_gather(t, sorted_ids.data_ptr<int64_t>(), positions.data_ptr<int64_t>(),
                              sorted_ids.numel(), static_cast<char*>(out.data_ptr()),
                              counters.data_ptr<int64_t>(), static_cast<int>(device_blocks),
                              static_cast<int>(host_blocks), static_cast<int>(threads), stream);
}

// pointers: int64 [4] = device_colptr, device_row, host_colptr, host_row; bounds: int64 [2] =
// device_end, num_nodes (see graphtier/cuda_sampler.h).
bool read_table(const at::Tensor& pointers, const at::Tensor& bounds, StructureTable* t) {
  if (pointers.numel() != 4 || bounds.numel() != 2) return false;
  const int64_t* p = pointers.data_ptr<int64_t>();
  const int64_t* b = bounds.data_ptr<int64_t>();
  t->device_colptr = reinterpret_cast<const int64_t*>(p[0]);
  t->device_row = reinterpret_cast<const int64_t*>(p[1]);
  t->host_colptr = reinterpret_cast<const int64_t*>(p[2]);
  t->host_row = reinterpret_cast<const int64_t*>(p[3]);
  t->device_end = b[0];
  t->num_nodes = b[1];
  return true;
}

cudaStream_t stream_of(const at::Tensor& t) {
  (void)cudaGetLastError();  // a stale, non-sticky error of earlier work is not this launch's
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

int64_t sample_degrees(const at::Tensor& frontier, const at::Tensor& pointers,
                       const at::Tensor& bounds, int64_t fanout, const at::Tensor& starts,
                       const at::Tensor& degrees, const at::Tensor& counts, int64_t max_blocks,
                       int64_t threads) {
  StructureTable t{};
  if (!read_table(pointers, bounds, &t)) return cudaErrorInvalidValue;
  const c10::cuda::CUDAGuard guard(frontier.device());
  return launch_sample_degrees(t, frontier.data_ptr<int64_t>(), frontier.numel(), fanout,
                               starts.data_ptr<int64_t>(), degrees.data_ptr<int64_t>(),
                               counts.data_ptr<int64_t>(), static_cast<int>(max_blocks),
                               static_cast<int>(threads), stream_of(frontier));
}

int64_t sample_pick(const at::Tensor& frontier, const at::Tensor& pointers,
                    const at::Tensor& bounds, int64_t fanout, int64_t seed, int64_t first_local,
                    const at::Tensor& starts, const at::Tensor& degrees, const at::Tensor& ends,
                    const at::Tensor& out, int64_t max_blocks, int64_t threads) {
  StructureTable t{};
  if (!read_table(pointers, bounds, &t)) return cudaErrorInvalidValue;
  const c10::cuda::CUDAGuard guard(frontier.device());
  return launch_sample_pick(t, frontier.data_ptr<int64_t>(), frontier.numel(), fanout,
                            static_cast<uint64_t>(seed), first_local, starts.data_ptr<int64_t>(),
                            degrees.data_ptr<int64_t>(), ends.data_ptr<int64_t>(),
                            out.data_ptr<int64_t>(), static_cast<int>(max_blocks),
                            static_cast<int>(threads), stream_of(frontier));
}

int64_t relabel_mark(const at::Tensor& nbrs, const at::Tensor& node_map, int64_t max_blocks,
                     int64_t threads) {
  const c10::cuda::CUDAGuard guard(nbrs.device());
  return launch_relabel_mark(nbrs.data_ptr<int64_t>(), nbrs.numel(), node_map.data_ptr<int64_t>(),
                             static_cast<int>(max_blocks), static_cast<int>(threads),
                             stream_of(nbrs));
}

int64_t relabel_flag(const at::Tensor& nbrs, const at::Tensor& node_map, const at::Tensor& flags,
                     int64_t max_blocks, int64_t threads) {
  const c10::cuda::CUDAGuard guard(nbrs.device());
  return launch_relabel_flag(nbrs.data_ptr<int64_t>(), nbrs.numel(), node_map.data_ptr<int64_t>(),
                             flags.data_ptr<int64_t>(), static_cast<int>(max_blocks),
                             static_cast<int>(threads), stream_of(nbrs));
}

int64_t relabel_assign(const at::Tensor& nbrs, const at::Tensor& flags, const at::Tensor& ranks,
                       int64_t next_local, const at::Tensor& node_map, const at::Tensor& new_nodes,
                       int64_t max_blocks, int64_t threads) {
  const c10::cuda::CUDAGuard guard(nbrs.device());
  return launch_relabel_assign(nbrs.data_ptr<int64_t>(), nbrs.numel(), flags.data_ptr<int64_t>(),
                               ranks.data_ptr<int64_t>(), next_local, node_map.data_ptr<int64_t>(),
                               new_nodes.data_ptr<int64_t>(), static_cast<int>(max_blocks),
                               static_cast<int>(threads), stream_of(nbrs));
}

int64_t relabel_apply(const at::Tensor& nbrs, const at::Tensor& node_map, const at::Tensor& local,
                      int64_t max_blocks, int64_t threads) {
  const c10::cuda::CUDAGuard guard(nbrs.device());
  return launch_relabel_apply(nbrs.data_ptr<int64_t>(), nbrs.numel(), node_map.data_ptr<int64_t>(),
                              local.data_ptr<int64_t>(), static_cast<int>(max_blocks),
                              static_cast<int>(threads), stream_of(nbrs));
}

}  // namespace
}  // namespace cuda
}  // namespace graphtier

TORCH_LIBRARY(graphtier_cuda, m) {
  m.def(
      "tiered_gather(Tensor sorted_ids, Tensor positions, Tensor pointers, Tensor bounds, "
      "int row_bytes, int device_blocks, int host_blocks, int threads, Tensor(a!) out, "
      "Tensor(b!) counters) -> int",
      &graphtier::cuda::tiered_gather);
  m.def(
      "sample_degrees(Tensor frontier, Tensor pointers, Tensor bounds, int fanout, "
      "Tensor(a!) starts, Tensor(b!) degrees, Tensor(c!) counts, int max_blocks, int threads) -> int",
      &graphtier::cuda::sample_degrees);
  m.def(
      "sample_pick(Tensor frontier, Tensor pointers, Tensor bounds, int fanout, int seed, "
      "int first_local, Tensor starts, Tensor degrees, Tensor ends, Tensor(a!) out, "
      "int max_blocks, int threads) -> int",
      &graphtier::cuda::sample_pick);
  m.def("relabel_mark(Tensor nbrs, Tensor(a!) node_map, int max_blocks, int threads) -> int",
        &graphtier::cuda::relabel_mark);
  m.def(
      "relabel_flag(Tensor nbrs, Tensor node_map, Tensor(a!) flags, int max_blocks, int threads) "
      "-> int",
      &graphtier::cuda::relabel_flag);
  m.def(
      "relabel_assign(Tensor nbrs, Tensor flags, Tensor ranks, int next_local, Tensor(a!) node_map, "
      "Tensor(b!) new_nodes, int max_blocks, int threads) -> int",
      &graphtier::cuda::relabel_assign);
  m.def(
      "relabel_apply(Tensor nbrs, Tensor node_map, Tensor(a!) local, int max_blocks, int threads) "
      "-> int",
      &graphtier::cuda::relabel_apply);
}

static PyModuleDef native_cuda_module = {
    PyModuleDef_HEAD_INIT, "_native_cuda",
    "graphtier native CUDA ops; importing registers torch.ops.graphtier_cuda.*", -1, nullptr,
};

PyMODINIT_FUNC PyInit__native_cuda(void) { return PyModule_Create(&native_cuda_module); }
