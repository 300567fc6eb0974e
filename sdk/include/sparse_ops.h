/*
 * sparse_ops.h: the C ABI of sparse-ops operator libraries.
 *
 * An operator library is a shared library (.so, .dylib, .dll) written in C, C++ or CUDA
 * against this header alone. `sparse_ops.library.load(path)` opens it, checks the ABI
 * version it was built for, and calls its entry point, which declares operators. Each
 * declared operator joins the one operator table: dispatch, storage fallback, autograd,
 * `opcheck`, sparse_ops.dask, the CLI and the PyTorch bridge use it like any other op.
 *
 * Build:   cc -shared -fPIC -O2 -I"$(sparse-ops include-dir)" myops.c -o libmyops.so
 * Load:    import sparse_ops; sparse_ops.library.load("libmyops.so")
 *
 * Rules of the boundary
 * - Only C types cross it: fixed-width integers, pointers, C strings, function pointers.
 * - Every struct starts with its size and the ABI version it was written against
 *   (SO_HEADER fills both). A newer minor version only appends fields, so a host reads
 *   the fields it knows and a library built for an older minor keeps working. A library
 *   built for another major version is refused before any of its code runs.
 * - Every callback returns an int32_t status: SO_OK (0) or an SO_ERR_* code, with a
 *   message written into the `so_error` it was given (so_error_set does both). sparse-ops
 *   turns a non-zero status into an OperatorError naming the op, the library and the
 *   message. Never let a C++ exception or a longjmp cross the boundary.
 * - Declarations handed to the registrar are read during the call and copied: they may
 *   live on the stack. Function pointers must stay valid while the library is loaded
 *   (sparse-ops never unloads a library).
 * - Callbacks may run on any thread, and on several at once: keep them free of
 *   unsynchronised global state.
 * - A crash inside the library (a segfault, an abort, an out-of-bounds write) takes the
 *   process down; Python cannot catch it. Inputs are validated before they reach you, and
 *   every sparse output you build is validated fully (index ranges, order, indptr) after
 *   the kernel, before anything reads it; SPARSE_OPS_BOUNDSCHECK=1 also catches output
 *   values the kernel never wrote.
 */
#ifndef SPARSE_OPS_H
#define SPARSE_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ---------------------------------------------------------------------------- */
/* ABI history:
     1.0  the first ABI;
     1.1  so_op_decl gains, at its end, `reference` / `reference_forward_params` (an op opcheck
          compares the outputs with), `opcheck_skips` (checks skipped, with a reason) and
          `capacity_like` (a bound of each sparse output's stored entries);
     1.2  so_op_decl gains, at its end, `n_partition_args` / `partition_args` (the inputs
          sparse_ops.dask cuts into row blocks; the others go whole to every block). */
#define SPARSE_OPS_ABI_MAJOR 1
#define SPARSE_OPS_ABI_MINOR 2
/* The minor version a library is built for: this header's, unless the library defines
   SPARSE_OPS_TARGET_MINOR before including it (0: the structs of ABI 1.0, without the fields
   added since, so a sparse-ops that speaks only 1.0 loads it). A host loads libraries built
   for its own minor or an older one, and refuses newer ones. */
#ifndef SPARSE_OPS_TARGET_MINOR
#define SPARSE_OPS_TARGET_MINOR SPARSE_OPS_ABI_MINOR
#endif
#if SPARSE_OPS_TARGET_MINOR > SPARSE_OPS_ABI_MINOR
#error "SPARSE_OPS_TARGET_MINOR is newer than this sparse_ops.h"
#endif
/* (major << 16) | minor, as stored in every struct's abi_version field */
#define SPARSE_OPS_ABI_VERSION ((uint32_t)((SPARSE_OPS_ABI_MAJOR << 16) | SPARSE_OPS_TARGET_MINOR))

/* What the library exports: with C linkage also from C++ and CUDA sources (there a plain
   `const` variable would have internal linkage, and the entry point a mangled name). */
#ifdef __cplusplus
#define SO_EXTERN_C extern "C"
#else
#define SO_EXTERN_C
#endif
#if defined(_WIN32)
#define SO_EXPORT SO_EXTERN_C __declspec(dllexport)
#else
#define SO_EXPORT SO_EXTERN_C __attribute__((visibility("default")))
#endif

