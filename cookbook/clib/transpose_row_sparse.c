/*
 * transpose_row_sparse.c: the transpose of a row_sparse matrix.
 *
 *   c_transpose_row_sparse(data, out_stype="csr")
 *       row_sparse (n x m) -> csr (m x n)          out_stype="csr" (the default)
 *       row_sparse (n x m) -> row_sparse (m x n)   out_stype="row_sparse" (MXNet's choice)
 *       dense -> dense
 *
 * Which storage type should the transpose of a row_sparse have? A row_sparse stores a few
 * full rows of a tall matrix (an embedding gradient: 1M rows, 64 columns, 100 rows stored).
 * Its transpose has few rows (64), each as long as the tall side (1M), and holds values
 * only in the columns of the stored rows.
 *  - MXNet's lib_custom_op example gives a row_sparse: it stores every output row (input
 *    column) that holds a non-zero, each row in full, 1M values long: (number of such
 *    columns) x n values, mostly zeros. That is out_stype="row_sparse" here.
 *  - A csr stores exactly the non-zero values, with their row numbers as column indices:
 *    memory proportional to the input's. That is the default here.
 * Either way the output's size (non-zero columns, or non-zero values) is known only once
 * the kernel has looked at the values: it sizes the output with ctx->alloc_output. Stored
 * zeros of the input are dropped (as MXNet does).
 *
 * The gradient is the transpose of the output gradient: the table's built-in `transpose`
 * (a gradient term may name any op of the table), which keeps a csr gradient csr.
 *
 * Build: cc -shared -fPIC -O2 -I"$(sparse-ops include-dir)" transpose_row_sparse.c -o libtranspose_row_sparse.so
 */
#include "sparse_ops.h"

SPARSE_OPS_LIBRARY("cookbook transpose_row_sparse 1.0");

/* ---- helpers ------------------------------------------------------------------------------ */
static int64_t get_index(const void* a, int32_t index_dtype, int64_t i) {
  return index_dtype == SO_DTYPE_INT32 ? (int64_t)((const int32_t*)a)[i] : ((const int64_t*)a)[i];
}

static void set_index(void* a, int32_t index_dtype, int64_t i, int64_t value) {
  if (index_dtype == SO_DTYPE_INT32) ((int32_t*)a)[i] = (int32_t)value;
  else ((int64_t*)a)[i] = value;
}

static size_t value_size(int32_t dtype) {
  switch (dtype) {
    case SO_DTYPE_FLOAT16: return 2;
    case SO_DTYPE_FLOAT32: case SO_DTYPE_INT32: return 4;
    case SO_DTYPE_FLOAT64: case SO_DTYPE_INT64: return 8;
    default: return 0;
  }
}

static void copy_value(void* dst, int64_t i, const void* src, int64_t j, size_t size) {
  memcpy((char*)dst + (size_t)i * size, (const char*)src + (size_t)j * size, size);
}

/* Whether value i is zero (NaN is not). float16 is read as its bits: +0 and -0 are the
   only patterns with every bit but the sign clear. */
static int is_zero(const void* values, int32_t dtype, int64_t i) {
  switch (dtype) {
    case SO_DTYPE_FLOAT32: return ((const float*)values)[i] == 0.0f;
    case SO_DTYPE_FLOAT64: return ((const double*)values)[i] == 0.0;
    case SO_DTYPE_FLOAT16: return (((const uint16_t*)values)[i] & 0x7fffu) == 0;
    case SO_DTYPE_INT32: return ((const int32_t*)values)[i] == 0;
    default: return ((const int64_t*)values)[i] == 0;
  }
}

/* The out_stype parameter as a storage type code, or -1 when it names neither. */
static int32_t wanted_stype(const so_params* p) {
  const char* s = so_param(p, "out_stype");
  if (s != NULL && strcmp(s, "csr") == 0) return SO_STYPE_CSR;
  if (s != NULL && strcmp(s, "row_sparse") == 0) return SO_STYPE_ROW_SPARSE;
  return -1;
}

/* ---- kernels ------------------------------------------------------------------------------- */
/* The input: `stored` rows, row k being input row rows[k] with values v[k * m .. k * m + m). */

/* row_sparse -> csr. Output row j lists, in increasing order, the input rows whose column j
   holds a non-zero: count per column, prefix sums, then place (like a csr transpose). */
