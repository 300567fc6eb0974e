/* Libraries that are wrong in one way each, chosen with -D at build time (tests/test_clib.py). */
#include "sparse_ops.h"

#if defined(WRONG_MAJOR)
SO_EXPORT const uint32_t sparse_ops_library_abi_version = (2u << 16) | 0u;
#elif defined(NEWER_MINOR)
SO_EXPORT const uint32_t sparse_ops_library_abi_version = (1u << 16) | 7u;
#elif !defined(NO_VERSION)
SPARSE_OPS_LIBRARY("badlib 0.0");
#endif

static int32_t copy(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                    int32_t n_out, so_array* out, so_error* err) {
  memcpy(out[0].data, in[0].data, (size_t)out[0].nnz * (in[0].dtype == SO_DTYPE_FLOAT64 ? 8 : 4));
  return SO_OK;
}

static const char* X[] = {"x"};
static const char* OUT[] = {"out"};

#ifndef NO_INIT
SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
#if defined(NOTHING)
  return SO_OK; /* registers no operator at all */
#endif
  so_kernel kernels[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, copy}};
  so_op_decl first = {SO_HEADER(so_op_decl), "bad_first", NULL, 1, 1, X, OUT, 0, 0, NULL, NULL,
                      NULL, NULL, NULL, 1, 0, kernels, NULL, 0, SO_OP_CONSTANT, 0, 0, NULL};
  int32_t st = reg->register_op(reg->host, &first, err);
  if (st) return st;
#if defined(TAKEN)
  so_op_decl taken = first;
  taken.name = "elemwise_add";
  return reg->register_op(reg->host, &taken, err);
#elif defined(NO_HEADER)
  so_op_decl zeroed = first;
  zeroed.struct_size = 0;
  zeroed.name = "bad_zeroed";
  return reg->register_op(reg->host, &zeroed, err);
#elif defined(BAD_NAME)
  so_op_decl named = first;
  named.name = "not an identifier";
  return reg->register_op(reg->host, &named, err);
#elif defined(NO_KERNEL)
  so_kernel nulls[] = {{SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, NULL}};
  so_op_decl empty = first;
  empty.name = "bad_no_kernel";
  empty.kernels = nulls;
  return reg->register_op(reg->host, &empty, err);
#elif defined(BAD_GRADIENT_OP)
  int32_t og[] = {SO_OUT_GRAD(0)};
  so_gradient grads[] = {{SO_HEADER(so_gradient), 0, 0, "no_such_op", 1, 0, og, NULL, NULL}};
  so_op_decl graded = first;
  graded.name = "bad_gradient";
  graded.flags = 0;
  graded.n_gradients = 1;
  graded.gradients = grads;
  return reg->register_op(reg->host, &graded, err);
#elif defined(IGNORES_REFUSAL)
  so_op_decl twice = first; /* bad_first again: refused, and init carries on regardless */
  reg->register_op(reg->host, &twice, err);
  return SO_OK;
#elif defined(REPEATED_PARAM)
  so_param_decl params[] = {{SO_HEADER(so_param_decl), "alpha", SO_PARAM_FLOAT, "0.5", NULL},
                            {SO_HEADER(so_param_decl), "alpha", SO_PARAM_INT, "2", NULL}};
  so_op_decl repeated = first;
  repeated.name = "bad_repeated_param";
  repeated.n_params = 2;
  repeated.params = params;
  return reg->register_op(reg->host, &repeated, err);
#elif defined(UNKNOWN_FLAGS)
  so_op_decl flagged = first;
  flagged.name = "bad_unknown_flags";
  flagged.flags = 0xFFu;
  return reg->register_op(reg->host, &flagged, err);
#elif defined(UNKNOWN_RESOURCES)
  so_op_decl resourced = first;
  resourced.name = "bad_unknown_resources";
  resourced.resources = 0xF0u;
  return reg->register_op(reg->host, &resourced, err);
#elif defined(INIT_FAILS)
  return so_error_set(err, SO_ERR_INTERNAL, "could not find the license file");
#elif defined(SAMPLE_DENSE_NNZ) || defined(SAMPLE_RSP_NNZ) || defined(SAMPLE_CSR_END) || defined(SAMPLE_COUNT)
  /* a sample whose own numbers disagree: read as declared, its 6 values would be overrun */
  static double values[6] = {1, 2, 3, 4, 5, 6};
  static int64_t idx[6] = {0, 1, 0, 1, 0, 1}, ptr[4] = {0, 2, 4, 5};
  so_array x;
  SO_INIT(x);
  x.dtype = SO_DTYPE_FLOAT64;
  x.data = values;
#if defined(SAMPLE_DENSE_NNZ)
  x.stype = SO_STYPE_DEFAULT;
  x.index_dtype = -1;
  x.ndim = 2, x.shape[0] = 1000, x.shape[1] = 1000, x.nnz = 6;
#elif defined(SAMPLE_RSP_NNZ)
  x.stype = SO_STYPE_ROW_SPARSE;
  x.index_dtype = SO_DTYPE_INT64;
  x.indices = idx;
  x.ndim = 2, x.shape[0] = 2, x.shape[1] = 3, x.nnz = 10000000;
#else
  x.stype = SO_STYPE_CSR;
  x.index_dtype = SO_DTYPE_INT64;
  x.indices = idx, x.indptr = ptr;
  x.ndim = 2, x.shape[0] = 3, x.shape[1] = 2, x.nnz = 6; /* indptr ends at 5 */
#endif
#if defined(SAMPLE_COUNT)
  /* three inputs claimed for a one-argument op, one array given: refused before reading past it */
  so_sample samples[] = {{SO_HEADER(so_sample), 3, 0, &x, NULL, NULL}};
#else
  so_sample samples[] = {{SO_HEADER(so_sample), 1, 0, &x, NULL, NULL}};
#endif
  so_op_decl sampled = first;
  sampled.name = "bad_sample";
  sampled.n_samples = 1;
  sampled.samples = samples;
  return reg->register_op(reg->host, &sampled, err);
#elif defined(NO_INPUT_RULES)
  so_op_decl bare = first;
  bare.name = "bad_no_inputs";
  bare.n_arguments = 0;
  return reg->register_op(reg->host, &bare, err);
#endif
  return SO_OK;
}
#endif
