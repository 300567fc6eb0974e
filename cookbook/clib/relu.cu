/*
 * relu.cu: relu with a cpu kernel and a CUDA gpu kernel, and its backward op.
 *
 *   c_relu(data)                      out = max(data, 0)
 *   c_relu_backward(out_grad, data)   out = out_grad where data > 0, else 0
 *
 * Dense float32 and float64 arrays of any shape. The gradient of c_relu is
 * c_relu_backward(out_grad, data); c_relu_backward is linear in out_grad with the same
 * mask, so its own gradient for out_grad is c_relu_backward again (for data it is zero
 * almost everywhere: no term).
 *
 * One source, two builds:
 *   nvcc -shared -Xcompiler -fPIC -O2 -I"$(sparse-ops include-dir)" relu.cu -o librelu.so
 *       cpu and gpu kernels (the gpu kernels launch on ctx->stream)
 *   cc -x c -shared -fPIC -O2 -I"$(sparse-ops include-dir)" relu.cu -o librelu.so
 *       cpu kernels only, where there is no nvcc: everything CUDA sits in #ifdef __CUDACC__
 * The file is valid C and valid CUDA C++: pointers from void* are cast explicitly.
 */
#include "sparse_ops.h"

#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif

SPARSE_OPS_LIBRARY("cookbook relu 1.0");

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

static int32_t unsupported(so_error* err, int32_t dtype) {
  return so_error_set(err, SO_ERR_UNSUPPORTED, "%s is not supported: float32 and float64 only", dtype_name(dtype));
}

/* ---- cpu kernels --------------------------------------------------------------------------- */
/* Dense kernels: every array C-contiguous, nnz elements each, the output allocated. */
static int32_t relu_cpu(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                        int32_t n_out, so_array* out, so_error* err) {
  (void)ctx; (void)p; (void)n_in; (void)n_out;
  int64_t n = out[0].nnz;
  if (in[0].dtype == SO_DTYPE_FLOAT32) {
    const float* x = (const float*)in[0].data;
    float* y = (float*)out[0].data;
    /* NaN stays NaN, as in NumPy's maximum(x, 0): every comparison with NaN is false, so
       x > 0 alone would turn it into 0; x != x is true for NaN only */
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f || x[i] != x[i] ? x[i] : 0.0f;
    return SO_OK;
  }
  if (in[0].dtype == SO_DTYPE_FLOAT64) {
    const double* x = (const double*)in[0].data;
    double* y = (double*)out[0].data;
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.0 || x[i] != x[i] ? x[i] : 0.0;
    return SO_OK;
  }
  return unsupported(err, in[0].dtype);
}

static int32_t relu_backward_cpu(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                                 int32_t n_out, so_array* out, so_error* err) {
  (void)ctx; (void)p; (void)n_in; (void)n_out;
  int64_t n = out[0].nnz;
  if (in[0].dtype == SO_DTYPE_FLOAT32) {
    const float* g = (const float*)in[0].data;
    const float* x = (const float*)in[1].data;
    float* dx = (float*)out[0].data;
    for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? g[i] : 0.0f;
    return SO_OK;
  }
  if (in[0].dtype == SO_DTYPE_FLOAT64) {
    const double* g = (const double*)in[0].data;
    const double* x = (const double*)in[1].data;
    double* dx = (double*)out[0].data;
    for (int64_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0 ? g[i] : 0.0;
    return SO_OK;
  }
  return unsupported(err, in[0].dtype);
}

/* ---- gpu kernels (nvcc builds only) ---------------------------------------------------------- */
#ifdef __CUDACC__
/* Grid-stride loops: any n runs with a bounded grid. */
template <typename T>
__global__ void relu_device(const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = x[i] > T(0) || x[i] != x[i] ? x[i] : T(0);
}

template <typename T>
__global__ void relu_backward_device(const T* g, const T* x, T* dx, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dx[i] = x[i] > T(0) ? g[i] : T(0);
}

static const int THREADS = 256;

static int blocks_for(int64_t n) {
  int64_t blocks = (n + THREADS - 1) / THREADS;
  return (int)(blocks < 4096 ? blocks : 4096);
}

/* A launch reports its errors afterwards, through cudaGetLastError. The kernel runs
   asynchronously on ctx->stream: the host orders later work on the same stream after it. */
static int32_t launched(so_error* err, const char* what) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    return so_error_set(err, SO_ERR_INTERNAL, "%s launch failed: %s", what, cudaGetErrorString(status));
  return SO_OK;
}

