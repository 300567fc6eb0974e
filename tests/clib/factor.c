/* out = FACTOR * x: built twice with different -DFACTOR to test library.reload. */
#include "sparse_ops.h"

#ifndef FACTOR
#define FACTOR 2
#endif
#define TEXT(x) #x
#define VERSION(x) "factor " TEXT(x)
SPARSE_OPS_LIBRARY(VERSION(FACTOR));

static int32_t times(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                     int32_t n_out, so_array* out, so_error* err) {
  if (in[0].dtype != SO_DTYPE_FLOAT64) return so_error_set(err, SO_ERR_UNSUPPORTED, "float64 only");
  for (int64_t i = 0; i < out[0].nnz; ++i) ((double*)out[0].data)[i] = FACTOR * ((const double*)in[0].data)[i];
  return SO_OK;
}

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  static const char* x[] = {"x"};
  static const char* out[] = {"out"};
  so_kernel kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, times}};
  so_op_decl op = {SO_HEADER(so_op_decl), "factor_times", "FACTOR * x", 1, 1, x, out, 0, 0, NULL, NULL,
                   NULL, NULL, NULL, 1, 0, kernels, NULL, 0, SO_OP_CONSTANT, 0, SO_PARTITION_ROWS, NULL};
  return reg->register_op(reg->host, &op, err);
}
