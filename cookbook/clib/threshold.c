/*
 * threshold.c: keep the entries of a csr whose magnitude exceeds a threshold.
 *
 *   c_csr_threshold(data, threshold=0.0)
 *       csr -> csr holding the values v of data with |v| > threshold;  dense -> dense (others 0)
 *   c_csr_threshold_backward(out_grad, data, threshold)
 *       out_grad where |data| > threshold, else 0; csr when data is csr (its kept pattern)
 *
 * Shows a sparse output whose nnz only the kernel can know: it counts the kept values,
 * asks ctx->alloc_output for arrays of that size, then fills them. Values float32 and
 * float64 (compared in their own dtype, as NumPy compares a float32 array with a Python
 * float); index arrays int32 or int64, kept as the input has them.
 *
 * The gradient for data is c_csr_threshold_backward(out_grad, data) with the forward's
 * threshold (forward_params = 1). The backward op is linear in out_grad with the same mask,
 * so its gradient for out_grad is itself again; for data it is zero almost everywhere.
 *
 * Build: cc -shared -fPIC -O2 -I"$(sparse-ops include-dir)" threshold.c -o libthreshold.so
 */
#include "sparse_ops.h"

SPARSE_OPS_LIBRARY("cookbook threshold 1.0");

/* ---- helpers ------------------------------------------------------------------------------ */
static int64_t get_index(const void* a, int32_t index_dtype, int64_t i) {
  return index_dtype == SO_DTYPE_INT32 ? (int64_t)((const int32_t*)a)[i] : ((const int64_t*)a)[i];
}