/* The first two fields of every struct below, for initialisers that list every field:
   { SO_HEADER(so_array), SO_STYPE_DEFAULT, ... }. */
#define SO_HEADER(type) (uint32_t)sizeof(type), SPARSE_OPS_ABI_VERSION

/* Zero every field of a struct variable, then fill its header (struct_size, abi_version):
   for structs you fill field by field, as so_op_decl usually is:

       so_op_decl op;
       SO_INIT(op);                 (every field not set below stays 0 / NULL)
       op.name = "myops_scale";

   Warning-free under -Wall -Wextra in C and C++ (a partial initialiser such as
   `so_op_decl op = {SO_HEADER(so_op_decl)};` is valid but warns under -Wextra's
   -Wmissing-field-initializers). In C, designated initialisers are warning-free too:
   `so_op_decl op = {.struct_size = sizeof(so_op_decl), .abi_version = SPARSE_OPS_ABI_VERSION};` */
static inline void so_init_struct(void* s, uint32_t size) {
  const uint32_t header[2] = {size, SPARSE_OPS_ABI_VERSION};
  memset(s, 0, size);
  memcpy(s, header, sizeof header); /* every struct starts with these two uint32_t fields */
}
#define SO_INIT(var) so_init_struct(&(var), (uint32_t)sizeof(var))

/* ---- status codes ----------------------------------------------------------------------- */
#define SO_OK 0
#define SO_ERR_INVALID_ARGUMENT 1 /* the inputs or parameters are not what the op accepts */
#define SO_ERR_UNSUPPORTED 2      /* a valid request this op does not implement */
#define SO_ERR_OUT_OF_MEMORY 3
#define SO_ERR_INTERNAL 4         /* anything else */
#define SO_ERR_RESOURCE 5         /* returned by the host: a resource callback failed */

/* ---- codes for dtypes, storage types and devices ---------------------------------------- */
/* dtype codes (MXNet's numbering): value dtypes, and int32 / int64 for index arrays */
#define SO_DTYPE_FLOAT32 0
#define SO_DTYPE_FLOAT64 1
#define SO_DTYPE_FLOAT16 2
#define SO_DTYPE_INT32 4
#define SO_DTYPE_INT64 6

/* storage types; SO_STYPE_ANY only in a kernel's stypes list: it matches every storage type */
#define SO_STYPE_DEFAULT 0    /* dense */
#define SO_STYPE_ROW_SPARSE 1 /* values (nnz rows, shape[1:]) + sorted unique row indices */
#define SO_STYPE_CSR 2        /* 2-D: values (nnz), column indices (nnz), indptr (rows + 1) */
#define SO_STYPE_ANY (-1)

/* device types (DLPack's numbering) */
#define SO_DEVICE_CPU 1
#define SO_DEVICE_GPU 2

#define SO_MAX_NDIM 8
#define SO_ERROR_MESSAGE_SIZE 1024

/* ---- errors ------------------------------------------------------------------------------ */
typedef struct so_error {
  uint32_t struct_size;
  uint32_t abi_version;
  char message[SO_ERROR_MESSAGE_SIZE]; /* NUL-terminated; empty when nothing was said */
} so_error;

/* Write a printf-style message into err and return code: `return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "...")` */
static inline int32_t so_error_set(so_error* err, int32_t code, const char* fmt, ...) {
  if (err != NULL) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(err->message, SO_ERROR_MESSAGE_SIZE, fmt, args);
    va_end(args);
  }
  return code;
}

/* ---- arrays ------------------------------------------------------------------------------ */
/*
 * One array handed to a kernel, in one of the three storage types. Every array is
 * C-contiguous and lives on the device named here (host memory on SO_DEVICE_CPU, device
 * memory on SO_DEVICE_GPU, where the kernel's work must go on ctx->stream).
 *
 *  stype              data                           indices              indptr
 *  SO_STYPE_DEFAULT   the values, shape[0..ndim)     NULL                 NULL
 *  SO_STYPE_CSR       nnz values                     nnz column indices   shape[0] + 1 offsets
 *  SO_STYPE_ROW_SPARSE nnz x shape[1..] values       nnz row indices      NULL
 *
 * csr: indptr[0] = 0, indptr nondecreasing, indptr[shape[0]] = nnz, column indices of a
 * row strictly increasing and in [0, shape[1]). row_sparse: row indices strictly
 * increasing and in [0, shape[0]). Inputs always satisfy this (they are checked at the
 * boundary); sparse outputs a kernel builds must too (they are checked after the kernel).
 * Index arrays of inputs are shared with other arrays: never write them.
 */
