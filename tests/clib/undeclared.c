/* Kernels that ask the host for what their op does not declare: ws_times takes a workspace
   (no SO_RESOURCE_WORKSPACE) and, with FORGIVE, ignores the NULL it gets and returns SO_OK;
   without it, returns SO_ERR_RESOURCE. The host must refuse both, with its own message. */
#include "sparse_ops.h"

SPARSE_OPS_LIBRARY("undeclared 1");

static int32_t ws_times(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                        int32_t n_out, so_array* out, so_error* err) {
  void* ws = ctx->workspace(ctx->host, 64);
#ifndef FORGIVE
  if (ws == NULL) return so_error_set(err, SO_ERR_RESOURCE, "no workspace");
#endif
  (void)ws;
  for (int64_t i = 0; i < out[0].nnz; ++i) ((double*)out[0].data)[i] = 2 * ((const double*)in[0].data)[i];
  return SO_OK;
}

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  static const char* x[] = {"x"};
  static const char* out[] = {"out"};
  so_kernel kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, ws_times}};
  so_op_decl op = {SO_HEADER(so_op_decl), OP_NAME, "2 * x, through an undeclared workspace", 1, 1, x, out, 0, 0,
                   NULL, NULL, NULL, NULL, NULL, 1, 0, kernels, NULL, 0, SO_OP_CONSTANT, 0, SO_PARTITION_ROWS, NULL};
  return reg->register_op(reg->host, &op, err);
}
