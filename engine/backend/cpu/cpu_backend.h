// CpuBackend: the reference implementation of Backend in fp32 on the host. f32 weights are read in
// place from the caller's view, and so are the GGUF block types, kept packed: their rows are
// dequantized to fp32 when an op reads them (the same values as dequantizing at load), so a quantized
// model takes its file size in memory. f16/bf16 weights are dequantized at upload. The only rounding is
// fp32 arithmetic. Matrix products are per-row dot products with one fixed reduction order (Eigen packets
// over 16 lanes, then a fixed lane sum), not Eigen's GEMM, whose blocking and GEMV/GEMM switch change
// the summation order with the batch size: a row's result is bit-identical for any batch and any
// thread count (docs/design.md §6.6, batch invariance).
#pragma once

#include <memory>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/backend/routing_override.h"

namespace specgen {

class CpuBackend : public Backend {
 public:
  // n_threads <= 0: all hardware threads.
  explicit CpuBackend(int n_threads = 0);
  ~CpuBackend() override;

  std::string_view name() const override { return "cpu"; }
  int n_threads() const { return pool_.n_threads(); }

  absl::StatusOr<std::unique_ptr<Buffer>> NewBuffer(int64_t capacity_rows, int64_t cols) override;
  absl::StatusOr<std::unique_ptr<Buffer>> NewCacheBuffer(int64_t capacity_rows, int64_t cols,
                                                         DType type) override;
  absl::StatusOr<std::unique_ptr<Weight>> Upload(const TensorView& t, std::string_view name) override;
  // Block types stay packed in the file mapping; f32 is read in place and f16/bf16 become f32.
  DType ResidentDType(DType stored) const override { return Info(stored).quantized ? stored : DType::kF32; }
  absl::Status Write(std::span<const float> src, Buffer* dst) override;
  absl::Status Read(const Buffer& src, std::span<float> dst) override;

  absl::Status Embed(const Weight& table, std::span<const int32_t> tokens, Buffer* out) override;
  absl::Status MatMul(const Buffer& x, const Weight& w, Buffer* y) override;
  absl::Status RmsNorm(const Buffer& x, const Weight& w, int64_t group, float eps, Buffer* y) override;
  absl::Status Rope(std::span<const int32_t> positions, int64_t head_dim, float theta, RopeStyle style,
                    Buffer* x) override;
  absl::Status RopeWithFrequencies(std::span<const int32_t> positions, int64_t head_dim,
                                   std::span<const float> inv_freq, RopeStyle style, Buffer* x) override;
  bool SupportsRopeFrequencies() const override { return true; }
  bool SupportsKvRing() const override { return true; }
  absl::Status Zero(Buffer* y) override;
  absl::Status Add(const Buffer& x, Buffer* y) override;
  absl::Status SwiGlu(const Buffer& gate, const Buffer& up, Buffer* out) override;
  absl::Status CopyRows(const Buffer& src, int64_t dst_row, Buffer* dst) override;
  absl::Status Attention(const Buffer& q, const Buffer& k_cache, const Buffer& v_cache,
                         const AttentionShape& shape, std::span<const uint8_t> mask,
                         Buffer* out) override;
  absl::Status Route(const Buffer& logits, int64_t k, RouterNorm norm, Routing* routing) override;
  absl::Status RouteWith(const Buffer& logits, int64_t k, const RouterParams& p, Routing* routing) override;
  // Every ModelFeature (issue 45) is computed here.
  bool Supports(ModelFeature f) const override {
    (void)f;
    return true;
  }
  absl::Status AddBias(const Weight& b, Buffer* y) override;
  absl::Status SwiGluClamped(const Buffer& gate, const Buffer& up, float alpha, float limit, Buffer* out) override;
  absl::Status ScaleRowsBySigmoid(const Buffer& g, Buffer* y) override;
  absl::Status RopePartial(std::span<const int32_t> positions, int64_t head_dim, int64_t rope_dim,
                           std::span<const float> inv_freq, float factor, RopeStyle style, Buffer* x) override;
  absl::Status GatherRows(const Buffer& src, std::span<const int32_t> rows, Buffer* dst) override;
  absl::Status ScatterAddScaled(const Buffer& src, std::span<const int32_t> rows,
                                std::span<const float> scales, Buffer* dst) override;
  // Route rewrites the armed override's ids on the host (the CUDA backend's kernel does the same).
  absl::Status PrepareRoutingOverride(std::shared_ptr<const RoutingTable> trace) override;
  absl::Status OverrideNextRouting(int layer, std::span<const int32_t> positions) override;

  // Host access to a CPU buffer's or weight's fp32 data (tests, and callers that know the backend).
  // A packed weight (a 2-D block-quantized one) has no fp32 data: nullptr.
  static float* Data(Buffer& b);
  static const float* Data(const Buffer& b);
  static const float* Data(const Weight& w);
  // The bytes a weight's data takes in host memory where this backend reads it: the packed bytes of
  // a packed weight, 4 a float otherwise.
  static size_t HostBytes(const Weight& w);
  // Whether `w` is kept packed (rows dequantized as ops read them).
  static bool IsPacked(const Weight& w);

 private:
  // MatMul for weights in a type of the packed product (engine/core/packed_product.h).
  absl::Status PackedMatMul(const Buffer& x, const Weight& w, Buffer* y);
  ThreadPool pool_;
  RoutingOverrideState routing_override_;
};

// The dot product every CPU op uses: a fixed reduction order that depends only on n.
float DotF32(const float* a, const float* b, int64_t n);

}  // namespace specgen
