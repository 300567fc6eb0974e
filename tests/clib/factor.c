/* out = FACTOR * x, built with different -DFACTOR values to test library.reload:
   factor_times has no gradient (SO_OP_CONSTANT); factor_scaled is the same product with its
   gradient, factor_scaled of the head gradient (a graph recorded before a reload must be
   differentiated by the version it ran); factor_axpy(x, y) = FACTOR * x + y has a gradient
   term for x only (asking for y's is refused, not read as zero). -DWITH_GPU also declares
   factor_scaled's kernel for the gpu, only to check how the simulated gpu treats compiled
   kernels (on a real GPU this host function would read device memory). */
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

static int32_t axpy(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                    int32_t n_out, so_array* out, so_error* err) {
  int32_t status = times(ctx, p, n_in, in, n_out, out, err);
  for (int64_t i = 0; status == SO_OK && i < out[0].nnz; ++i)
    ((double*)out[0].data)[i] += ((const double*)in[1].data)[i];
  return status;
}

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  static const char* x[] = {"x"};
  static const char* xy[] = {"x", "y"};
  static const char* out[] = {"out"};
  static const int32_t head[] = {SO_OUT_GRAD(0)};
  so_kernel kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, times},
                         {SO_HEADER(so_kernel), SO_DEVICE_GPU, NULL, 0, 0, times}};
#ifdef WITH_GPU
  const int32_t n_scaled_kernels = 2;
#else
  const int32_t n_scaled_kernels = 1;
#endif
  so_kernel axpy_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, axpy}};
  so_gradient by_factor[] = {{SO_HEADER(so_gradient), 0, 0, "factor_scaled", 1, 0, head, NULL, NULL}};
  so_op_decl ops[] = {
      {SO_HEADER(so_op_decl), "factor_times", "FACTOR * x", 1, 1, x, out, 0, 0, NULL, NULL, NULL, NULL, NULL, 1, 0,
       kernels, NULL, 0, SO_OP_CONSTANT, 0, SO_PARTITION_ROWS, NULL},
      {SO_HEADER(so_op_decl), "factor_scaled", "FACTOR * x", 1, 1, x, out, 0, 0, NULL, NULL, NULL, NULL, NULL,
       n_scaled_kernels, 1, kernels, by_factor, 0, 0, 0, SO_PARTITION_ROWS, NULL},
      {SO_HEADER(so_op_decl), "factor_axpy", "FACTOR * x + y", 2, 1, xy, out, 0, 0, NULL, NULL, NULL, NULL, NULL, 1,
       1, axpy_kernels, by_factor, 0, 0, 0, SO_PARTITION_ROWS, NULL}};
  for (int i = 0; i < 3; ++i) {
    int32_t status = reg->register_op(reg->host, &ops[i], err);
    if (status != SO_OK) return status;
  }
  return SO_OK;
}
