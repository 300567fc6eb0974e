/* Operators that exercise every part of sparse_ops.h, for tests/test_clib.py. Each is small;
   together they cover parameters, inference callbacks, dense and storage-aware kernels,
   gradients, aux states, the workspace, the output allocator, the seed, and every way a
   library can report (or commit) an error. */
#include "sparse_ops.h"

SPARSE_OPS_LIBRARY("testops 1.2");

/* ---- helpers ---------------------------------------------------------------------------- */
static double get(const so_array* a, int64_t i) {
  switch (a->dtype) {
    case SO_DTYPE_FLOAT32: return ((const float*)a->data)[i];
    case SO_DTYPE_FLOAT64: return ((const double*)a->data)[i];
    case SO_DTYPE_INT32: return ((const int32_t*)a->data)[i];
    case SO_DTYPE_INT64: return (double)((const int64_t*)a->data)[i];
    default: return 0.0; /* float16 is refused by check_dtype */
  }
}
static void put(so_array* a, int64_t i, double v) {
  switch (a->dtype) {
    case SO_DTYPE_FLOAT32: ((float*)a->data)[i] = (float)v; break;
    case SO_DTYPE_FLOAT64: ((double*)a->data)[i] = v; break;
    case SO_DTYPE_INT32: ((int32_t*)a->data)[i] = (int32_t)v; break;
    case SO_DTYPE_INT64: ((int64_t*)a->data)[i] = (int64_t)v; break;
    default: break;
  }
}
static int64_t idx(const so_array* a, const void* base, int64_t i) {
  return a->index_dtype == SO_DTYPE_INT32 ? ((const int32_t*)base)[i] : ((const int64_t*)base)[i];
}
static void put_idx(const so_array* a, void* base, int64_t i, int64_t v) {
  if (a->index_dtype == SO_DTYPE_INT32) ((int32_t*)base)[i] = (int32_t)v; else ((int64_t*)base)[i] = v;
}
static int32_t check_dtype(const so_array* a, so_error* err) {
  if (a->dtype == SO_DTYPE_FLOAT16) return so_error_set(err, SO_ERR_UNSUPPORTED, "float16 is not supported");
  return SO_OK;
}

static const char* X[] = {"x"};
static const char* XY[] = {"x", "y"};
static const char* OUT[] = {"out"};

/* ---- t_axpy: alpha * x + y (dense; gradients through t_scale) ---------------------------- */
static int32_t axpy(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                    int32_t n_out, so_array* out, so_error* err) {
  double alpha = so_param_float(p, "alpha", 1.0);
  int32_t st = check_dtype(&in[0], err);
  if (st) return st;
  for (int64_t i = 0; i < out[0].nnz; ++i) put(&out[0], i, alpha * get(&in[0], i) + get(&in[1], i));
  return SO_OK;
}

/* ---- t_scale: alpha * x, dense and csr -> csr (a kernel-built output of known nnz) ------- */
static int32_t scale_dense(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                           int32_t n_out, so_array* out, so_error* err) {
  double alpha = so_param_float(p, "alpha", 1.0);
  int32_t st = check_dtype(&in[0], err);
  if (st) return st;
  for (int64_t i = 0; i < out[0].nnz; ++i) put(&out[0], i, alpha * get(&in[0], i));
  return SO_OK;
}
static int32_t scale_csr(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                         int32_t n_out, so_array* out, so_error* err) {
  double alpha = so_param_float(p, "alpha", 1.0);
  const so_array* a = &in[0];
  int32_t st = ctx->alloc_output(ctx->host, 0, a->nnz, a->index_dtype, &out[0]);
  if (st) return st;
  for (int64_t i = 0; i < a->nnz; ++i) {
    put(&out[0], i, alpha * get(a, i));
    put_idx(a, out[0].indices, i, idx(a, a->indices, i));
  }
  for (int64_t r = 0; r <= a->shape[0]; ++r) put_idx(a, out[0].indptr, r, idx(a, a->indptr, r));
  return SO_OK;
}
static int32_t same_stype(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                          so_error* err) {
  out[0] = in[0] == SO_STYPE_CSR ? SO_STYPE_CSR : SO_STYPE_DEFAULT;
  return SO_OK;
}

/* ---- t_sum: the sum of every element into shape (1,), through the workspace ------------ */
static int32_t sum_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                         so_error* err) {
  out[0].ndim = 1;
  out[0].dims[0] = 1;
  return SO_OK;
}
static int32_t sum_kernel(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                          int32_t n_out, so_array* out, so_error* err) {
  /* partial sums in blocks of 4, kept in the workspace */
  int64_t blocks = (in[0].nnz + 3) / 4;
  double* partial = (double*)ctx->workspace(ctx->host, (uint64_t)(blocks > 0 ? blocks : 1) * sizeof(double));
  if (partial == NULL) return so_error_set(err, SO_ERR_RESOURCE, "no workspace");
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    partial[b] = 0.0;
    for (int64_t i = 4 * b; i < 4 * b + 4 && i < in[0].nnz; ++i) partial[b] += get(&in[0], i);
  }
  for (int64_t b = 0; b < blocks; ++b) total += partial[b];
  put(&out[0], 0, total);
  return SO_OK;
}

