/* The two kernels benchmarks/bench_clib.py times: x * y (per-call overhead on tiny inputs) and
   csr @ dense (a kernel long enough that only the ABI's share of the time is left to see). */
#include "sparse_ops.h"

SPARSE_OPS_LIBRARY("benchops 1.0");

static int32_t mul(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in, int32_t n_out,
                   so_array* out, so_error* err) {
  if (in[0].dtype != SO_DTYPE_FLOAT32 || in[1].dtype != SO_DTYPE_FLOAT32)
    return so_error_set(err, SO_ERR_UNSUPPORTED, "float32 only");
  const float* x = (const float*)in[0].data;
  const float* y = (const float*)in[1].data;
  float* o = (float*)out[0].data;
  for (int64_t i = 0; i < out[0].nnz; ++i) o[i] = x[i] * y[i];
  return SO_OK;
}

/* out (n, k) = A (n, m, csr) @ X (m, k), float32 values, int32 or int64 indices */
SO_EXPORT int32_t bench_spmm(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                             int32_t n_out, so_array* out, so_error* err) {
  const so_array* a = &in[0];
  if (a->dtype != SO_DTYPE_FLOAT32 || in[1].dtype != SO_DTYPE_FLOAT32)
    return so_error_set(err, SO_ERR_UNSUPPORTED, "float32 only");
  const float* v = (const float*)a->data;
  const float* x = (const float*)in[1].data;
  float* o = (float*)out[0].data;
  int64_t n = a->shape[0], k = in[1].shape[1];
  for (int64_t r = 0; r < n; ++r) {
    float* row = o + r * k;
    for (int64_t c = 0; c < k; ++c) row[c] = 0.0f;
    int64_t start, stop;
    if (a->index_dtype == SO_DTYPE_INT32) {
      start = ((const int32_t*)a->indptr)[r];
      stop = ((const int32_t*)a->indptr)[r + 1];
    } else {
      start = ((const int64_t*)a->indptr)[r];
      stop = ((const int64_t*)a->indptr)[r + 1];
    }
    for (int64_t j = start; j < stop; ++j) {
      int64_t col = a->index_dtype == SO_DTYPE_INT32 ? ((const int32_t*)a->indices)[j]
                                                     : ((const int64_t*)a->indices)[j];
      const float* xr = x + col * k;
      float w = v[j];
      for (int64_t c = 0; c < k; ++c) row[c] += w * xr[c];
    }
  }
  return SO_OK;
}

static int32_t spmm_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                          so_error* err) {
  if (in[0].ndim != 2 || in[1].ndim != 2 || in[0].dims[1] != in[1].dims[0])
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "A (n, m) @ X (m, k): shapes do not match");
  out[0].ndim = 2;
  out[0].dims[0] = in[0].dims[0];
  out[0].dims[1] = in[1].dims[1];
  return SO_OK;
}

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  static const char* xy[] = {"x", "y"};
  static const char* ax[] = {"A", "X"};
  static const char* out[] = {"out"};
  so_kernel mul_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, mul}};
  so_op_decl op_mul = {SO_HEADER(so_op_decl), "bench_c_mul", "x * y, float32", 2, 1, xy, out, 0, 0, NULL, NULL,
                       NULL, NULL, NULL, 1, 0, mul_kernels, NULL, 0, SO_OP_CONSTANT, 0, 0, NULL};
  int32_t st = reg->register_op(reg->host, &op_mul, err);
  if (st) return st;
  int32_t csr_dense[] = {SO_STYPE_CSR, SO_STYPE_DEFAULT};
  so_kernel spmm_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, csr_dense, 2, 0, bench_spmm}};
  so_op_decl op_spmm = {SO_HEADER(so_op_decl), "bench_c_spmm", "A @ X, csr A", 2, 1, ax, out, 0, 0, NULL, NULL,
                        spmm_shape, NULL, NULL, 1, 0, spmm_kernels, NULL, 0, SO_OP_CONSTANT, 0, 0, NULL};
  return reg->register_op(reg->host, &op_spmm, err);
}