typedef struct so_array {
  uint32_t struct_size;
  uint32_t abi_version;
  int32_t stype;       /* SO_STYPE_* */
  int32_t dtype;       /* SO_DTYPE_* of the values */
  int32_t index_dtype; /* SO_DTYPE_INT32 or SO_DTYPE_INT64 (indices and indptr); -1 for dense */
  int32_t ndim;        /* 0 .. SO_MAX_NDIM; csr: 2 */
  int64_t shape[SO_MAX_NDIM];
  int64_t nnz;         /* dense: number of elements; csr: stored values; row_sparse: stored rows;
                          -1 for a sparse output not yet allocated (see so_context.alloc_output) */
  void* data;
  void* indices;
  void* indptr;
  int32_t device_type; /* SO_DEVICE_* */
  int32_t device_id;
} so_array;

/* ---- parameters -------------------------------------------------------------------------- */
/* Parameter types. Values always arrive as strings in a canonical form: ints in decimal,
   floats as Python's repr (round-trips exactly through strtod), bools as "1" / "0",
   shapes as "(2, 3)"; the host parses and validates them against the declaration first. */
#define SO_PARAM_STRING 0
#define SO_PARAM_INT 1
#define SO_PARAM_FLOAT 2
#define SO_PARAM_BOOL 3
#define SO_PARAM_SHAPE 4

typedef struct so_param_decl {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* name;          /* an ASCII identifier */
  int32_t type;              /* SO_PARAM_* */
  const char* default_value; /* NULL: a required parameter */
  const char* doc;           /* may be NULL */
} so_param_decl;

/* The parameters of one call: every declared parameter, in declaration order, with the
   caller's value or the default. */
typedef struct so_params {
  uint32_t struct_size;
  uint32_t abi_version;
  int32_t count;
  const char* const* keys;
  const char* const* values;
} so_params;

/* The value of parameter `key`, or NULL when the op declares no such parameter. */
static inline const char* so_param(const so_params* p, const char* key) {
  for (int32_t i = 0; p != NULL && i < p->count; ++i)
    if (strcmp(p->keys[i], key) == 0) return p->values[i];
  return NULL;
}
static inline double so_param_float(const so_params* p, const char* key, double fallback) {
  const char* v = so_param(p, key);
  return v != NULL ? strtod(v, NULL) : fallback;
}
static inline int64_t so_param_int(const so_params* p, const char* key, int64_t fallback) {
  const char* v = so_param(p, key);
  return v != NULL ? (int64_t)strtoll(v, NULL, 10) : fallback;
}
static inline int so_param_bool(const so_params* p, const char* key, int fallback) {
  const char* v = so_param(p, key);
  return v != NULL ? (v[0] == '1') : fallback;
}

/* ---- inference --------------------------------------------------------------------------- */
typedef struct so_shape {
  uint32_t struct_size;
  uint32_t abi_version;
  int32_t ndim; /* -1 until the callback sets it */
  int32_t reserved;
  int64_t dims[SO_MAX_NDIM];
} so_shape;

/* Output shapes from input shapes. Optional: without it every input must have one shape,
   which the outputs take. Fill ndim and dims of each of the n_out outputs. */
typedef int32_t (*so_infer_shape_fn)(const so_params* params, int32_t n_in, const so_shape* in,
                                     int32_t n_out, so_shape* out, so_error* err);
/* Output dtypes (SO_DTYPE_*) from input dtypes; `out` arrives holding the first input's
   dtype. Optional: without it every input must have one dtype, which the outputs take. */
typedef int32_t (*so_infer_type_fn)(const so_params* params, int32_t n_in, const int32_t* in,
                                    int32_t n_out, int32_t* out, so_error* err);