/* ---- t_uniform: uniform [0, 1) values of x's shape, from ctx->seed (a constant op) -------- */
static int32_t uniform(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                       int32_t n_out, so_array* out, so_error* err) {
  uint64_t s = ctx->seed | 1u;
  for (int64_t i = 0; i < out[0].nnz; ++i) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17; /* xorshift64 */
    put(&out[0], i, (double)(s >> 11) / 9007199254740992.0);
  }
  return SO_OK;
}
static int32_t float_out(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                         so_error* err) {
  out[0] = in[0] == SO_DTYPE_FLOAT64 ? SO_DTYPE_FLOAT64 : SO_DTYPE_FLOAT32;
  return SO_OK;
}

/* ---- t_threshold: the entries of a csr with |v| > threshold (nnz known only here) ------- */
static int32_t threshold(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                         int32_t n_out, so_array* out, so_error* err) {
  double t = so_param_float(p, "threshold", 0.0);
  const so_array* a = &in[0];
  int64_t kept = 0;
  for (int64_t i = 0; i < a->nnz; ++i) kept += get(a, i) > t || get(a, i) < -t;
  int32_t st = ctx->alloc_output(ctx->host, 0, kept, SO_DTYPE_INT64, &out[0]);
  if (st) return st;
  int64_t k = 0;
  ((int64_t*)out[0].indptr)[0] = 0;
  for (int64_t r = 0; r < a->shape[0]; ++r) {
    for (int64_t j = idx(a, a->indptr, r); j < idx(a, a->indptr, r + 1); ++j) {
      double v = get(a, j);
      if (v > t || v < -t) {
        put(&out[0], k, v);
        ((int64_t*)out[0].indices)[k++] = idx(a, a->indices, j);
      }
    }
    ((int64_t*)out[0].indptr)[r + 1] = k;
  }
  return SO_OK;
}
static int32_t threshold_dense(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                               int32_t n_out, so_array* out, so_error* err) {
  double t = so_param_float(p, "threshold", 0.0);
  for (int64_t i = 0; i < out[0].nnz; ++i) {
    double v = get(&in[0], i);
    put(&out[0], i, v > t || v < -t ? v : 0.0);
  }
  return SO_OK;
}
static int32_t csr_out(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                       so_error* err) {
  out[0] = SO_STYPE_CSR;
  return SO_OK;
}

/* ---- t_count: x + state, and state += 1 (an aux state) ------------------------------------ */
static int32_t count(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                     int32_t n_out, so_array* out, so_error* err) {
  for (int64_t i = 0; i < out[0].nnz; ++i) put(&out[0], i, get(&in[0], i) + get(&in[1], i));
  so_array* state = (so_array*)&in[1]; /* aux states are the inputs a kernel may write */
  for (int64_t i = 0; i < state->nnz; ++i) put(state, i, get(state, i) + 1);
  return SO_OK;
}

/* ---- t_fail: fails with the status given as `code` ----------------------------------------- */
static int32_t fail(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                    int32_t n_out, so_array* out, so_error* err) {
  int64_t code = so_param_int(p, "code", 0);
  if (code) return so_error_set(err, (int32_t)code, "asked to fail with %lld", (long long)code);
  for (int64_t i = 0; i < out[0].nnz; ++i) put(&out[0], i, get(&in[0], i));
  return SO_OK;
}

/* ---- t_badcsr: builds a malformed csr, as a buggy kernel would ---------------------------- */
static int32_t badcsr(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                      int32_t n_out, so_array* out, so_error* err) {
  int64_t mode = so_param_int(p, "mode", 0);
  int64_t rows = out[0].shape[0], cols = out[0].shape[1];
  int32_t st = ctx->alloc_output(ctx->host, 0, rows, SO_DTYPE_INT64, &out[0]); /* one value per row */
  if (st) return st;
  int64_t* ind = (int64_t*)out[0].indices;
  int64_t* ptr = (int64_t*)out[0].indptr;
  for (int64_t r = 0; r <= rows; ++r) ptr[r] = r;
  for (int64_t r = 0; r < rows; ++r) { ind[r] = r % cols; put(&out[0], r, 1.0); }
  if (mode == 1) ptr[rows] = rows + 5;  /* indptr does not end at nnz */
  if (mode == 2) ind[0] = cols + 3;     /* a column out of range */
  if (mode == 3) put(&out[0], 0, 0), ptr[rows] = rows, ind[rows - 1] = -1; /* a negative column */
  return SO_OK;
}
static int32_t badcsr_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                            so_error* err) {
  out[0] = in[0];
  return SO_OK;
}

