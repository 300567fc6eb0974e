/*
 * gemm.c: dense matrix products and their gradients, as a C operator library.
 *
 *   c_gemm(a, b, transpose_a=0, transpose_b=0)      out = op(a) @ op(b)
 *   c_gemm_grad_a(out_grad, b, transpose_a, transpose_b)   d out / d a, applied to out_grad
 *   c_gemm_grad_b(a, out_grad, transpose_a, transpose_b)   d out / d b, applied to out_grad
 *
 * op(x) is x, or x transposed when its transpose_* parameter is 1. float32 and float64.
 *
 * Why three ops: a gradient term (so_gradient) names an op and fixed parameters, so the
 * gradient of c_gemm cannot be "c_gemm with transpose_b flipped". Instead each gradient
 * is its own op that receives the forward op's parameters (forward_params = 1) and picks
 * the right product itself. The three are closed under differentiation: the gradients of
 * c_gemm_grad_a and c_gemm_grad_b are again the three ops, so second derivatives work.
 *
 * Build: cc -shared -fPIC -O2 -I"$(sparse-ops include-dir)" gemm.c -o libgemm.so
 */
#include "sparse_ops.h"

SPARSE_OPS_LIBRARY("cookbook gemm 1.0");

/* ---- a matrix seen through strides --------------------------------------------------------- */
/* Element (i, j) of a view is data[i * s0 + j * s1]: a transposed view swaps the strides, so
   one product routine serves every combination of transposes without copying. */
typedef struct {
  const void* data;
  int64_t rows, cols;
  int64_t s0, s1;
} matrix_view;

/* op(x) for a C-contiguous 2-D array x. */
static matrix_view view_of(const so_array* x, int transposed) {
  matrix_view v = {x->data, x->shape[0], x->shape[1], x->shape[1], 1};
  if (transposed) {
    v.rows = x->shape[1];
    v.cols = x->shape[0];
    v.s0 = 1;
    v.s1 = x->shape[1];
  }
  return v;
}

static matrix_view transpose(matrix_view v) {
  matrix_view t = {v.data, v.cols, v.rows, v.s1, v.s0};
  return t;
}

/* out (x.rows by y.cols, C-contiguous) = x @ y. Sums run in double for both dtypes: for
   float32 that is a more exact sum, rounded once at the end. */
static void product_f64(matrix_view x, matrix_view y, double* out) {
  const double* a = (const double*)x.data;
  const double* b = (const double*)y.data;
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < y.cols; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < x.cols; ++p) sum += a[i * x.s0 + p * x.s1] * b[p * y.s0 + j * y.s1];
      out[i * y.cols + j] = sum;
    }
}

static void product_f32(matrix_view x, matrix_view y, float* out) {
  const float* a = (const float*)x.data;
  const float* b = (const float*)y.data;
  for (int64_t i = 0; i < x.rows; ++i)
    for (int64_t j = 0; j < y.cols; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < x.cols; ++p) sum += (double)a[i * x.s0 + p * x.s1] * b[p * y.s0 + j * y.s1];
      out[i * y.cols + j] = (float)sum;
    }
}

static const char* dtype_name(int32_t code) {
  switch (code) {
    case SO_DTYPE_FLOAT32: return "float32";
    case SO_DTYPE_FLOAT64: return "float64";
    case SO_DTYPE_FLOAT16: return "float16";
    case SO_DTYPE_INT32: return "int32";
    case SO_DTYPE_INT64: return "int64";
    default: return "an unknown dtype";
  }
}

/* out = x @ y in out's dtype (infer_type made sure every array has that dtype). */
static int32_t product(matrix_view x, matrix_view y, so_array* out, so_error* err) {
  if (out->dtype == SO_DTYPE_FLOAT64) {
    product_f64(x, y, (double*)out->data);
    return SO_OK;
  }
  if (out->dtype == SO_DTYPE_FLOAT32) {
    product_f32(x, y, (float*)out->data);
    return SO_OK;
  }
  return so_error_set(err, SO_ERR_UNSUPPORTED, "%s is not supported: float32 and float64 only",
                      dtype_name(out->dtype));
}

/* ---- kernels ------------------------------------------------------------------------------- */
/* Inputs arrive dense and C-contiguous (these are dense kernels: stypes NULL), the output
   allocated; the shapes were checked by the infer_shape callbacks below. */

static int32_t gemm_kernel(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                           int32_t n_out, so_array* out, so_error* err) {
  (void)ctx; (void)n_in; (void)n_out;
  int ta = so_param_bool(p, "transpose_a", 0), tb = so_param_bool(p, "transpose_b", 0);
  return product(view_of(&in[0], ta), view_of(&in[1], tb), &out[0], err);
}