static int32_t relu_gpu(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                        int32_t n_out, so_array* out, so_error* err) {
  (void)p; (void)n_in; (void)n_out;
  int64_t n = out[0].nnz;
  cudaStream_t stream = (cudaStream_t)ctx->stream;
  if (n == 0) return SO_OK; /* a grid of 0 blocks is a launch error */
  if (in[0].dtype == SO_DTYPE_FLOAT32)
    relu_device<float><<<blocks_for(n), THREADS, 0, stream>>>((const float*)in[0].data, (float*)out[0].data, n);
  else if (in[0].dtype == SO_DTYPE_FLOAT64)
    relu_device<double><<<blocks_for(n), THREADS, 0, stream>>>((const double*)in[0].data, (double*)out[0].data, n);
  else
    return unsupported(err, in[0].dtype);
  return launched(err, "relu");
}

static int32_t relu_backward_gpu(const so_context* ctx, const so_params* p, int32_t n_in, const so_array* in,
                                 int32_t n_out, so_array* out, so_error* err) {
  (void)p; (void)n_in; (void)n_out;
  int64_t n = out[0].nnz;
  cudaStream_t stream = (cudaStream_t)ctx->stream;
  if (n == 0) return SO_OK;
  if (in[0].dtype == SO_DTYPE_FLOAT32)
    relu_backward_device<float><<<blocks_for(n), THREADS, 0, stream>>>(
        (const float*)in[0].data, (const float*)in[1].data, (float*)out[0].data, n);
  else if (in[0].dtype == SO_DTYPE_FLOAT64)
    relu_backward_device<double><<<blocks_for(n), THREADS, 0, stream>>>(
        (const double*)in[0].data, (const double*)in[1].data, (double*)out[0].data, n);
  else
    return unsupported(err, in[0].dtype);
  return launched(err, "relu_backward");
}
#endif /* __CUDACC__ */

/* ---- inference ----------------------------------------------------------------------------- */
/* c_relu_backward: out_grad and data have one shape, the output's. (c_relu needs no shape
   callback: with one input, the default rule gives the output its shape.) */
static int32_t backward_shape(const so_params* p, int32_t n_in, const so_shape* in, int32_t n_out, so_shape* out,
                              so_error* err) {
  (void)p; (void)n_in; (void)n_out;
  int same = in[0].ndim == in[1].ndim;
  for (int32_t d = 0; same && d < in[0].ndim; ++d) same = in[0].dims[d] == in[1].dims[d];
  if (!same) return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "out_grad and data must have one shape");
  out[0] = in[0];
  return SO_OK;
}

/* float32 or float64, every input alike; refusing here names the problem before any kernel runs. */
static int32_t float_type(const so_params* p, int32_t n_in, const int32_t* in, int32_t n_out, int32_t* out,
                          so_error* err) {
  (void)p; (void)n_out;
  for (int32_t i = 0; i < n_in; ++i) {
    if (in[i] != SO_DTYPE_FLOAT32 && in[i] != SO_DTYPE_FLOAT64) return unsupported(err, in[i]);
    if (in[i] != in[0])
      return so_error_set(err, SO_ERR_INVALID_ARGUMENT, "the inputs are %s and %s: give both the same dtype",
                          dtype_name(in[0]), dtype_name(in[i]));
  }
  out[0] = in[0];
  return SO_OK;
}

/* ---- samples --------------------------------------------------------------------------------- */
/* Values at least 0.1 away from relu's kink at 0, so finite differences never straddle it. */
static double X23[6] = {-1.5, 0.5, 2.0, -0.25, 0.75, -3.0};
static double G23[6] = {0.3, -1.2, 0.8, 1.1, -0.4, 0.6};
static float X4f[4] = {-2.0f, 1.5f, -0.5f, 0.25f};
static double X0[1] = {0.0}; /* an empty array: its data is never read */

static so_array dense(void* data, int32_t dtype, int32_t ndim, int64_t d0, int64_t d1) {
  so_array a = {SO_HEADER(so_array), SO_STYPE_DEFAULT, dtype, -1, ndim, {d0, d1}, ndim == 1 ? d0 : d0 * d1,
                data, NULL, NULL, SO_DEVICE_CPU, 0};
  return a;
}