/* ---- t_badinfer: inference that returns garbage -------------------------------------------- */
static int32_t badinfer_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                              so_error* err) {
  int64_t mode = so_param_int(p, "mode", 0);
  if (mode == 1) { out[0].ndim = 2; out[0].dims[0] = -4; out[0].dims[1] = 2; }
  else if (mode == 2) { /* forgets to set the output */ }
  else if (mode == 3) return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "x must be 2-D, got %d-D", in[0].ndim);
  else out[0] = in[0];
  return SO_OK;
}
static int32_t badinfer_stype(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                              so_error* err) {
  out[0] = so_param_int(p, "mode", 0) == 4 ? 7 : SO_STYPE_DEFAULT;
  return SO_OK;
}
static int32_t badinfer_type(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                             so_error* err) {
  out[0] = so_param_int(p, "mode", 0) == 5 ? 42 : in[0];
  return SO_OK;
}

/* ---- samples ------------------------------------------------------------------------------- */
static const double sample_x[6] = {1.5, -2.0, 0.25, 3.0, -1.0, 0.5};
static const double sample_y[6] = {0.5, 1.0, -1.5, 2.0, 0.75, -0.25};
static const double csr_values[4] = {2.0, -0.5, 3.0, -4.0};
static const int64_t csr_indices[4] = {0, 2, 1, 2};
static const int64_t csr_indptr[4] = {0, 2, 2, 4}; /* row 1 is empty */

static so_array dense23(const double* values) {
  so_array a = {SO_HEADER(so_array), SO_STYPE_DEFAULT, SO_DTYPE_FLOAT64, -1, 2, {2, 3}, 6,
                (void*)values, NULL, NULL, SO_DEVICE_CPU, 0};
  return a;
}
static so_array csr33(void) {
  so_array a = {SO_HEADER(so_array), SO_STYPE_CSR, SO_DTYPE_FLOAT64, SO_DTYPE_INT64, 2, {3, 3}, 4,
                (void*)csr_values, (void*)csr_indices, (void*)csr_indptr, SO_DEVICE_CPU, 0};
  return a;
}

