// Registers the GPU ops as torch.ops.graphtier_cuda.* and makes the shared object importable
// as graphtier.service._native_cuda. Built only when torch has CUDA (see setup.py).
//
// The ops validate nothing the caller can get wrong: service/gpu/gather.py checks every
// shape, dtype, device and bound first and passes raw pointers; here a CUDA error is returned
// as its code, never formatted into a message (formatting c10 messages inside an extension
// crashed under torch 2.11 on the CUDA image, see service/native_ops.py).
#include <Python.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>

#include "graphtier/cuda_gather.h"

namespace graphtier {
namespace cuda {
namespace {

// pointers: int64 [3 + num_devices] = replicated, host, staged, interleaved shares...
// bounds:   int64 [5] = replicated_end, interleaved_end, host_end, num_rows, storage_first
// Returns the cudaError_t of the launch (0 = enqueued on the current stream of out's device).
int64_t tiered_gather(const at::Tensor& sorted_ids, const at::Tensor& positions,
                      const at::Tensor& pointers, const at::Tensor& bounds, int64_t row_bytes,
                      int64_t max_blocks, int64_t threads, const at::Tensor& out) {
  const int64_t* p = pointers.data_ptr<int64_t>();
  const int64_t* b = bounds.data_ptr<int64_t>();
  const int64_t devices = pointers.numel() - 3;
  if (devices < 1 || devices > kMaxDevices || bounds.numel() != 5) return cudaErrorInvalidValue;
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
  t.num_devices = static_cast<int32_t>(devices);
  t.row_bytes = static_cast<int32_t>(row_bytes);
  const c10::cuda::CUDAGuard guard(out.device());
  (void)cudaGetLastError();  // a stale, non-sticky error of earlier work is not this launch's
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(out.device().index()).stream();
  return launch_tiered_gather(t, sorted_ids.data_ptr<int64_t>(), positions.data_ptr<int64_t>(),
                              sorted_ids.numel(), static_cast<char*>(out.data_ptr()),
                              static_cast<int>(max_blocks), static_cast<int>(threads), stream);
}

}  // namespace
}  // namespace cuda
}  // namespace graphtier

TORCH_LIBRARY(graphtier_cuda, m) {
  m.def(
      "tiered_gather(Tensor sorted_ids, Tensor positions, Tensor pointers, Tensor bounds, "
      "int row_bytes, int max_blocks, int threads, Tensor(a!) out) -> int",
      &graphtier::cuda::tiered_gather);
}

static PyModuleDef native_cuda_module = {
    PyModuleDef_HEAD_INIT, "_native_cuda",
    "graphtier native CUDA ops; importing registers torch.ops.graphtier_cuda.*", -1, nullptr,
};

PyMODINIT_FUNC PyInit__native_cuda(void) { return PyModule_Create(&native_cuda_module); }