static int32_t to_csr(const so_context* ctx, const so_array* x, so_array* y, so_error* err) {
  int64_t m = x->shape[1], stored = x->nnz;
  size_t size = value_size(x->dtype);
  int64_t* count = (int64_t*)ctx->workspace(ctx->host, (uint64_t)(m + 1) * sizeof(int64_t));
  if (count == NULL) return so_error_set(err, SO_ERR_RESOURCE, "no workspace for %lld columns", (long long)m);
  for (int64_t j = 0; j <= m; ++j) count[j] = 0;
  for (int64_t k = 0; k < stored; ++k)
    for (int64_t j = 0; j < m; ++j) count[j + 1] += !is_zero(x->data, x->dtype, k * m + j);
  for (int64_t j = 0; j < m; ++j) count[j + 1] += count[j]; /* now count[j] = start of output row j */
  int64_t nnz = count[m];

  /* Column indices are input row numbers, below shape[0]: int32 holds them when it holds
     the input's indices. */
  int32_t index_dtype = x->index_dtype;
  if (nnz > INT32_MAX) index_dtype = SO_DTYPE_INT64;
  int32_t status = ctx->alloc_output(ctx->host, 0, nnz, index_dtype, y);
  if (status != SO_OK) return status;
  for (int64_t j = 0; j <= m; ++j) set_index(y->indptr, index_dtype, j, count[j]);
  /* count[j] now serves as the next free place of output row j */
  for (int64_t k = 0; k < stored; ++k) {
    int64_t row = get_index(x->indices, x->index_dtype, k);
    for (int64_t j = 0; j < m; ++j) {
      if (is_zero(x->data, x->dtype, k * m + j)) continue;
      int64_t at = count[j]++;
      set_index(y->indices, index_dtype, at, row);
      copy_value(y->data, at, x->data, k * m + j, size);
    }
  }
  return SO_OK;
}

/* row_sparse -> row_sparse. Output rows are the input columns holding a non-zero; each is
   stored in full (n values: zeros, and the stored rows' values). */
static int32_t to_row_sparse(const so_context* ctx, const so_array* x, so_array* y, so_error* err) {
  int64_t n = x->shape[0], m = x->shape[1], stored = x->nnz;
  size_t size = value_size(x->dtype);
  /* slot[j]: the output row that holds input column j, or -1 when column j is all zeros */
  int64_t* slot = (int64_t*)ctx->workspace(ctx->host, (uint64_t)m * sizeof(int64_t));
  if (slot == NULL) return so_error_set(err, SO_ERR_RESOURCE, "no workspace for %lld columns", (long long)m);
  for (int64_t j = 0; j < m; ++j) slot[j] = -1;
  for (int64_t k = 0; k < stored; ++k)
    for (int64_t j = 0; j < m; ++j)
      if (!is_zero(x->data, x->dtype, k * m + j)) slot[j] = 0;
  int64_t kept = 0;
  for (int64_t j = 0; j < m; ++j)
    if (slot[j] == 0) slot[j] = kept++;

  int32_t status = ctx->alloc_output(ctx->host, 0, kept, x->index_dtype, y);
  if (status != SO_OK) return status;
  for (int64_t j = 0; j < m; ++j)
    if (slot[j] >= 0) set_index(y->indices, x->index_dtype, slot[j], j);
  /* every bit zero is 0 in every dtype here */
  memset(y->data, 0, (size_t)(kept * n) * size);
  for (int64_t k = 0; k < stored; ++k) {
    int64_t row = get_index(x->indices, x->index_dtype, k);
    for (int64_t j = 0; j < m; ++j)
      if (slot[j] >= 0) copy_value(y->data, slot[j] * n + row, x->data, k * m + j, size);
  }
  return SO_OK;
}

static int32_t transpose_row_sparse_kernel(const so_context* ctx, const so_params* p, int32_t n_in,
                                           const so_array* in, int32_t n_out, so_array* out, so_error* err) {
  (void)p; (void)n_in; (void)n_out;
  if (value_size(in[0].dtype) == 0)
    return so_error_set(err, SO_ERR_UNSUPPORTED, "value dtype code %d is not supported", in[0].dtype);
  /* out[0].stype is what transpose_stype chose from out_stype */
  if (out[0].stype == SO_STYPE_CSR) return to_csr(ctx, &in[0], &out[0], err);
  return to_row_sparse(ctx, &in[0], &out[0], err);
}

static int32_t transpose_dense_kernel(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                                      int32_t n_out, so_array* out, so_error* err) {
  (void)ctx; (void)p; (void)n_in; (void)n_out;
  int64_t rows = in[0].shape[0], cols = in[0].shape[1];
  size_t size = value_size(in[0].dtype);
  if (size == 0) return so_error_set(err, SO_ERR_UNSUPPORTED, "value dtype code %d is not supported", in[0].dtype);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) copy_value(out[0].data, c * rows + r, in[0].data, r * cols + c, size);
  return SO_OK;
}

/* ---- inference ----------------------------------------------------------------------------- */
static int32_t transpose_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                               so_error* err) {
  (void)p; (void)n_in; (void)n_out;
  if (in[0].ndim != 2)
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "data must be a matrix (2-D), got %d dimensions", in[0].ndim);
  out[0].ndim = 2;
  out[0].dims[0] = in[0].dims[1];
  out[0].dims[1] = in[0].dims[0];
  return SO_OK;
}