static void set_index(void* a, int32_t index_dtype, int64_t i, int64_t value) {
  if (index_dtype == SO_DTYPE_INT32) ((int32_t*)a)[i] = (int32_t)value;
  else ((int64_t*)a)[i] = value;
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

/* Value i as a double (exact for both dtypes) ... */
static double get_value(const void* values, int32_t dtype, int64_t i) {
  return dtype == SO_DTYPE_FLOAT32 ? (double)((const float*)values)[i] : ((const double*)values)[i];
}

static void set_value(void* values, int32_t dtype, int64_t i, double v) {
  if (dtype == SO_DTYPE_FLOAT32) ((float*)values)[i] = (float)v;
  else ((double*)values)[i] = v;
}

/* ... and whether it is kept. The threshold is first rounded to the value dtype, so a
   float32 value is compared with a float32 threshold, as NumPy would. NaN is never kept. */
static int kept(const void* values, int32_t dtype, int64_t i, double threshold) {
  double t = dtype == SO_DTYPE_FLOAT32 ? (double)(float)threshold : threshold;
  double v = get_value(values, dtype, i);
  return v > t || v < -t;
}

/* ---- forward kernels ----------------------------------------------------------------------- */
static int32_t threshold_csr_kernel(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                                    int32_t n_out, so_array* out, so_error* err) {
  (void)n_in; (void)n_out; (void)err;
  const so_array* x = &in[0];
  so_array* y = &out[0];
  double t = so_param_float(p, "threshold", 0.0);
  int64_t rows = x->shape[0];

  /* Pass 1: how many values survive. Only now is the output's size known. */
  int64_t nnz = 0;
  for (int64_t k = 0; k < x->nnz; ++k) nnz += kept(x->data, x->dtype, k, t);
  int32_t status = ctx->alloc_output(ctx->host, 0, nnz, x->index_dtype, y);
  if (status != SO_OK) return status;

  /* Pass 2: copy the survivors row by row (their order within a row is kept, so column
     indices stay increasing); indptr[r + 1] = survivors in rows 0..r. */
  int64_t at = 0;
  set_index(y->indptr, y->index_dtype, 0, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t end = get_index(x->indptr, x->index_dtype, r + 1);
    for (int64_t k = get_index(x->indptr, x->index_dtype, r); k < end; ++k) {
      if (!kept(x->data, x->dtype, k, t)) continue;
      set_index(y->indices, y->index_dtype, at, get_index(x->indices, x->index_dtype, k));
      set_value(y->data, y->dtype, at, get_value(x->data, x->dtype, k));
      ++at;
    }
    set_index(y->indptr, y->index_dtype, r + 1, at);
  }
  return SO_OK;
}

static int32_t threshold_dense_kernel(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                                      int32_t n_out, so_array* out, so_error* err) {
  (void)ctx; (void)n_in; (void)n_out; (void)err;
  double t = so_param_float(p, "threshold", 0.0);
  for (int64_t i = 0; i < out[0].nnz; ++i) {
    double v = kept(in[0].data, in[0].dtype, i, t) ? get_value(in[0].data, in[0].dtype, i) : 0.0;
    set_value(out[0].data, out[0].dtype, i, v);
  }
  return SO_OK;
}

/* ---- backward kernels ---------------------------------------------------------------------- */
/* data csr, out_grad dense or csr: the output has data's kept pattern, with out_grad's
   values there. A csr out_grad row is searched by merging: both rows' columns increase. */
static int32_t backward_csr_kernel(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                                   int32_t n_out, so_array* out, so_error* err) {
  (void)n_in; (void)n_out; (void)err;
  const so_array* g = &in[0];
  const so_array* x = &in[1];
  so_array* y = &out[0];
  double t = so_param_float(p, "threshold", 0.0);
  int64_t rows = x->shape[0], cols = x->shape[1];

  int64_t nnz = 0;
  for (int64_t k = 0; k < x->nnz; ++k) nnz += kept(x->data, x->dtype, k, t);
  int32_t status = ctx->alloc_output(ctx->host, 0, nnz, x->index_dtype, y);
  if (status != SO_OK) return status;

  int64_t at = 0;
  set_index(y->indptr, y->index_dtype, 0, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t end = get_index(x->indptr, x->index_dtype, r + 1);
    /* the part of out_grad's row r not yet passed (csr out_grad only) */
    int64_t gk = 0, gend = 0;
    if (g->stype == SO_STYPE_CSR) {
      gk = get_index(g->indptr, g->index_dtype, r);
      gend = get_index(g->indptr, g->index_dtype, r + 1);
    }
    for (int64_t k = get_index(x->indptr, x->index_dtype, r); k < end; ++k) {
      if (!kept(x->data, x->dtype, k, t)) continue;
      int64_t c = get_index(x->indices, x->index_dtype, k);
      double v = 0.0;
      if (g->stype == SO_STYPE_CSR) {
        while (gk < gend && get_index(g->indices, g->index_dtype, gk) < c) ++gk;
        if (gk < gend && get_index(g->indices, g->index_dtype, gk) == c) v = get_value(g->data, g->dtype, gk);
      } else {
        v = get_value(g->data, g->dtype, r * cols + c);
      }
      set_index(y->indices, y->index_dtype, at, c);
      set_value(y->data, y->dtype, at, v);
      ++at;
    }
    set_index(y->indptr, y->index_dtype, r + 1, at);
  }
  return SO_OK;
}

static int32_t backward_dense_kernel(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                                     int32_t n_out, so_array* out, so_error* err) {
  (void)ctx; (void)n_in; (void)n_out; (void)err;
  double t = so_param_float(p, "threshold", 0.0);
  for (int64_t i = 0; i < out[0].nnz; ++i) {
    double v = kept(in[1].data, in[1].dtype, i, t) ? get_value(in[0].data, in[0].dtype, i) : 0.0;
    set_value(out[0].data, out[0].dtype, i, v);
  }
  return SO_OK;
}

/* ---- inference ----------------------------------------------------------------------------- */
/* A negative threshold would keep the zeros a csr does not store: refused. (!(t >= 0) also
   refuses NaN.) */
static int32_t check_threshold(const so_params* p, so_error* err) {
  double t = so_param_float(p, "threshold", 0.0);
  if (!(t >= 0.0))
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT,
                        "threshold must be >= 0, got %s (a negative one would keep every implicit zero)",
                        so_param(p, "threshold"));
  return SO_OK;
}

static int32_t threshold_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                               so_error* err) {
  (void)n_in; (void)n_out;
  if (in[0].ndim != 2)
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "data must be a matrix (2-D), got %d dimensions", in[0].ndim);
  out[0] = in[0];
  return check_threshold(p, err);
}

