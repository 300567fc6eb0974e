/* sc_times(x) = FACTOR * x, its gradient sc_times of the head gradient; sc_axpy(x, y) =
   FACTOR * x + y, with a gradient term for x only. Built with two -DFACTOR values to test
   that a graph recorded before a reload is differentiated by the version it ran, and that
   an input without a term is refused rather than read as zero. -DWITH_GPU also declares
   sc_times's kernel for the gpu (only for checking how the simulated gpu treats compiled
   kernels: on a real GPU this host function would read device memory). */
#include "sparse_ops.h"

#ifndef FACTOR
#define FACTOR 2
#endif
#define TEXT(x) #x
#define VERSION(x) "scaled " TEXT(x)
SPARSE_OPS_LIBRARY(VERSION(FACTOR));

static int32_t times(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                     int32_t n_out, so_array* out, so_error* err) {
  if (in[0].dtype != SO_DTYPE_FLOAT64) return so_error_set(err, SO_ERR_UNSUPPORTED, "float64 only");
  for (int64_t i = 0; i < out[0].nnz; ++i) ((double*)out[0].data)[i] = FACTOR * ((const double*)in[0].data)[i];
  return SO_OK;
}

static int32_t axpy(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                    int32_t n_out, so_array* out, so_error* err) {
  if (in[0].dtype != SO_DTYPE_FLOAT64) return so_error_set(err, SO_ERR_UNSUPPORTED, "float64 only");
  for (int64_t i = 0; i < out[0].nnz; ++i)
    ((double*)out[0].data)[i] = FACTOR * ((const double*)in[0].data)[i] + ((const double*)in[1].data)[i];
  return SO_OK;
}

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  static const char* x[] = {"x"};
  static const char* xy[] = {"x", "y"};
  static const char* out[] = {"out"};
  static const int32_t head[] = {SO_OUT_GRAD(0)};
  so_kernel times_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, times},
                               {SO_HEADER(so_kernel), SO_DEVICE_GPU, NULL, 0, 0, times}};
#ifdef WITH_GPU
  const int32_t n_times_kernels = 2;
#else
  const int32_t n_times_kernels = 1;
#endif
  so_kernel axpy_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, axpy}};
  so_gradient by_factor[] = {{SO_HEADER(so_gradient), 0, 0, "sc_times", 1, 0, head, NULL, NULL}};
  so_op_decl times_op = {SO_HEADER(so_op_decl), "sc_times", "FACTOR * x", 1, 1, x, out, 0, 0, NULL, NULL,
                         NULL, NULL, NULL, n_times_kernels, 1, times_kernels, by_factor, 0, 0, 0,
                         SO_PARTITION_ROWS, NULL};
  so_op_decl axpy_op = {SO_HEADER(so_op_decl), "sc_axpy", "FACTOR * x + y", 2, 1, xy, out, 0, 0, NULL, NULL,
                        NULL, NULL, NULL, 1, 1, axpy_kernels, by_factor, 0, 0, 0, SO_PARTITION_ROWS, NULL};
  int32_t status = reg->register_op(reg->host, &times_op, err);
  return status != SO_OK ? status : reg->register_op(reg->host, &axpy_op, err);
}