/* row_sparse in: the storage type out_stype names; dense (or csr, densified) in: dense out. */
static int32_t transpose_stype(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                               so_error* err) {
  (void)n_in; (void)n_out;
  int32_t wanted = wanted_stype(p);
  if (wanted < 0)
    return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "out_stype must be 'csr' or 'row_sparse', got '%s'",
                        so_param(p, "out_stype"));
  out[0] = in[0] == SO_STYPE_ROW_SPARSE ? wanted : SO_STYPE_DEFAULT;
  return SO_OK;
}

/* ---- samples ------------------------------------------------------------------------------- */
/* A 5 x 3 row_sparse storing rows 1 and 3: [[0.5, 0, -2], [1.5, 0, 0.25]] (column 1 is all
   zeros, stored). In float64 with int64 indices, and float32 with int32 indices. */
static double V64[6] = {0.5, 0.0, -2.0, 1.5, 0.0, 0.25};
static float V32[6] = {0.5f, 0.0f, -2.0f, 1.5f, 0.0f, 0.25f};
static int64_t ROWS64[2] = {1, 3};
static int32_t ROWS32[2] = {1, 3};
static double D32[6] = {1.0, -2.0, 0.5, 0.0, 3.0, -0.75};

static so_array row_sparse(void* values, int32_t dtype, void* rows, int32_t index_dtype, int64_t n, int64_t m,
                           int64_t stored) {
  so_array a = {SO_HEADER(so_array), SO_STYPE_ROW_SPARSE, dtype, index_dtype, 2, {n, m}, stored,
                values, rows, NULL, SO_DEVICE_CPU, 0};
  return a;
}

/* ---- registration ---------------------------------------------------------------------------- */
SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  (void)host_abi_version;
  static const char* const args[] = {"data"};
  static const char* const outputs[] = {"out"};
  so_param_decl params[] = {{SO_HEADER(so_param_decl), "out_stype", SO_PARAM_STRING, "csr",
                             "storage type of the transpose of a row_sparse: 'csr' or 'row_sparse'"}};
  static const int32_t row_sparse_in[] = {SO_STYPE_ROW_SPARSE};
  so_kernel kernels[] = {
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, row_sparse_in, 1, 0, transpose_row_sparse_kernel},
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, transpose_dense_kernel},
  };
  static const int32_t grad_args[] = {SO_OUT_GRAD(0)};
  so_gradient grads[] = {{SO_HEADER(so_gradient), 0, 0, "transpose", 1, 0, grad_args, NULL, NULL}};

  static const char* const keys[] = {"out_stype"};
  static const char* const as_csr[] = {"csr"};
  static const char* const as_row_sparse[] = {"row_sparse"};
  so_array inputs[] = {
      row_sparse(V64, SO_DTYPE_FLOAT64, ROWS64, SO_DTYPE_INT64, 5, 3, 2),
      row_sparse(V32, SO_DTYPE_FLOAT32, ROWS32, SO_DTYPE_INT32, 5, 3, 2),
      row_sparse(V64, SO_DTYPE_FLOAT64, ROWS64, SO_DTYPE_INT64, 4, 3, 0), /* nothing stored */
      {SO_HEADER(so_array), SO_STYPE_DEFAULT, SO_DTYPE_FLOAT64, -1, 2, {3, 2}, 6, D32, NULL, NULL, SO_DEVICE_CPU, 0},
  };
  so_sample samples[] = {
      {SO_HEADER(so_sample), 1, 1, &inputs[0], keys, as_csr},
      {SO_HEADER(so_sample), 1, 1, &inputs[0], keys, as_row_sparse},
      {SO_HEADER(so_sample), 1, 1, &inputs[1], keys, as_row_sparse},
      {SO_HEADER(so_sample), 1, 0, &inputs[1], NULL, NULL},
      {SO_HEADER(so_sample), 1, 1, &inputs[2], keys, as_row_sparse},
      {SO_HEADER(so_sample), 1, 0, &inputs[2], NULL, NULL},
      {SO_HEADER(so_sample), 1, 0, &inputs[3], NULL, NULL},
  };
  so_op_decl op = {SO_HEADER(so_op_decl), "c_transpose_row_sparse",
                   "the transpose of a row_sparse matrix (csr, or row_sparse with out_stype), or of a dense one",
                   1, 1, args, outputs, 0, 1, NULL, params,
                   transpose_shape, NULL, transpose_stype, 2, 1, kernels, grads,
                   SO_RESOURCE_WORKSPACE, 0, 7, SO_PARTITION_NONE, samples,
                   /* ABI 1.1: no reference op, no opcheck skips; no capacity rule: a row_sparse result's
                      rows are the input's columns, which its stored rows do not bound */
                   NULL, 0, 0, NULL, NULL,
                   0, NULL}; /* ABI 1.2: no partition_args (no partition rule) */
  return reg->register_op(reg->host, &op, err);
}