/* Output storage types (SO_STYPE_*, not ANY) from input storage types; `out` arrives
   holding SO_STYPE_DEFAULT. Optional: without it every output is dense. */
typedef int32_t (*so_infer_stype_fn)(const so_params* params, int32_t n_in, const int32_t* in,
                                     int32_t n_out, int32_t* out, so_error* err);

/* ---- resources: what a kernel may ask the host for --------------------------------------- */
#define SO_RESOURCE_WORKSPACE 1u /* ctx->workspace may be called */
#define SO_RESOURCE_RANDOM 2u    /* ctx->seed holds a fresh seed each call */

typedef struct so_context {
  uint32_t struct_size;
  uint32_t abi_version;
  int32_t device_type; /* SO_DEVICE_* the kernel runs on */
  int32_t device_id;
  void* stream;        /* SO_DEVICE_GPU: the cudaStream_t to launch on (never synchronise it
                          unless you must); NULL on the cpu */
  uint64_t seed;       /* SO_RESOURCE_RANDOM: drawn from sparse_ops.random's generator, so
                          sparse_ops.random.seed(n) makes runs repeatable; else 0 */
  int32_t is_train;    /* 1 inside autograd.train_mode() */
  int32_t reserved;
  void* host;          /* opaque: pass it back to the callbacks below */
  /* Temporary memory of nbytes (64-byte aligned) on the kernel's device, valid until the
     kernel returns; NULL on failure (the host's message is then kept for the error). Needs
     SO_RESOURCE_WORKSPACE. */
  void* (*workspace)(void* host, uint64_t nbytes);
  /* Give sparse output number `output` (an index into the kernel's outputs) its arrays once
     the kernel knows its size: nnz values for a csr (and shape[0] + 1 indptr), nnz rows for
     a row_sparse; index_dtype SO_DTYPE_INT32 or SO_DTYPE_INT64. Updates *out (pass
     &outputs[output]): data, indices, indptr, nnz and index_dtype. Returns SO_OK or
     SO_ERR_RESOURCE (then return it: the host's message is kept). Memory is the host's:
     never free it. */
  int32_t (*alloc_output)(void* host, int32_t output, int64_t nnz, int32_t index_dtype, so_array* out);
} so_context;

/* ---- kernels ----------------------------------------------------------------------------- */
/*
 * A forward kernel. `in` holds the op's arguments followed by its auxiliary states
 * (n_in = n_arguments + n_aux; aux states are updated in place). `out` holds the outputs:
 * dense outputs and outputs of SO_STYPE_DEFAULT arrive allocated (write every element);
 * sparse outputs arrive with nnz = -1 and NULL pointers, and the kernel calls
 * ctx->alloc_output once it knows their size (nnz 0 included), then fills them. The host
 * refuses, naming the op and the library, a call that returns SO_OK with a sparse output
 * never allocated or after a refused callback, and checks every sparse output in full
 * (index ranges, sorted unique columns, a monotone indptr) before anything reads it.
 */
typedef int32_t (*so_kernel_fn)(const so_context* ctx, const so_params* params, int32_t n_in,
                                const so_array* in, int32_t n_out, so_array* out, so_error* err);

typedef struct so_kernel {
  uint32_t struct_size;
  uint32_t abi_version;
  int32_t device_type;   /* SO_DEVICE_CPU or SO_DEVICE_GPU */
  /* NULL: a dense kernel (every input and output SO_STYPE_DEFAULT; inputs of other storage
     types are densified by the host's fallback, with a warning). Otherwise one SO_STYPE_*
     (or SO_STYPE_ANY) per input, n_in of them: the kernel runs for inputs of those storage
     types. */
  const int32_t* stypes;
  int32_t n_stypes;
  int32_t reserved;
  so_kernel_fn fn;
} so_kernel;

/* ---- gradients ---------------------------------------------------------------------------- */
/* What a gradient term reads: the op's inputs, its outputs, and the gradients of its outputs.
   These references also declare the backward dependency: the tape keeps exactly the inputs
   and outputs some term names.
   SO_OUT_GRAD(i) arrives in whatever storage type the gradient flowing into output i has:
   dense for `y.backward()` (a head of ones) and for most consumers, row_sparse or csr when
   the op consuming output i gives such a gradient (dot(csr.T, g) is row_sparse), and zeros
   of output i's own storage type when nothing used output i. It is not converted to the
   output's storage type: the gradient op is called on it like any op, so a storage-aware
   kernel of that op matching its storage type runs, or else its dense kernel on a densified
   copy (the storage fallback, with a StorageFallbackWarning). */
