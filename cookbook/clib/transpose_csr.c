/*
 * transpose_csr.c: the transpose of a csr matrix, as a csr matrix.
 *
 *   c_transpose_csr(data)    csr (n x m) -> csr (m x n);  dense -> dense
 *
 * Shows: a storage-aware kernel (stypes {SO_STYPE_CSR}) next to a dense kernel, a storage
 * type inference callback, a sparse output the kernel sizes itself with ctx->alloc_output,
 * scratch memory from ctx->workspace, int32 and int64 index arrays. Values are only moved,
 * never computed with, so every value dtype works (copied byte for byte).
 * The gradient of a transpose is the transpose of the output gradient: c_transpose_csr again.
 *
 * Build: cc -shared -fPIC -O2 -I"$(sparse-ops include-dir)" transpose_csr.c -o libtranspose_csr.so
 */
#include "sparse_ops.h"

SPARSE_OPS_LIBRARY("cookbook transpose_csr 1.0");

/* ---- helpers ------------------------------------------------------------------------------ */
/* Index arrays are int32 or int64 (so_array.index_dtype): read and write either kind. */
static int64_t get_index(const void* a, int32_t index_dtype, int64_t i) {
  return index_dtype == SO_DTYPE_INT32 ? (int64_t)((const int32_t*)a)[i] : ((const int64_t*)a)[i];
}

static void set_index(void* a, int32_t index_dtype, int64_t i, int64_t value) {
  if (index_dtype == SO_DTYPE_INT32) ((int32_t*)a)[i] = (int32_t)value;
  else ((int64_t*)a)[i] = value;
}

/* Bytes per value of a dtype; 0 for a code this file does not know. */
static size_t value_size(int32_t dtype) {
  switch (dtype) {
    case SO_DTYPE_FLOAT16: return 2;
    case SO_DTYPE_FLOAT32: case SO_DTYPE_INT32: return 4;
    case SO_DTYPE_FLOAT64: case SO_DTYPE_INT64: return 8;
    default: return 0;
  }
}

/* dst[i] = src[j] for values of `size` bytes. */
static void copy_value(void* dst, int64_t i, const void* src, int64_t j, size_t size) {
  memcpy((char*)dst + (size_t)i * size, (const char*)src + (size_t)j * size, size);
}

/* ---- kernels ------------------------------------------------------------------------------- */
/* csr -> csr by counting sort on the column index. Row r of the input, read in order,
   appends r to output rows c for each of its columns c; reading rows in increasing order
   keeps every output row's column indices (the input's row numbers) increasing. */
static int32_t transpose_csr_kernel(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                                    int32_t n_out, so_array* out, so_error* err) {
  (void)p; (void)n_in; (void)n_out;
  const so_array* x = &in[0];
  so_array* y = &out[0];
  int64_t rows = x->shape[0], cols = x->shape[1], nnz = x->nnz;
  size_t size = value_size(x->dtype);
  if (size == 0) return so_error_set(err, SO_ERR_UNSUPPORTED, "value dtype code %d is not supported", x->dtype);

  /* The output's column indices are the input's row numbers: int32 holds them unless the
     input has more rows (or values) than int32 counts. */
  int32_t index_dtype = x->index_dtype;
  if (rows - 1 > INT32_MAX || nnz > INT32_MAX) index_dtype = SO_DTYPE_INT64;

  /* The output arrives with nnz = -1 and no arrays: ask the host for them. The host's
     message explains a failure; return its status as it is. */
  int32_t status = ctx->alloc_output(ctx->host, 0, nnz, index_dtype, y);
  if (status != SO_OK) return status;

  /* 1. y.indptr[c + 1] = how many values column c holds; 2. prefix sums. */
  for (int64_t c = 0; c <= cols; ++c) set_index(y->indptr, index_dtype, c, 0);
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t c = get_index(x->indices, x->index_dtype, k);
    set_index(y->indptr, index_dtype, c + 1, get_index(y->indptr, index_dtype, c + 1) + 1);
  }
  for (int64_t c = 0; c < cols; ++c)
    set_index(y->indptr, index_dtype, c + 1,
              get_index(y->indptr, index_dtype, c + 1) + get_index(y->indptr, index_dtype, c));

  /* 3. next[c] = where the next value of output row c goes (scratch memory, freed by the
     host after the kernel). */
  int64_t* next = (int64_t*)ctx->workspace(ctx->host, (uint64_t)cols * sizeof(int64_t));
  if (next == NULL) return so_error_set(err, SO_ERR_RESOURCE, "no workspace for %lld columns", (long long)cols);
  for (int64_t c = 0; c < cols; ++c) next[c] = get_index(y->indptr, index_dtype, c);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t end = get_index(x->indptr, x->index_dtype, r + 1);
    for (int64_t k = get_index(x->indptr, x->index_dtype, r); k < end; ++k) {
      int64_t at = next[get_index(x->indices, x->index_dtype, k)]++;
      set_index(y->indices, index_dtype, at, r);
      copy_value(y->data, at, x->data, k, size);
    }
  }
  return SO_OK;
}

