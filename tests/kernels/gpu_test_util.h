// Helpers for the kernel tests (label gpu): skip without a CUDA device, device buffers that are
// poisoned (NaN / -1 bytes) before each kernel runs, and fresh random inputs with the seed printed.
// Outputs are compared with tests/common/compare.h.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/core/half.h"
#include "kernels/cuda_check.h"

namespace specgen::kernels::testing {

inline bool HaveCudaDevice() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SPECGEN_SKIP_WITHOUT_GPU()                                      \
  do {                                                                  \
    if (!::specgen::kernels::testing::HaveCudaDevice()) {               \
      GTEST_SKIP() << "no CUDA device";                                 \
    }                                                                   \
  } while (0)

#define CUDA_OK(expr) ASSERT_TRUE(SPECGEN_CUDA_STATUS(expr).ok()) << SPECGEN_CUDA_STATUS(expr)

// Device memory for n elements of T, freed on destruction.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
    Poison();
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return static_cast<T*>(ptr_); }
  size_t size() const { return n_; }
  // All bytes 0xFF: NaN for floats, -1 for ints: an unwritten output cannot pass.
  void Poison() {
    if (ptr_) cudaMemset(ptr_, 0xFF, n_ * sizeof(T));
  }
  void Upload(const std::vector<T>& host) {
    cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    cudaDeviceSynchronize();
    cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t n_;
};

// A generator seeded fresh for every test, the seed printed; $SPECGEN_TEST_SEED replays a failure's
// inputs.
inline std::mt19937_64 FreshRng() {
  const char* env = std::getenv("SPECGEN_TEST_SEED");
  const bool replay = env != nullptr && *env != '\0';
  const uint64_t seed = replay ? std::strtoull(env, nullptr, 10)
                               : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::printf("[ random seed ] %llu%s\n", static_cast<unsigned long long>(seed),
              replay ? " (SPECGEN_TEST_SEED)" : "");
  return std::mt19937_64(seed);
}

inline std::vector<float> RandomNormal(std::mt19937_64& rng, size_t n, float stddev = 1.f) {
  std::normal_distribution<float> d(0.f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Rounds to bf16 (returned as raw bits and as the exactly equal fp32 values).
inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBf16(v[i]);
  return out;
}
inline std::vector<float> Bf16Values(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16ToF32(v[i]);
  return out;
}

// Rounds to f16 (as raw bits), and the exactly equal fp32 values.
inline std::vector<uint16_t> ToF16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToF16(v[i]);
  return out;
}
inline std::vector<float> F16Values(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F16ToF32(v[i]);
  return out;
}

}  // namespace specgen::kernels::testing
