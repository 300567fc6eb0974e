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
#define SPARSE_OPS_ABI_MAJOR 1
#define SPARSE_OPS_ABI_MINOR 0
/* (major << 16) | minor, as stored in every struct's abi_version field */
#define SPARSE_OPS_ABI_VERSION ((uint32_t)((SPARSE_OPS_ABI_MAJOR << 16) | SPARSE_OPS_ABI_MINOR))

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

/* The first two fields of every struct below, for initialisers: { SO_HEADER(so_array), ... } */
#define SO_HEADER(type) (uint32_t)sizeof(type), SPARSE_OPS_ABI_VERSION

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
  const char* name;          /* an identifier */
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
   and outputs some term names. */
#define SO_INPUT(i) ((int32_t)(i))
#define SO_OUTPUT(i) ((int32_t)(0x10000 | (i)))
#define SO_OUT_GRAD(i) ((int32_t)(0x20000 | (i)))

/*
 * The gradient of input `input` is op `op` (an op of this library or any op in the
 * table, looked up when backward runs) applied to `args` with parameters `param_keys` /
 * `param_values`, plus this op's own parameters when forward_params is 1. Its first output
 * is the gradient. An input with no term gets no gradient; two terms for one input add up.
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
   gradient checks run the op on. */
typedef struct so_sample {
  uint32_t struct_size;
  uint32_t abi_version;
  int32_t n_inputs;
  int32_t n_params;
  const so_array* inputs;
  const char* const* param_keys;
  const char* const* param_values;
} so_sample;

/* ---- the op declaration -------------------------------------------------------------------- */
#define SO_OP_CONSTANT 1u /* outputs carry no gradient (an integer result, a random draw) */

/* How sparse_ops.dask runs the op over row blocks of its inputs. */
#define SO_PARTITION_NONE 0 /* it does not: refused */
#define SO_PARTITION_ROWS 1 /* output row block i depends only on row block i of every input */
#define SO_PARTITION_SUM 2  /* the output is the sum of the op over row blocks of every input */

typedef struct so_op_decl {
  uint32_t struct_size;
  uint32_t abi_version;
  const char* name;                 /* an identifier, unique in the table */
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
  const so_gradient* gradients;     /* n_gradients == 0 and no SO_OP_CONSTANT: not differentiable */
  uint32_t resources;               /* SO_RESOURCE_* bits */
  uint32_t flags;                   /* SO_OP_* bits */
  int32_t n_samples;
  int32_t partition;                /* SO_PARTITION_*: how sparse_ops.dask runs it on row blocks */
  const so_sample* samples;
} so_op_decl;

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
 * for another major version is refused with both versions named. init runs once per load;
 * if it returns an error, every op it registered is removed again.
 */
#define SPARSE_OPS_LIBRARY(version_string)                                              \
  SO_EXPORT const uint32_t sparse_ops_library_abi_version = SPARSE_OPS_ABI_VERSION;     \
  SO_EXPORT const char* const sparse_ops_library_version = version_string

typedef int32_t (*so_library_init_fn)(uint32_t host_abi_version, const so_registrar* registrar, so_error* err);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SPARSE_OPS_H */