/* dense (n x m) -> dense (m x n): also what the host's fallback runs for a row_sparse input. */
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

/* csr in, csr out (the kernel above); anything else is dense out (the dense kernel, after
   the host densified a row_sparse input). */
static int32_t transpose_stype(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                               so_error* err) {
  (void)p; (void)n_in; (void)n_out; (void)err;
  out[0] = in[0] == SO_STYPE_CSR ? SO_STYPE_CSR : SO_STYPE_DEFAULT;
  return SO_OK;
}

/* ---- samples ------------------------------------------------------------------------------- */
/* [[1, 0, 2, 0],
    [0, 0, 0, 0],     an empty row
    [0, 3, 0, 4]]     in float64 with int32 indices, and in float32 with int64 indices */
static double V64[4] = {1.0, 2.0, 3.0, 4.0};
static int32_t COLS32[4] = {0, 2, 1, 3};
static int32_t PTR32[4] = {0, 2, 2, 4};
static float V32[4] = {1.0f, 2.0f, 3.0f, 4.0f};
static int64_t COLS64[4] = {0, 2, 1, 3};
static int64_t PTR64[4] = {0, 2, 2, 4};
static int64_t EMPTY_PTR[3] = {0, 0, 0}; /* a 2 x 5 csr with nnz 0 */
static double D23[6] = {1.5, -2.0, 0.0, 0.25, 3.0, -1.0};

static so_array csr(void* values, int32_t dtype, void* indices, void* indptr, int32_t index_dtype, int64_t rows,
                    int64_t cols, int64_t nnz) {
  so_array a = {SO_HEADER(so_array), SO_STYPE_CSR, dtype, index_dtype, 2, {rows, cols}, nnz,
                values, indices, indptr, SO_DEVICE_CPU, 0};
  return a;
}

/* ---- registration ---------------------------------------------------------------------------- */
SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  (void)host_abi_version;
  static const char* const args[] = {"data"};
  static const int32_t capacity_like_data[] = {0}; /* A.T stores A's values */
  static const char* const outputs[] = {"out"};
  static const int32_t csr_in[] = {SO_STYPE_CSR};
  so_kernel kernels[] = {
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, csr_in, 1, 0, transpose_csr_kernel},
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, transpose_dense_kernel},
  };
  static const int32_t grad_args[] = {SO_OUT_GRAD(0)};
  so_gradient grads[] = {{SO_HEADER(so_gradient), 0, 0, "c_transpose_csr", 1, 0, grad_args, NULL, NULL}};

  so_array inputs[] = {
      csr(V64, SO_DTYPE_FLOAT64, COLS32, PTR32, SO_DTYPE_INT32, 3, 4, 4),
      csr(V32, SO_DTYPE_FLOAT32, COLS64, PTR64, SO_DTYPE_INT64, 3, 4, 4),
      csr(V64, SO_DTYPE_FLOAT64, COLS64, EMPTY_PTR, SO_DTYPE_INT64, 2, 5, 0),
      {SO_HEADER(so_array), SO_STYPE_DEFAULT, SO_DTYPE_FLOAT64, -1, 2, {2, 3}, 6, D23, NULL, NULL, SO_DEVICE_CPU, 0},
  };
  so_sample samples[] = {
      {SO_HEADER(so_sample), 1, 0, &inputs[0], NULL, NULL},
      {SO_HEADER(so_sample), 1, 0, &inputs[1], NULL, NULL},
      {SO_HEADER(so_sample), 1, 0, &inputs[2], NULL, NULL},
      {SO_HEADER(so_sample), 1, 0, &inputs[3], NULL, NULL},
  };
  so_op_decl op = {SO_HEADER(so_op_decl), "c_transpose_csr",
                   "the transpose of a csr matrix (csr out), or of a dense one",
                   1, 1, args, outputs, 0, 0, NULL, NULL,
                   transpose_shape, NULL, transpose_stype, 2, 1, kernels, grads,
                   SO_RESOURCE_WORKSPACE, 0, 4, SO_PARTITION_NONE, samples,
                   NULL, 0, 0, NULL, capacity_like_data, /* ABI 1.1: no reference op, no opcheck skips */
                   0, NULL}; /* ABI 1.2: no partition_args (no partition rule) */
  return reg->register_op(reg->host, &op, err);
}
