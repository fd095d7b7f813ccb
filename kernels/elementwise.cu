#include "kernels/device_util.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/programmatic_launch.cuh"

namespace specgen::kernels {
namespace {

constexpr int kThreads = 256;

// The kernels here call LetDependentsLaunch() first: the Backend's RMSNorm and GEMV that follow them
// are launched with programmatic dependent launch and fetch their weights during these kernels (they
// wait for them to end before reading what they wrote; see decode_fused.cuh).

__global__ void SwiGluKernel(const float* gate, const float* up, float* out, int64_t n) {
  LetDependentsLaunch();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = portable::SiluMul(g, up[i]);
  }
}

__global__ void AddKernel(const float* a, const float* b, float* out, int64_t n) {
  LetDependentsLaunch();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

// One block per token.
__global__ void EmbeddingKernel(const void* __restrict__ table, ElemType table_type, int64_t vocab,
                                int dim, const int32_t* __restrict__ ids, float* __restrict__ out) {
  LetDependentsLaunch();
  const int32_t id = ids[blockIdx.x];
  float* row = out + static_cast<int64_t>(blockIdx.x) * dim;
  const bool valid = id >= 0 && id < vocab;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    row[i] = valid ? detail::LoadAsF32(table, table_type, static_cast<int64_t>(id) * dim + i) : NAN;
  }
}

unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

__global__ void StoreInt32Kernel(int32_t* dst, int32_t value) { *dst = value; }

}  // namespace

cudaError_t LaunchStoreInt32(int32_t* dst, int32_t value, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(dst != nullptr);
  StoreInt32Kernel<<<1, 1, 0, stream>>>(dst, value);
  return cudaGetLastError();
}

cudaError_t SetStoreInt32NodeArgs(cudaGraphExec_t exec, cudaGraphNode_t node, int32_t* dst, int32_t value) {
  SPECGEN_KERNEL_REQUIRE(exec != nullptr && node != nullptr && dst != nullptr);
  void* args[] = {&dst, &value};
  cudaKernelNodeParams p{};
  p.func = reinterpret_cast<void*>(StoreInt32Kernel);
  p.gridDim = dim3(1);
  p.blockDim = dim3(1);
  p.kernelParams = args;
  return cudaGraphExecKernelNodeSetParams(exec, node, &p);
}

cudaError_t LaunchSwiGlu(const float* gate, const float* up, float* out, int64_t n,
                         cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(n >= 0);
  if (n == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(gate != nullptr && up != nullptr && out != nullptr);
  SwiGluKernel<<<GridFor(n), kThreads, 0, stream>>>(gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(n >= 0);
  if (n == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(a != nullptr && b != nullptr && out != nullptr);
  AddKernel<<<GridFor(n), kThreads, 0, stream>>>(a, b, out, n);
  return cudaGetLastError();
}

cudaError_t LaunchEmbedding(const void* table, ElemType table_type, int64_t vocab, int dim,
                            const int32_t* ids, int tokens, float* out, cudaStream_t stream) {
  SPECGEN_KERNEL_REQUIRE(vocab > 0 && dim > 0 && tokens >= 0);
  if (tokens == 0) return cudaSuccess;
  SPECGEN_KERNEL_REQUIRE(table != nullptr && ids != nullptr && out != nullptr);
  EmbeddingKernel<<<tokens, kThreads, 0, stream>>>(table, table_type, vocab, dim, ids, out);
  return cudaGetLastError();
}

}  // namespace specgen::kernels