#define SO_INPUT(i) ((int32_t)(i))
#define SO_OUTPUT(i) ((int32_t)(0x10000 | (i)))
#define SO_OUT_GRAD(i) ((int32_t)(0x20000 | (i)))

/*
 * The gradient of input `input` is op `op` (an op of this library or any op in the
 * table, looked up once the library has loaded, so a graph recorded before a reload is
 * differentiated by the version it ran) applied to `args` with parameters `param_keys` /
 * `param_values`, plus this op's own parameters when forward_params is 1. Its first output
 * is the gradient. Two terms for one input add up. An input with no term has a zero
 * gradient (a relu backward's data, a mask): declare a term for every input whose
 * derivative is not zero; opcheck's gradient check finds one missing.
 */
typedef struct so_gradient {
  uint32_t struct_size;
  uint32_t abi_version;
  int32_t input;
  int32_t forward_params;
  const char* op;
  int32_t n_args;
  int32_t n_params;
  const int32_t* args;            /* SO_INPUT / SO_OUTPUT / SO_OUT_GRAD, n_args of them */
  const char* const* param_keys;  /* n_params of each */
  const char* const* param_values;
} so_gradient;

/* ---- samples (for opcheck) ----------------------------------------------------------------- */
/* One set of inputs (on the cpu; device fields ignored) and parameters that opcheck and the
   gradient checks run the op on. n_inputs must equal the op's n_arguments + n_aux (checked
   before any input is read). The inputs are copied when the library loads, so each array's
   shape, nnz and pointers must describe memory the library really holds: a sample larger
   than its data is read out of bounds there (and may crash the process). */
typedef struct so_sample {
  uint32_t struct_size;
  uint32_t abi_version;
  int32_t n_inputs;
  int32_t n_params;
  const so_array* inputs;
  const char* const* param_keys;
  const char* const* param_values;
} so_sample;

/* ---- opcheck skips (ABI 1.1) ------------------------------------------------------------------ */
/* One check that opcheck and `sparse-ops check` skip for this op, and why (the reason is
   printed with the report). `check` is one of opcheck's checks: "inference", "format",
   "determinism", "reference", "gradient", "gpu", or "gradient:<input name>" to leave one
   floating input out of the gradient check (an input that is data, such as indices held as
   floats). Any other name refuses the library when it loads, naming the op and the checks.

       static const so_opcheck_skip skips[] = {
           {SO_HEADER(so_opcheck_skip), "gradient:ids", "ids are data: no gradient by design"}};
       op.n_opcheck_skips = 1; op.opcheck_skips = skips; */
typedef struct so_opcheck_skip {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* check;
  const char* reason;               /* not NULL, not empty */
} so_opcheck_skip;

/* ---- the op declaration -------------------------------------------------------------------- */
#define SO_OP_CONSTANT 1u /* outputs carry no gradient (an integer result, a random draw) */

/* How sparse_ops.dask runs the op over row blocks of its inputs. */
#define SO_PARTITION_NONE 0 /* it does not: refused */
#define SO_PARTITION_ROWS 1 /* output row block i depends only on row block i of every input */
#define SO_PARTITION_SUM 2  /* the output is the sum of the op over row blocks of every input */