static int32_t backward_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                              so_error* err) {
  (void)n_in; (void)n_out;
  if (in[1].ndim != 2 || in[0].ndim != 2 || in[0].dims[0] != in[1].dims[0] || in[0].dims[1] != in[1].dims[1])
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "out_grad and data must be matrices of one shape");
  out[0] = in[1];
  return check_threshold(p, err);
}

static int32_t float_type(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                          so_error* err) {
  (void)p; (void)n_out;
  for (int32_t i = 0; i < n_in; ++i) {
    if (in[i] != SO_DTYPE_FLOAT32 && in[i] != SO_DTYPE_FLOAT64)
      return so_error_set(err, SO_ERR_UNSUPPORTED, "%s is not supported: float32 and float64 only",
                          dtype_name(in[i]));
    if (in[i] != in[0])
      return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "the inputs are %s and %s: give both the same dtype",
                          dtype_name(in[0]), dtype_name(in[i]));
  }
  out[0] = in[n_in - 1];
  return SO_OK;
}

/* csr data gives a csr output (the csr kernels); anything else a dense one. */
static int32_t threshold_stype(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                               so_error* err) {
  (void)p; (void)n_out; (void)err;
  out[0] = in[n_in - 1] == SO_STYPE_CSR ? SO_STYPE_CSR : SO_STYPE_DEFAULT; /* data is the last input */
  return SO_OK;
}

/* ---- samples ------------------------------------------------------------------------------- */
/* [[0.2, -1.5, 0,   0.9],
    [0,    0,   0,   0  ],    an empty row
    [-0.4, 0,   2.0, -0.1]]   with threshold 0.5: 3 of 6 values survive; every value is at
   least 0.1 from +-0.5, so the gradient's finite differences (eps 1e-3) never cross it. */
static double V64[6] = {0.2, -1.5, 0.9, -0.4, 2.0, -0.1};
static float V32[6] = {0.2f, -1.5f, 0.9f, -0.4f, 2.0f, -0.1f};
static int32_t COLS32[6] = {0, 1, 3, 0, 2, 3};
static int32_t PTR32[4] = {0, 3, 3, 6};
static int64_t COLS64[6] = {0, 1, 3, 0, 2, 3};
static int64_t PTR64[4] = {0, 3, 3, 6};
static int64_t EMPTY_PTR[3] = {0, 0, 0};
static double G34[12] = {0.3, -0.7, 1.1, 0.9, -1.3, 0.4, 0.8, -0.2, 0.6, 1.4, -0.9, 0.25};
static double GV[3] = {0.7, -0.3, 1.2}; /* a csr out_grad: (0, 1), (0, 2), (2, 2) */
static int64_t GCOLS[3] = {1, 2, 2};
static int64_t GPTR[4] = {0, 2, 2, 3};

static so_array csr(void* values, int32_t dtype, void* indices, void* indptr, int32_t index_dtype, int64_t rows,
                    int64_t cols, int64_t nnz) {
  so_array a = {SO_HEADER(so_array), SO_STYPE_CSR, dtype, index_dtype, 2, {rows, cols}, nnz,
                values, indices, indptr, SO_DEVICE_CPU, 0};
  return a;
}