/* The gradient for a, given g = d loss / d out with out = op(a) @ op(b):
   d loss / d op(a) = g @ op(b)^T, so d loss / d a is that, or its transpose when a was
   transposed: (g @ op(b)^T)^T = op(b) @ g^T. */
static int32_t grad_a_kernel(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                             int32_t n_out, so_array* out, so_error* err) {
  (void)ctx; (void)n_in; (void)n_out;
  int ta = so_param_bool(p, "transpose_a", 0), tb = so_param_bool(p, "transpose_b", 0);
  matrix_view g = view_of(&in[0], 0), opb = view_of(&in[1], tb);
  if (ta) return product(opb, transpose(g), &out[0], err);
  return product(g, transpose(opb), &out[0], err);
}

/* The gradient for b: d loss / d op(b) = op(a)^T @ g, transposed when b was: g^T @ op(a). */
static int32_t grad_b_kernel(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                             int32_t n_out, so_array* out, so_error* err) {
  (void)ctx; (void)n_in; (void)n_out;
  int ta = so_param_bool(p, "transpose_a", 0), tb = so_param_bool(p, "transpose_b", 0);
  matrix_view opa = view_of(&in[0], ta), g = view_of(&in[1], 0);
  if (tb) return product(transpose(g), opa, &out[0], err);
  return product(transpose(opa), g, &out[0], err);
}

/* ---- inference ----------------------------------------------------------------------------- */
static void set_shape(so_shape* s, int64_t rows, int64_t cols) {
  s->ndim = 2;
  s->dims[0] = rows;
  s->dims[1] = cols;
}

/* rows and cols of op(x) for a shape x; an error unless x is 2-D. */
static int32_t op_shape(const so_shape* x, int transposed, const char* name, int64_t* rows, int64_t* cols,
                        so_error* err) {
  if (x->ndim != 2)
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "%s must be a matrix (2-D), got %d dimensions", name, x->ndim);
  *rows = transposed ? x->dims[1] : x->dims[0];
  *cols = transposed ? x->dims[0] : x->dims[1];
  return SO_OK;
}

/* c_gemm: op(a) is m by k, op(b) is k by n, out is m by n. */
static int32_t gemm_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                          so_error* err) {
  (void)n_in; (void)n_out;
  int ta = so_param_bool(p, "transpose_a", 0), tb = so_param_bool(p, "transpose_b", 0);
  int64_t m = 0, k = 0, k2 = 0, n = 0;
  int32_t status;
  if ((status = op_shape(&in[0], ta, "a", &m, &k, err)) != SO_OK) return status;
  if ((status = op_shape(&in[1], tb, "b", &k2, &n, err)) != SO_OK) return status;
  if (k != k2)
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT,
                        "op(a) is %lld x %lld and op(b) is %lld x %lld: the inner sizes differ (transpose_a=%d, "
                        "transpose_b=%d)", (long long)m, (long long)k, (long long)k2, (long long)n, ta, tb);
  set_shape(&out[0], m, n);
  return SO_OK;
}

/* c_gemm_grad_a(g, b): g is m by n (the forward output), op(b) k by n; the result has a's
   shape, m by k (k by m when a was transposed). */
static int32_t grad_a_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                            so_error* err) {
  (void)n_in; (void)n_out;
  int ta = so_param_bool(p, "transpose_a", 0), tb = so_param_bool(p, "transpose_b", 0);
  int64_t m = 0, n = 0, k = 0, n2 = 0;
  int32_t status;
  if ((status = op_shape(&in[0], 0, "out_grad", &m, &n, err)) != SO_OK) return status;
  if ((status = op_shape(&in[1], tb, "b", &k, &n2, err)) != SO_OK) return status;
  if (n != n2)
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT,
                        "out_grad is %lld x %lld but op(b) is %lld x %lld: their column counts differ",
                        (long long)m, (long long)n, (long long)k, (long long)n2);
  if (ta) set_shape(&out[0], k, m);
  else set_shape(&out[0], m, k);
  return SO_OK;
}

/* c_gemm_grad_b(a, g): op(a) is m by k, g m by n; the result has b's shape, k by n (n by k
   when b was transposed). */
static int32_t grad_b_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                            so_error* err) {
  (void)n_in; (void)n_out;
  int ta = so_param_bool(p, "transpose_a", 0), tb = so_param_bool(p, "transpose_b", 0);
  int64_t m = 0, k = 0, m2 = 0, n = 0;
  int32_t status;
  if ((status = op_shape(&in[0], ta, "a", &m, &k, err)) != SO_OK) return status;
  if ((status = op_shape(&in[1], 0, "out_grad", &m2, &n, err)) != SO_OK) return status;
  if (m != m2)
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT,
                        "op(a) is %lld x %lld but out_grad is %lld x %lld: their row counts differ",
                        (long long)m, (long long)k, (long long)m2, (long long)n);
  if (tb) set_shape(&out[0], n, k);
  else set_shape(&out[0], k, n);
  return SO_OK;
}