typedef struct so_op_decl {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* name;                 /* an ASCII identifier, unique in the table */
  const char* doc;                  /* may be NULL */
  int32_t n_arguments;
  int32_t n_outputs;
  const char* const* arguments;     /* input names */
  const char* const* outputs;       /* output names */
  int32_t n_aux;
  int32_t n_params;
  const char* const* aux_states;    /* inputs after the arguments that kernels update in place */
  const so_param_decl* params;
  so_infer_shape_fn infer_shape;    /* each may be NULL: see the typedefs */
  so_infer_type_fn infer_type;
  so_infer_stype_fn infer_storage_type;
  int32_t n_kernels;
  int32_t n_gradients;
  const so_kernel* kernels;
  /* n_gradients == 0 and no SO_OP_CONSTANT: not differentiable. Differentiating through the
     op is an error naming it (its outputs are not constants: a gradient is simply missing),
     and opcheck skips its gradient check with the reason "not differentiable (no gradients
     declared)". SO_OP_CONSTANT instead says the outputs carry no gradient at all. */
  const so_gradient* gradients;
  uint32_t resources;               /* SO_RESOURCE_* bits */
  uint32_t flags;                   /* SO_OP_* bits */
  int32_t n_samples;
  int32_t partition;                /* SO_PARTITION_*: how sparse_ops.dask runs it on row blocks */
  const so_sample* samples;
#if SPARSE_OPS_TARGET_MINOR >= 1
  /* ABI 1.1. A host reads these only when struct_size covers them, so a library built for
     1.0 (a smaller struct_size) keeps loading. */
  /* NULL, or an op computing the same outputs from the same inputs (a built-in such as
     "dot", or another op of this library; looked up when the library has loaded, refused
     then if missing): opcheck runs it on each sample's inputs, densified, and compares its
     outputs with this op's. With reference_forward_params = 1 it gets this call's
     parameters (it must accept them), else none. */
  const char* reference;
  int32_t reference_forward_params;
  int32_t n_opcheck_skips;
  const so_opcheck_skip* opcheck_skips; /* checks opcheck skips, each with its reason */
  /* NULL, or one capacity rule per output: an upper bound of the output's stored entries
     (values of a csr output, rows of a row_sparse one) that frameworks preallocating their
     buffers use (jax.jit: without a rule a call must pass max_nnz=). k >= 0: at most the
     stored entries of input k (a dense input counts as fully stored); SO_CAPACITY_NONE: no
     rule for that output. Every bound is capped at the output's dense size. */
  const int32_t* capacity_like;
#endif
#if SPARSE_OPS_TARGET_MINOR >= 2
  /* ABI 1.2. With a partition rule: the indices of the inputs sparse_ops.dask cuts into row
     blocks; every other input goes whole to every block (a weight, the dense operand of a
     product). 0 / NULL: every input is cut. */
  int32_t n_partition_args;
  const int32_t* partition_args;
#endif
} so_op_decl;

#define SO_CAPACITY_NONE (-1)

/* ---- the entry point -------------------------------------------------------------------- */
typedef struct so_registrar {
  uint32_t struct_size;
  uint32_t abi_version;             /* the host's ABI version */
  void* host;
  /* Declare one op; returns SO_OK, or an error (a bad declaration, a name already taken)
     that init should return as it is. */
  int32_t (*register_op)(void* host, const so_op_decl* op, so_error* err);
  const char* library_path;         /* the file being loaded */
} so_registrar;

/*
 * Every library defines, once:
 *
 *   SPARSE_OPS_LIBRARY("mylib 1.0");   // the ABI version symbol, and a version string
 *
 *   SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version,
 *                                             const so_registrar* reg, so_error* err) {
 *     ... reg->register_op(reg->host, &decl, err) for each op; return SO_OK;
 *   }
 *
 * The host reads sparse_ops_library_abi_version before calling anything: a library built
 * for another major version, or for a newer minor one, is refused with both versions named.
 * init runs once per load; if it returns an error, every op it registered is removed again.
 */
#define SPARSE_OPS_LIBRARY(version_string)                                              \
  SO_EXPORT const uint32_t sparse_ops_library_abi_version = SPARSE_OPS_ABI_VERSION;     \
  SO_EXPORT const char* const sparse_ops_library_version = version_string

typedef int32_t (*so_library_init_fn)(uint32_t host_abi_version, const so_registrar* registrar, so_error* err);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* ---- an example ------------------------------------------------------------------------------ */
/* A complete library of two ops, compiled by sparse-ops' tests (as C99 and C++11, with -Wall
   -Wextra -Werror) by defining SPARSE_OPS_HEADER_EXAMPLE in a file including this header, then
   loaded and passed through `sparse-ops check`:
   - ex_negate(x) = -x: its gradient is itself on the output's gradient; opcheck compares its
     outputs with the built-in op `negative` (its reference);
   - ex_step(x) = 1 where x > 0, else 0: no gradients and no SO_OP_CONSTANT, so it is not
     differentiable and opcheck skips its gradient check, saying why. */
