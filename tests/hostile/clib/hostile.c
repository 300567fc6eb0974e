/* A C library whose op h_copy misbehaves in the way its integer parameter `fault` picks, for
   tests/hostile/test_hostile_clib.py. The op is meant to copy a csr x (float64 values, int64
   indices) into a csr output; each fault breaks that contract in one place. A second op,
   h_scale, declares no shape rule and trusts the header's SO_MAX_NDIM. */
#include "sparse_ops.h"

SPARSE_OPS_LIBRARY("hostile 1.0");

enum {
  HONEST = 0,       /* a correct copy */
  NO_ALLOC = 1,     /* returns SO_OK without ever allocating its sparse output */
  HUGE_COLUMN = 2,  /* writes column 1 << 40 */
  NEG_COLUMN = 3,   /* writes column -3 */
  BAD_INDPTR = 4,   /* indptr [0, 1003, ...] */
  UNSORTED = 5,     /* swaps the first two columns of a row */
  WORKSPACE = 6,    /* asks for a workspace it never declared, returns SO_ERR_RESOURCE with no message */
  HUGE_SHAPE = 7,   /* infer_shape answers 2**62 x 2**62 */
  BAD_STYPE = 8,    /* infer_storage_type answers 99 */
  NEG_NNZ = 9,      /* alloc_output with nnz -5 and returns SO_OK anyway */
  BAD_RETURN = 10,  /* returns status 12345 without a message */
  NEG_SHAPE = 11,   /* infer_shape answers -5 x 3 */
  TOO_MANY = 12,    /* alloc_output with more values than the output has entries */
  TWICE = 13        /* alloc_output twice for the same output */
};

static int32_t copy_csr(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                        int32_t n_out, so_array* out, so_error* err) {
  int64_t fault = so_param_int(p, "fault", 0);
  const so_array* a = &in[0];
  if (fault == NO_ALLOC) return SO_OK;
  if (fault == WORKSPACE) {
    void* w = ctx->workspace(ctx->host, 64);
    return w == NULL ? SO_ERR_RESOURCE : SO_OK;
  }
  if (fault == BAD_RETURN) return 12345;
  if (fault == NEG_NNZ) {
    ctx->alloc_output(ctx->host, 0, -5, SO_DTYPE_INT64, &out[0]);
    return SO_OK;
  }
  if (fault == TOO_MANY) return ctx->alloc_output(ctx->host, 0, a->shape[0] * a->shape[1] + 1, SO_DTYPE_INT64, &out[0]);
  if (fault == TWICE) {
    int32_t first = ctx->alloc_output(ctx->host, 0, a->nnz, SO_DTYPE_INT64, &out[0]);
    if (first) return first;
  }
  int32_t st = ctx->alloc_output(ctx->host, 0, a->nnz, SO_DTYPE_INT64, &out[0]);
  if (st) return st;
  const int64_t* ind = (const int64_t*)a->indices;
  const int64_t* ptr = (const int64_t*)a->indptr;
  int64_t* oind = (int64_t*)out[0].indices;
  int64_t* optr = (int64_t*)out[0].indptr;
  for (int64_t i = 0; i < a->nnz; ++i) {
    ((double*)out[0].data)[i] = ((const double*)a->data)[i];
    oind[i] = ind[i];
  }
  for (int64_t r = 0; r <= a->shape[0]; ++r) optr[r] = ptr[r];
  if (a->nnz >= 2) {
    if (fault == HUGE_COLUMN) oind[0] = (int64_t)1 << 40;
    if (fault == NEG_COLUMN) oind[0] = -3;
    if (fault == UNSORTED) { int64_t t = oind[0]; oind[0] = oind[1]; oind[1] = t; }
  }
  if (fault == BAD_INDPTR && a->shape[0] >= 2) optr[1] = 1003;
  return SO_OK;
}

static int32_t shape_of(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                        so_error* err) {
  out[0] = in[0];
  if (so_param_int(p, "fault", 0) == NEG_SHAPE) out[0].dims[0] = -5;
  if (so_param_int(p, "fault", 0) == HUGE_SHAPE) {
    out[0].dims[0] = (int64_t)1 << 62;
    out[0].dims[1] = (int64_t)1 << 62;
  }
  return SO_OK;
}

static int32_t stype_of(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                        so_error* err) {
  out[0] = so_param_int(p, "fault", 0) == BAD_STYPE ? 99 : SO_STYPE_CSR;
  return SO_OK;
}

/* out = 2 * x, its size read from ndim and shape as the header describes them */
static int32_t scale(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in, int32_t n_out,
                     so_array* out, so_error* err) {
  int64_t n = 1;
  for (int32_t d = 0; d < in[0].ndim; ++d) n *= in[0].shape[d];
  for (int64_t i = 0; i < n; ++i) ((double*)out[0].data)[i] = 2 * ((const double*)in[0].data)[i];
  return SO_OK;
}

static const char* X[] = {"x"};
static const char* OUT[] = {"out"};

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  so_param_decl fault[] = {{SO_HEADER(so_param_decl), "fault", SO_PARAM_INT, "0", "which contract to break"}};
  int32_t csr_in[] = {SO_STYPE_CSR};
  so_kernel kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, csr_in, 1, 0, copy_csr}};
  so_op_decl op = {SO_HEADER(so_op_decl), "h_copy", "a csr copy that breaks one contract", 1, 1, X, OUT, 0, 1,
                   NULL, fault, shape_of, NULL, stype_of, 1, 0, kernels, NULL, 0, SO_OP_CONSTANT, 0, 0, NULL};
  int32_t status = reg->register_op(reg->host, &op, err);
  if (status) return status;
  so_kernel dense[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, scale}};
  so_op_decl h_scale = {SO_HEADER(so_op_decl), "h_scale", "2 * x, with no shape rule", 1, 1, X, OUT, 0, 0,
                        NULL, NULL, NULL, NULL, NULL, 1, 0, dense, NULL, 0, SO_OP_CONSTANT, 0, 0, NULL};
  return reg->register_op(reg->host, &h_scale, err);
}