/* Both inputs float32, or both float64; the output takes their dtype. */
static int32_t float_type(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                          so_error* err) {
  (void)p; (void)n_out;
  for (int32_t i = 0; i < n_in; ++i)
    if (in[i] != SO_DTYPE_FLOAT32 && in[i] != SO_DTYPE_FLOAT64)
      return so_error_set(err, SO_ERR_UNSUPPORTED, "input %d is %s: only float32 and float64 are supported", i,
                          dtype_name(in[i]));
  if (in[0] != in[1])
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT,
                        "the inputs are %s and %s: give both the same dtype", dtype_name(in[0]),
                        dtype_name(in[1]));
  out[0] = in[0];
  return SO_OK;
}

/* ---- samples for opcheck --------------------------------------------------------------------- */
/* Values with no exact ties, away from zero. */
static double A34[12] = {0.5, -1.25, 2.0, 0.75, -0.5, 1.5, -2.25, 1.0, 0.25, -0.75, 1.75, -1.5};
static double B42[8] = {1.0, -0.5, 0.25, 2.0, -1.5, 0.75, 1.25, -0.25};
static double G32[6] = {0.3, -0.7, 1.1, 0.9, -1.3, 0.4};
static float A34f[12] = {0.5f, -1.25f, 2.0f, 0.75f, -0.5f, 1.5f, -2.25f, 1.0f, 0.25f, -0.75f, 1.75f, -1.5f};
static float B42f[8] = {1.0f, -0.5f, 0.25f, 2.0f, -1.5f, 0.75f, 1.25f, -0.25f};

static so_array dense(void* data, int32_t dtype, int64_t rows, int64_t cols) {
  so_array a = {SO_HEADER(so_array), SO_STYPE_DEFAULT, dtype, -1, 2, {rows, cols}, rows * cols,
                data, NULL, NULL, SO_DEVICE_CPU, 0};
  return a;
}

/* ---- registration ---------------------------------------------------------------------------- */
static const char* const TRANSPOSE_KEYS[] = {"transpose_a", "transpose_b"};
static const char* const NN[] = {"0", "0"};
static const char* const NT[] = {"0", "1"};
static const char* const TN[] = {"1", "0"};
static const char* const TT[] = {"1", "1"};

