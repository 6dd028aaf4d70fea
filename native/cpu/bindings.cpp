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
      "sample_typed_neighbors(Tensor colptr, Tensor row, Tensor edge_type, Tensor type_offsets, "
      "Tensor relation_dst_type, Tensor seeds, int[] fanouts, int seed, Tensor node_map) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "tiered_gather(Tensor ids, Tensor resident, Tensor storage, int[] boundaries, "
      "int num_devices, int device_index, Tensor out) -> Tensor");
  m.def("count_entries_(Tensor(a!) counts, Tensor ids) -> ()");
  m.def(
      "scatter_csc_keys_(Tensor(a!) out, Tensor(b!) cursor, Tensor limit, Tensor owner, "
      "Tensor other, Tensor relabel, Tensor bucket_starts, int num_nodes, bool both_ways) -> ()");
  m.def(
      "compact_csc_keys_(Tensor(a!) keys, int start, int stop, int dest, int num_nodes, "
      "int first_column, Tensor(b!) degree) -> int");
  m.def("pull_sum_(Tensor(a!) out, Tensor share, Tensor offsets, Tensor row) -> ()");
  m.def(
      "row_adam_(Tensor(a!) weight, Tensor(b!) exp_avg, Tensor(c!) exp_avg_sq, Tensor(d!) steps, "
      "Tensor rows, Tensor grad, float lr, float beta1, float beta2, float eps, float weight_decay, "
      "bool check_finite) -> int");
  m.def(
      "rgat_conv(Tensor x, Tensor weight, Tensor att_src, Tensor att_dst, Tensor bias, Tensor indptr, "
      "Tensor indices, Tensor edge_types, Tensor node_types, Tensor relation_types, int num_types, bool concat, "
      "float negative_slope) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "rgat_conv_backward(Tensor grad_out, Tensor x, Tensor weight, Tensor att_src, Tensor att_dst, "
      "Tensor indptr, Tensor indices, Tensor edge_types, Tensor node_types, Tensor relation_types, int num_types, "
      "bool concat, float negative_slope, Tensor alpha, Tensor score, Tensor score_dst, Tensor folded_src, "
      "Tensor folded_dst, Tensor sums) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("dropout_bits(Tensor x, int seed, int threshold, float scale) -> (Tensor, Tensor)");
  m.def("group_by_type(Tensor node_ids, Tensor node_types, Tensor offsets) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("sparse_rows(Tensor x, float max_share) -> (Tensor, Tensor, Tensor)");
  m.def("sparse_rows_linear(Tensor offsets, Tensor columns, Tensor values, Tensor weight, Tensor bias) -> Tensor");
  m.def(
      "sparse_rows_weight_grad(Tensor offsets, Tensor columns, Tensor values, Tensor grad_out, int in_dim) "
      "-> Tensor");
}

TORCH_LIBRARY_IMPL(graphtier, CPU, m) {
  m.impl("sample_neighbors", &graphtier::sample_neighbors);
  m.impl("sample_typed_neighbors", &graphtier::sample_typed_neighbors);
  m.impl("tiered_gather", &graphtier::tiered_gather);
  m.impl("count_entries_", &graphtier::count_entries_);
  m.impl("scatter_csc_keys_", &graphtier::scatter_csc_keys_);
  m.impl("compact_csc_keys_", &graphtier::compact_csc_keys_);
  m.impl("pull_sum_", &graphtier::pull_sum_);
  m.impl("row_adam_", &graphtier::row_adam_);
  m.impl("rgat_conv", &graphtier::rgat_conv);
  m.impl("rgat_conv_backward", &graphtier::rgat_conv_backward);
  m.impl("dropout_bits", &graphtier::dropout_bits);
  m.impl("group_by_type", &graphtier::group_by_type);
  m.impl("sparse_rows", &graphtier::sparse_rows);
  m.impl("sparse_rows_linear", &graphtier::sparse_rows_linear);
  m.impl("sparse_rows_weight_grad", &graphtier::sparse_rows_weight_grad);
}

static PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "_native",
    "graphtier native CPU ops; importing registers torch.ops.graphtier.*", -1, nullptr,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