/* ---- declarations -------------------------------------------------------------------------- */
static int32_t declare(const so_registrar* reg, so_error* err, so_op_decl* op) {
  return reg->register_op(reg->host, op, err);
}

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  int32_t st;
  so_param_decl alpha[] = {{SO_HEADER(so_param_decl), "alpha", SO_PARAM_FLOAT, "1.0", "the factor of x"}};
  so_kernel dense_cpu[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, axpy}};
  int32_t og_only[] = {SO_OUT_GRAD(0)};
  const char* one_key[] = {"alpha"};
  const char* one_value[] = {"1.0"};
  so_gradient axpy_grads[] = {
      {SO_HEADER(so_gradient), 0, 1, "t_scale", 1, 0, og_only, NULL, NULL},            /* alpha * g */
      {SO_HEADER(so_gradient), 1, 0, "t_scale", 1, 1, og_only, one_key, one_value}};  /* g */
  so_array axpy_inputs[] = {dense23(sample_x), dense23(sample_y)};
  const char* alpha_key[] = {"alpha"};
  const char* alpha_value[] = {"-0.5"};
  so_sample axpy_samples[] = {{SO_HEADER(so_sample), 2, 0, axpy_inputs, NULL, NULL},
                              {SO_HEADER(so_sample), 2, 1, axpy_inputs, alpha_key, alpha_value}};
  so_op_decl op_axpy = {SO_HEADER(so_op_decl), "t_axpy", "alpha * x + y", 2, 1, XY, OUT, 0, 1, NULL, alpha,
                        NULL, NULL, NULL, 1, 2, dense_cpu, axpy_grads, 0, 0, 2, SO_PARTITION_ROWS,
                        axpy_samples};
  if ((st = declare(reg, err, &op_axpy))) return st;

  int32_t csr_in[] = {SO_STYPE_CSR};
  so_kernel scale_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, scale_dense},
                               {SO_HEADER(so_kernel), SO_DEVICE_CPU, csr_in, 1, 0, scale_csr}};
  so_gradient scale_grads[] = {{SO_HEADER(so_gradient), 0, 1, "t_scale", 1, 0, og_only, NULL, NULL}};
  so_array scale_inputs[] = {dense23(sample_x), csr33()};
  so_sample scale_samples[] = {{SO_HEADER(so_sample), 1, 1, &scale_inputs[0], alpha_key, alpha_value},
                               {SO_HEADER(so_sample), 1, 0, &scale_inputs[1], NULL, NULL}};
  so_op_decl op_scale = {SO_HEADER(so_op_decl), "t_scale", "alpha * x; csr stays csr", 1, 1, X, OUT, 0, 1, NULL,
                         alpha, NULL, NULL, same_stype, 2, 1, scale_kernels, scale_grads, 0, 0, 2, SO_PARTITION_ROWS,
                         scale_samples};
  if ((st = declare(reg, err, &op_scale))) return st;

  so_kernel sum_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, sum_kernel}};
  so_op_decl op_sum = {SO_HEADER(so_op_decl), "t_sum", "the sum of x, shape (1,)", 1, 1, X, OUT, 0, 0, NULL, NULL,
                       sum_shape, NULL, NULL, 1, 0, sum_kernels, NULL, SO_RESOURCE_WORKSPACE, SO_OP_CONSTANT, 0, 0,
                       NULL};
  if ((st = declare(reg, err, &op_sum))) return st;

  so_kernel uniform_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, uniform}};
  so_op_decl op_uniform = {SO_HEADER(so_op_decl), "t_uniform", "uniform values shaped like x", 1, 1, X, OUT, 0, 0,
                           NULL, NULL, NULL, float_out, NULL, 1, 0, uniform_kernels, NULL, SO_RESOURCE_RANDOM,
                           SO_OP_CONSTANT, 0, 0, NULL};
  if ((st = declare(reg, err, &op_uniform))) return st;

  so_param_decl thr[] = {{SO_HEADER(so_param_decl), "threshold", SO_PARAM_FLOAT, NULL, "keep |v| > threshold"}};
  so_kernel thr_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, csr_in, 1, 0, threshold},
                             {SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, threshold_dense}};
  so_array thr_inputs[] = {csr33()};
  const char* thr_key[] = {"threshold"};
  const char* thr_value[] = {"1.0"};
  so_sample thr_samples[] = {{SO_HEADER(so_sample), 1, 1, thr_inputs, thr_key, thr_value}};
  so_op_decl op_thr = {SO_HEADER(so_op_decl), "t_threshold", "entries with |v| > threshold", 1, 1, X, OUT, 0, 1,
                       NULL, thr, NULL, NULL, csr_out, 2, 0, thr_kernels, NULL, 0, SO_OP_CONSTANT, 1, 0, thr_samples};
  if ((st = declare(reg, err, &op_thr))) return st;

  const char* state[] = {"state"};
  so_kernel count_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, count}};
  so_op_decl op_count = {SO_HEADER(so_op_decl), "t_count", "x + state; state += 1", 1, 1, X, OUT, 1, 0, state, NULL,
                         NULL, NULL, NULL, 1, 0, count_kernels, NULL, 0, SO_OP_CONSTANT, 0, 0, NULL};
  if ((st = declare(reg, err, &op_count))) return st;

  so_param_decl code[] = {{SO_HEADER(so_param_decl), "code", SO_PARAM_INT, "0", "the status to return"}};
  so_kernel fail_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, fail}};
  so_gradient fail_grads[] = {{SO_HEADER(so_gradient), 0, 1, "t_fail", 1, 0, og_only, NULL, NULL}};
  so_op_decl op_fail = {SO_HEADER(so_op_decl), "t_fail", "x, or the status `code`", 1, 1, X, OUT, 0, 1, NULL, code,
                        NULL, NULL, NULL, 1, 1, fail_kernels, fail_grads, 0, 0, 0, 0, NULL};
  if ((st = declare(reg, err, &op_fail))) return st;

  so_param_decl mode[] = {{SO_HEADER(so_param_decl), "mode", SO_PARAM_INT, "0", "which mistake to make"}};
  int32_t dense_in[] = {SO_STYPE_DEFAULT};
  so_kernel bad_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, dense_in, 1, 0, badcsr}};
  so_op_decl op_badcsr = {SO_HEADER(so_op_decl), "t_badcsr", "a csr, malformed by `mode`", 1, 1, X, OUT, 0, 1, NULL,
                          mode, badcsr_shape, NULL, csr_out, 1, 0, bad_kernels, NULL, 0, SO_OP_CONSTANT, 0, 0, NULL};
  if ((st = declare(reg, err, &op_badcsr))) return st;

  so_kernel copy_kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, fail}};
  so_param_decl modes[] = {{SO_HEADER(so_param_decl), "mode", SO_PARAM_INT, "0", "which garbage to return"},
                           {SO_HEADER(so_param_decl), "code", SO_PARAM_INT, "0", "(read by the kernel)"}};
  so_op_decl op_badinfer = {SO_HEADER(so_op_decl), "t_badinfer", "inference gone wrong", 1, 1, X, OUT, 0, 2, NULL,
                            modes, badinfer_shape, badinfer_type, badinfer_stype, 1, 0, copy_kernels, NULL, 0,
                            SO_OP_CONSTANT, 0, 0, NULL};
  return declare(reg, err, &op_badinfer);
}