/* ---- registration ---------------------------------------------------------------------------- */
/* SO_EXPORT gives the entry point C linkage in the C++ that nvcc compiles too. */
SO_EXPORT int32_t sparse_ops_library_init(uint32_t host_abi_version, const so_registrar* reg, so_error* err) {
  (void)host_abi_version;
  int32_t status;
  static const char* const relu_args[] = {"data"};
  static const char* const backward_args[] = {"out_grad", "data"};
  static const char* const outputs[] = {"out"};

  so_kernel relu_kernels[] = {
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, relu_cpu},
#ifdef __CUDACC__
      {SO_HEADER(so_kernel), SO_DEVICE_GPU, NULL, 0, 0, relu_gpu},
#endif
  };
  so_kernel backward_kernels[] = {
      {SO_HEADER(so_kernel), SO_DEVICE_CPU, NULL, 0, 0, relu_backward_cpu},
#ifdef __CUDACC__
      {SO_HEADER(so_kernel), SO_DEVICE_GPU, NULL, 0, 0, relu_backward_gpu},
#endif
  };
  int32_t n_kernels = (int32_t)(sizeof relu_kernels / sizeof relu_kernels[0]);

  /* d data = c_relu_backward(d out, data): the tape keeps data, not the output. */
  static const int32_t relu_grad_args[] = {SO_OUT_GRAD(0), SO_INPUT(0)};
  so_gradient relu_grads[] = {{SO_HEADER(so_gradient), 0, 0, "c_relu_backward", 2, 0, relu_grad_args, NULL, NULL}};
  static const int32_t backward_grad_args[] = {SO_OUT_GRAD(0), SO_INPUT(1)};
  so_gradient backward_grads[] = {
      {SO_HEADER(so_gradient), 0, 0, "c_relu_backward", 2, 0, backward_grad_args, NULL, NULL}};

  so_array x23 = dense(X23, SO_DTYPE_FLOAT64, 2, 2, 3), g23 = dense(G23, SO_DTYPE_FLOAT64, 2, 2, 3);
  so_array x4f = dense(X4f, SO_DTYPE_FLOAT32, 1, 4, 0), x0 = dense(X0, SO_DTYPE_FLOAT64, 1, 0, 0);
  so_array relu_in[] = {x23, x4f, x0};
  so_array backward_in[] = {g23, x23};
  so_sample relu_samples[] = {
      {SO_HEADER(so_sample), 1, 0, &relu_in[0], NULL, NULL},
      {SO_HEADER(so_sample), 1, 0, &relu_in[1], NULL, NULL},
      {SO_HEADER(so_sample), 1, 0, &relu_in[2], NULL, NULL},
  };
  so_sample backward_samples[] = {{SO_HEADER(so_sample), 2, 0, backward_in, NULL, NULL}};

  /* Row blocks of the input give row blocks of the output: sparse_ops.dask may split it. */
  so_op_decl relu = {SO_HEADER(so_op_decl), "c_relu", "max(data, 0) on dense float32 / float64 arrays",
                     1, 1, relu_args, outputs, 0, 0, NULL, NULL,
                     NULL, float_type, NULL, n_kernels, 1, relu_kernels, relu_grads,
                     0, 0, 3, SO_PARTITION_ROWS, relu_samples,
                     NULL, 0, 0, NULL, NULL, /* ABI 1.1: no reference op, no opcheck skips, no capacity rule */
                     0, NULL};               /* ABI 1.2: every input is cut into row blocks */
  so_op_decl backward = {SO_HEADER(so_op_decl), "c_relu_backward", "out_grad where data > 0, else 0",
                         2, 1, backward_args, outputs, 0, 0, NULL, NULL,
                         backward_shape, float_type, NULL, n_kernels, 1, backward_kernels, backward_grads,
                         0, 0, 1, SO_PARTITION_ROWS, backward_samples,
                         NULL, 0, 0, NULL, NULL, /* ABI 1.1: no reference op, no opcheck skips, no capacity rule */
                         0, NULL};               /* ABI 1.2: every input is cut into row blocks */
  if ((status = reg->register_op(reg->host, &relu, err)) != SO_OK) return status;
  return reg->register_op(reg->host, &backward, err);
}