/* One so_op_decl: the fields every op of this library shares filled once. */
static int32_t register_gemm_op(const so_registrar* reg, so_error* err, const char* name, const char* doc,
                                const char* const* arguments, so_infer_shape_fn shape, so_kernel_fn fn,
                                const so_gradient* gradients, int32_t n_samples, const so_sample* samples) {
  static const char* const outputs[] = {"out"};
  so_param_decl params[] = {
      {SO_HEADER(so_param_decl), "transpose_a", SO_PARAM_BOOL, "0", "use the first matrix operand transposed"},
      {SO_HEADER(so_param_decl), "transpose_b", SO_PARAM_BOOL, "0", "use the second matrix operand transposed"},
  };
  so_kernel kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, fn}};
  so_op_decl op = {SO_HEADER(so_op_decl), name, doc, 2, 1, arguments, outputs, 0, 2, NULL, params,
                   shape, float_type, NULL, /* no storage callback: dense in, dense out */
                   1, 2, kernels, gradients, 0, 0, n_samples, 0, samples,
                   NULL, 0, 0, NULL, NULL, /* ABI 1.1: no reference op, no opcheck skips, no capacity rule */
                   0, NULL};               /* ABI 1.2: no partition_args (no partition rule) */
  return reg->register_op(reg->host, &op, err);
}

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  (void)host_abi_version;
  int32_t status;

  /* The gradient terms. Each receives the forward op's transpose_a / transpose_b
     (forward_params = 1). For c_gemm(a, b) -> out with output gradient g:
       d a = c_gemm_grad_a(g, b),  d b = c_gemm_grad_b(a, g).
     c_gemm_grad_a(g, b) is linear in g and in b; with its output gradient h (a's shape):
       d g = c_gemm(h, b),         d b = c_gemm_grad_b(h, g)
     and likewise for c_gemm_grad_b(a, g) with h of b's shape:
       d a = c_gemm_grad_a(g, h),  d g = c_gemm(a, h). */
  static const int32_t gemm_da[] = {SO_OUT_GRAD(0), SO_INPUT(1)};
  static const int32_t gemm_db[] = {SO_INPUT(0), SO_OUT_GRAD(0)};
  so_gradient gemm_grads[] = {
      {SO_HEADER(so_gradient), 0, 1, "c_gemm_grad_a", 2, 0, gemm_da, NULL, NULL},
      {SO_HEADER(so_gradient), 1, 1, "c_gemm_grad_b", 2, 0, gemm_db, NULL, NULL},
  };
  static const int32_t ga_dg[] = {SO_OUT_GRAD(0), SO_INPUT(1)};
  static const int32_t ga_db[] = {SO_OUT_GRAD(0), SO_INPUT(0)};
  so_gradient grad_a_grads[] = {
      {SO_HEADER(so_gradient), 0, 1, "c_gemm", 2, 0, ga_dg, NULL, NULL},
      {SO_HEADER(so_gradient), 1, 1, "c_gemm_grad_b", 2, 0, ga_db, NULL, NULL},
  };
  static const int32_t gb_da[] = {SO_INPUT(1), SO_OUT_GRAD(0)};
  static const int32_t gb_dg[] = {SO_INPUT(0), SO_OUT_GRAD(0)};
  so_gradient grad_b_grads[] = {
      {SO_HEADER(so_gradient), 0, 1, "c_gemm_grad_a", 2, 0, gb_da, NULL, NULL},
      {SO_HEADER(so_gradient), 1, 1, "c_gemm", 2, 0, gb_dg, NULL, NULL},
  };

  /* Samples: every transpose combination in float64 (tight gradient checks), one float32. */
  so_array a34 = dense(A34, SO_DTYPE_FLOAT64, 3, 4), a43 = dense(A34, SO_DTYPE_FLOAT64, 4, 3);
  so_array b42 = dense(B42, SO_DTYPE_FLOAT64, 4, 2), b24 = dense(B42, SO_DTYPE_FLOAT64, 2, 4);
  so_array g32 = dense(G32, SO_DTYPE_FLOAT64, 3, 2);
  so_array a34f = dense(A34f, SO_DTYPE_FLOAT32, 3, 4), b42f = dense(B42f, SO_DTYPE_FLOAT32, 4, 2);
  so_array gemm_in[][2] = {{a34, b42}, {a43, b42}, {a34, b24}, {a43, b24}, {a34f, b42f}};
  /* c_gemm_grad_a(g, b) and c_gemm_grad_b(a, g) with g of the forward output's shape, 3 x 2 */
  so_array grad_a_in[][2] = {{g32, b42}, {g32, b24}};
  so_array grad_b_in[][2] = {{a34, g32}, {a43, g32}};
  so_sample gemm_samples[] = {
      {SO_HEADER(so_sample), 2, 2, gemm_in[0], TRANSPOSE_KEYS, NN},
      {SO_HEADER(so_sample), 2, 2, gemm_in[1], TRANSPOSE_KEYS, TN},
      {SO_HEADER(so_sample), 2, 2, gemm_in[2], TRANSPOSE_KEYS, NT},
      {SO_HEADER(so_sample), 2, 2, gemm_in[3], TRANSPOSE_KEYS, TT},
      {SO_HEADER(so_sample), 2, 0, gemm_in[4], NULL, NULL},
  };
  so_sample grad_a_samples[] = {
      {SO_HEADER(so_sample), 2, 2, grad_a_in[0], TRANSPOSE_KEYS, NN},
      {SO_HEADER(so_sample), 2, 2, grad_a_in[1], TRANSPOSE_KEYS, TT},
  };
  so_sample grad_b_samples[] = {
      {SO_HEADER(so_sample), 2, 2, grad_b_in[0], TRANSPOSE_KEYS, NT},
      {SO_HEADER(so_sample), 2, 2, grad_b_in[1], TRANSPOSE_KEYS, TN},
  };

  static const char* const gemm_args[] = {"a", "b"};
  static const char* const grad_a_args[] = {"out_grad", "b"};
  static const char* const grad_b_args[] = {"a", "out_grad"};
  if ((status = register_gemm_op(reg, err, "c_gemm", "op(a) @ op(b) for dense float32 / float64 matrices",
                                 gemm_args, gemm_shape, gemm_kernel, gemm_grads, 5, gemm_samples)) != SO_OK)
    return status;
  if ((status = register_gemm_op(reg, err, "c_gemm_grad_a", "the gradient of c_gemm for a, from out_grad and b",
                                 grad_a_args, grad_a_shape, grad_a_kernel, grad_a_grads, 2, grad_a_samples)) != SO_OK)
    return status;
  return register_gemm_op(reg, err, "c_gemm_grad_b", "the gradient of c_gemm for b, from a and out_grad",
                          grad_b_args, grad_b_shape, grad_b_kernel, grad_b_grads, 2, grad_b_samples);
}
