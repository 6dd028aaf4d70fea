// Registers the native ops as torch.ops.graphtier.* and makes the shared object importable
// as graphtier.service._native (importing it is what runs the registration).
#include <Python.h>
#include <torch/library.h>

#include "graphtier/ops.h"

TORCH_LIBRARY(graphtier, m) {
  m.def(
      "sample_neighbors(Tensor colptr, Tensor row, Tensor seeds, int[] fanouts, int seed, "
      "Tensor node_map) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "tiered_gather(Tensor ids, Tensor resident, Tensor storage, int[] boundaries, "
      "int num_devices, int device_index, Tensor out) -> Tensor");
}

TORCH_LIBRARY_IMPL(graphtier, CPU, m) {
  m.impl("sample_neighbors", &graphtier::sample_neighbors);
  m.impl("tiered_gather", &graphtier::tiered_gather);
}

static PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native",
    "graphtier native CPU ops; importing registers torch.ops.graphtier.*", -1, nullptr,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