#ifdef SPARSE_OPS_HEADER_EXAMPLE
SPARSE_OPS_LIBRARY("sparse_ops.h example 1.0");

static int32_t ex_kernel(const so_context* ctx, const so_params* params, int32_t n_in, const so_array* in,
                         int32_t n_out, so_array* out, so_error* err, int step) {
  const double* x = (const double*)in[0].data;
  double* o = (double*)out[0].data;
  (void)ctx; (void)params; (void)n_in; (void)n_out;
  if (in[0].dtype != SO_DTYPE_FLOAT64)
    return so_error_set(err, SO_ERR_UNSUPPORTED, "float64 only, not dtype code %d", (int)in[0].dtype);
  for (int64_t i = 0; i < out[0].nnz; ++i) o[i] = step ? (x[i] > 0 ? 1.0 : 0.0) : -x[i];
  return SO_OK;
}
static int32_t ex_negate(const so_context* ctx, const so_params* params, int32_t n_in, const so_array* in,
                         int32_t n_out, so_array* out, so_error* err) {
  return ex_kernel(ctx, params, n_in, in, n_out, out, err, 0);
}
static int32_t ex_step(const so_context* ctx, const so_params* params, int32_t n_in, const so_array* in,
                       int32_t n_out, so_array* out, so_error* err) {
  return ex_kernel(ctx, params, n_in, in, n_out, out, err, 1);
}

SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  static const char* const args[] = {"x"};
  static const char* const outs[] = {"out"};
  static const int32_t grad_args[] = {SO_OUT_GRAD(0)};
  static const double values[] = {1.5, -2.0, 0.5, 4.0, -0.25, 3.0};
  so_kernel kernels[2];
  so_gradient grad;
  so_array x;
  so_sample sample;
  so_op_decl op;
  int32_t status;
  (void)host_abi_version;

  SO_INIT(kernels[0]);
  kernels[0].device_type = SO_DEVICE_CPU; /* stypes NULL: a dense kernel */
  kernels[0].fn = ex_negate;
  kernels[1] = kernels[0];
  kernels[1].fn = ex_step;
  SO_INIT(grad); /* d(-x)/dx applied to g: ex_negate(g) */
  grad.input = 0;
  grad.op = "ex_negate";
  grad.n_args = 1;
  grad.args = grad_args;
  SO_INIT(x); /* a dense 2 x 3 float64 sample */
  x.stype = SO_STYPE_DEFAULT;
  x.dtype = SO_DTYPE_FLOAT64;
  x.index_dtype = -1;
  x.ndim = 2;
  x.shape[0] = 2;
  x.shape[1] = 3;
  x.nnz = 6;
  x.data = (void*)values;
  x.device_type = SO_DEVICE_CPU;
  SO_INIT(sample);
  sample.n_inputs = 1;
  sample.inputs = &x;

  SO_INIT(op); /* every field not set below is 0 / NULL */
  op.name = "ex_negate";
  op.doc = "-x";
  op.n_arguments = 1; op.arguments = args;
  op.n_outputs = 1; op.outputs = outs;
  op.n_kernels = 1; op.kernels = &kernels[0];
  op.n_gradients = 1; op.gradients = &grad;
  op.n_samples = 1; op.samples = &sample;
  op.partition = SO_PARTITION_ROWS;
#if SPARSE_OPS_TARGET_MINOR >= 1
  op.reference = "negative"; /* opcheck compares with the built-in (an ABI 1.1 field) */
#endif
  if ((status = reg->register_op(reg->host, &op, err)) != SO_OK) return status;

  op.name = "ex_step";
  op.doc = "1 where x > 0, else 0";
  op.kernels = &kernels[1];
  op.n_gradients = 0; op.gradients = NULL; /* not differentiable */
#if SPARSE_OPS_TARGET_MINOR >= 1
  op.reference = NULL;
#endif
  return reg->register_op(reg->host, &op, err);
}
#endif /* SPARSE_OPS_HEADER_EXAMPLE */

#endif /* SPARSE_OPS_H */
