/* out = x @ w for dense float64 x (n, k) and w (k, m), declared for sparse_ops.dask: output row
   block i needs row block i of x and all of w, so rm_matmul cuts x only (partition_args,
   ABI 1.2). rm_matmul_cut_all declares the same product without partition_args (every input
   cut: wrong for w, which Dask refuses, naming the field). -DBAD_INDEX and -DNO_RULE make
   declarations the host refuses. */
#include "sparse_ops.h"

SPARSE_OPS_LIBRARY("rowmatmul 1.0");

static int32_t matmul_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                            so_error* err) {
  if (in[0].ndim != 2 || in[1].ndim != 2 || in[0].dims[1] != in[1].dims[0])
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "x (n, k) and w (k, m) do not match");
  out[0].ndim = 2;
  out[0].dims[0] = in[0].dims[0];
  out[0].dims[1] = in[1].dims[1];
  return SO_OK;
}

static int32_t matmul(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in, int32_t n_out,
                      so_array* out, so_error* err) {
  if (in[0].dtype != SO_DTYPE_FLOAT64 || in[1].dtype != SO_DTYPE_FLOAT64)
    return so_error_set(err, SO_ERR_UNSUPPORTED, "float64 only");
  const double* x = (const double*)in[0].data;
  const double* w = (const double*)in[1].data;
  double* y = (double*)out[0].data;
  int64_t n = in[0].shape[0], k = in[0].shape[1], m = in[1].shape[1];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0.0;
      for (int64_t l = 0; l < k; ++l) s += x[i * k + l] * w[l * m + j];
      y[i * m + j] = s;
    }
  return SO_OK;
}

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  static const char* args[] = {"x", "w"};
  static const char* outs[] = {"out"};
#ifdef BAD_INDEX
  static const int32_t cut[] = {2};
#else
  static const int32_t cut[] = {0};
#endif
  so_kernel kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, matmul}};
  so_op_decl op;
  int32_t status;
  (void)host_abi_version;
  SO_INIT(op);
  op.name = "rm_matmul";
  op.doc = "x @ w, cut by the rows of x";
  op.n_arguments = 2; op.arguments = args;
  op.n_outputs = 1; op.outputs = outs;
  op.infer_shape = matmul_shape;
  op.n_kernels = 1; op.kernels = kernels;
  op.flags = SO_OP_CONSTANT;
#ifdef NO_RULE
  op.partition = SO_PARTITION_NONE;
#else
  op.partition = SO_PARTITION_ROWS;
#endif
  op.n_partition_args = 1; op.partition_args = cut;
  if ((status = reg->register_op(reg->host, &op, err)) != SO_OK) return status;
  op.name = "rm_matmul_cut_all";
  op.partition = SO_PARTITION_ROWS;
  op.n_partition_args = 0; op.partition_args = NULL;
  return reg->register_op(reg->host, &op, err);
}