/* ---- registration ---------------------------------------------------------------------------- */
SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  (void)host_abi_version;
  int32_t status;
  static const char* const outputs[] = {"out"};
  so_param_decl params[] = {{SO_HEADER(so_param_decl), "threshold", SO_PARAM_FLOAT, "0.0",
                             "keep the values with |v| > threshold (>= 0)"}};
  static const char* const keys[] = {"threshold"};
  static const char* const half[] = {"0.5"};

  /* c_csr_threshold */
  static const char* const args[] = {"data"};
  static const int32_t capacity_like_data[] = {0}; /* the output stores at most input 0's entries */
  static const int32_t csr_in[] = {SO_STYPE_CSR};
  so_kernel kernels[] = {
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, csr_in, 1, 0, threshold_csr_kernel},
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, threshold_dense_kernel},
  };
  static const int32_t grad_args[] = {SO_OUT_GRAD(0), SO_INPUT(0)};
  so_gradient grads[] = {
      {SO_HEADER(so_gradient), 0, 1, "c_csr_threshold_backward", 2, 0, grad_args, NULL, NULL}};
  so_array x64 = csr(V64, SO_DTYPE_FLOAT64, COLS32, PTR32, SO_DTYPE_INT32, 3, 4, 6);
  so_array x32 = csr(V32, SO_DTYPE_FLOAT32, COLS64, PTR64, SO_DTYPE_INT64, 3, 4, 6);
  so_array empty = csr(V64, SO_DTYPE_FLOAT64, COLS64, EMPTY_PTR, SO_DTYPE_INT64, 2, 4, 0);
  so_array dense = {SO_HEADER(so_array), SO_STYPE_DEFAULT, SO_DTYPE_FLOAT64, -1, 2, {3, 4}, 12, G34, NULL, NULL,
                    SO_DEVICE_CPU, 0};
  so_array inputs[] = {x64, x32, empty, dense};
  so_sample samples[] = {
      {SO_HEADER(so_sample), 1, 1, &inputs[0], keys, half},
      {SO_HEADER(so_sample), 1, 1, &inputs[1], keys, half},
      {SO_HEADER(so_sample), 1, 0, &inputs[0], NULL, NULL}, /* threshold 0: every stored non-zero */
      {SO_HEADER(so_sample), 1, 1, &inputs[2], keys, half},
      {SO_HEADER(so_sample), 1, 1, &inputs[3], keys, half},
  };
  so_op_decl op = {SO_HEADER(so_op_decl), "c_csr_threshold", "the values of data with |v| > threshold (csr stays csr)",
                   1, 1, args, outputs, 0, 1, NULL, params,
                   threshold_shape, float_type, threshold_stype, 2, 1, kernels, grads,
                   0, 0, 5, SO_PARTITION_ROWS, samples,
                   /* ABI 1.1: no reference op, no opcheck skips; a csr result keeps at most data's values */
                   NULL, 0, 0, NULL, capacity_like_data,
                   0, NULL}; /* ABI 1.2: no partition_args: every input is cut into row blocks */
  if ((status = reg->register_op(reg->host, &op, err)) != SO_OK) return status;

  /* c_csr_threshold_backward: one function serves a dense and a csr out_grad */
  static const char* const backward_args[] = {"out_grad", "data"};
  static const int32_t capacity_like_backward[] = {1};
  static const int32_t dense_csr[] = {SO_STYPE_DEFAULT, SO_STYPE_CSR};
  static const int32_t csr_csr[] = {SO_STYPE_CSR, SO_STYPE_CSR};
  so_kernel backward_kernels[] = {
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, dense_csr, 2, 0, backward_csr_kernel},
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, csr_csr, 2, 0, backward_csr_kernel},
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, backward_dense_kernel},
  };
  static const int32_t backward_grad_args[] = {SO_OUT_GRAD(0), SO_INPUT(1)};
  so_gradient backward_grads[] = {
      {SO_HEADER(so_gradient), 0, 1, "c_csr_threshold_backward", 2, 0, backward_grad_args, NULL, NULL}};
  so_array g34 = dense;
  so_array g_csr = csr(GV, SO_DTYPE_FLOAT64, GCOLS, GPTR, SO_DTYPE_INT64, 3, 4, 3);
  so_array backward_in[][2] = {{g34, x64}, {g_csr, x64}, {g34, dense}};
  so_sample backward_samples[] = {
      {SO_HEADER(so_sample), 2, 1, backward_in[0], keys, half},
      {SO_HEADER(so_sample), 2, 1, backward_in[1], keys, half},
      {SO_HEADER(so_sample), 2, 1, backward_in[2], keys, half},
  };
  so_op_decl backward = {SO_HEADER(so_op_decl), "c_csr_threshold_backward",
                         "out_grad where |data| > threshold, else 0 (the gradient of c_csr_threshold)",
                         2, 1, backward_args, outputs, 0, 1, NULL, params,
                         backward_shape, float_type, threshold_stype, 3, 1, backward_kernels, backward_grads,
                         0, 0, 3, SO_PARTITION_ROWS, backward_samples,
                         /* ABI 1.1: at most data's (input 1's) stored values */
                         NULL, 0, 0, NULL, capacity_like_backward,
                         0, NULL}; /* ABI 1.2: every input is cut into row blocks */
  return reg->register_op(reg->host, &backward, err);
}
