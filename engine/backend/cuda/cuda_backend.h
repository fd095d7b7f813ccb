// CudaBackend: the Backend of docs/design.md §5 on one NVIDIA GPU. Activations fp32, weights bf16/f16/f32 as
// stored, matrices of Q8_0/Q4_0/Q4_K/Q5_K/Q6_K kept packed in their file layout (other quantized types
// are dequantized to bf16 at upload), KV caches in f32, f16 or bf16 (NewCacheBuffer), everything in one
// budgeted DeviceArena. Matrix products: the batch-invariant GEMV for 1..16 tokens (the decode and
// verify path; in the backend's one GemvOrder; packed weights in their own one order), cuBLAS for bf16
// and packed prefill batches (packed weights dequantized to bf16 a row tile at a time), a fixed-order
// row kernel for f32 weights. All work is queued on one stream; the host waits only through
// Synchronize(), which counts every wait by kind (docs/design.md §6.1: one result copy per speculative step,
// plus the per-MoE-layer expert-union reads).
// Every ModelFeature of GLM-4.5 and gpt-oss is computed (issue 45): biases, clamped SwiGLU and the shared
// expert's gate by element-wise kernels (kernels/arch_elementwise.cuh), scaled and partial RoPE from a
// device copy of the model's frequency table, sinks and windows by the simple attention kernel (the
// others have neither; kernels/attention_choice.h), sigmoid routing by its own router kernel
// (kernels/router_sigmoid.cuh). What it lacks is a ring KV cache (SupportsKvRing() is false): a sliding
// layer keeps every position and attends through its window, and an AttentionShape with a ring is refused.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/device_arena.h"
#include "engine/backend/routing_override.h"
#include "kernels/kernel_types.h"

namespace specgen {

struct CudaBackendOptions {
  int device = 0;
  // VRAM reserved up front; 0: the device's free memory minus kReserveBytes.
  size_t arena_bytes = 0;
  static constexpr size_t kReserveBytes = size_t{2} << 30;
  // Pinned ring through which small host arguments (token ids, positions, masks, expert rows) reach
  // the device, stream-ordered and without a host wait.
  size_t staging_bytes = size_t{8} << 20;
  // The fused ops (MatMulMany, MatMulAdd, MatMulSwiGlu, NormRopeStore) in one kernel each; false runs
  // the Backend defaults (the ops one by one, the same bits), so the two can be compared.
  bool fused_ops = true;
  // How the small-batch products (1..16 tokens: decode, verify, routed experts) reduce a row
  // (kernels::GemvOrder). Every pass of this backend takes the same order, so speculative and
  // target-only greedy output stay token-identical under either; the orders differ in the last bits.
  kernels::GemvOrder gemv_order = kernels::kDefaultGemvOrder;
};

// Why the host waited for the GPU.
enum class SyncKind : int {
  kStepResult = 0,   // the one copy of a speculative step's result (docs/design.md §6.1)
  kExpertUnion = 1,  // an MoE layer's routing read by the host (docs/design.md §6.2)
  kOther = 2,        // anything else (Read of a buffer, a staging ring wrap, tests): a bug on the step path
};
struct SyncCounts {
  int64_t step_result = 0;
  int64_t expert_union = 0;
  int64_t other = 0;
};

class CudaBackend : public Backend {
 public:
  // True when the CUDA runtime sees at least one device.
  static bool DeviceAvailable();
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaBackendOptions& options = {});
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }

  absl::StatusOr<std::unique_ptr<Buffer>> NewBuffer(int64_t capacity_rows, int64_t cols) override;
  absl::StatusOr<std::unique_ptr<Buffer>> NewCacheBuffer(int64_t capacity_rows, int64_t cols,
                                                         DType type) override;
  absl::StatusOr<std::unique_ptr<Weight>> Upload(const TensorView& t, std::string_view name) override;
  // f32 and f16 go up as stored; every other type as bf16 (Upload).
  // As stored for f32/f16/bf16 and the packed block types (engine/backend/device_form.h), else bf16.
  DType ResidentDType(DType stored) const override;
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
  absl::Status Zero(Buffer* y) override;
  absl::Status Add(const Buffer& x, Buffer* y) override;
  absl::Status SwiGlu(const Buffer& gate, const Buffer& up, Buffer* out) override;
  absl::Status CopyRows(const Buffer& src, int64_t dst_row, Buffer* dst) override;
  absl::Status MatMulMany(const Buffer& x, std::span<const Weight* const> ws,
                          std::span<Buffer* const> ys) override;
  absl::Status MatMulAdd(const Buffer& x, const Weight& w, Buffer* scratch, Buffer* y) override;
  absl::Status MatMulSwiGlu(const Buffer& x, const Weight& gate, const Weight& up, Buffer* up_scratch,
                            Buffer* gate_out) override;
  absl::Status NormRopeStore(const HeadNormRope& p, Buffer* q, Buffer* k, const Buffer& v, int64_t dst_row,
                             Buffer* k_cache, Buffer* v_cache) override;
  absl::Status Attention(const Buffer& q, const Buffer& k_cache, const Buffer& v_cache,
                         const AttentionShape& shape, std::span<const uint8_t> mask,
                         Buffer* out) override;
  absl::Status Route(const Buffer& logits, int64_t k, RouterNorm norm, Routing* routing) override;
  // Sigmoid routing on the device (kernels/router_sigmoid.cuh), read back as Route's; a softmax norm
  // with a routed scale: Route's weights scaled on the host, as the CPU does.
  absl::Status RouteWith(const Buffer& logits, int64_t k, const RouterParams& p, Routing* routing) override;
  bool Supports(ModelFeature f) const override;
  absl::Status AddBias(const Weight& b, Buffer* y) override;
  absl::Status SwiGluClamped(const Buffer& gate, const Buffer& up, float alpha, float limit, Buffer* out) override;
  absl::Status ScaleRowsBySigmoid(const Buffer& g, Buffer* y) override;
  absl::Status RopePartial(std::span<const int32_t> positions, int64_t head_dim, int64_t rope_dim,
                           std::span<const float> inv_freq, float factor, RopeStyle style, Buffer* x) override;
  absl::Status GatherRows(const Buffer& src, std::span<const int32_t> rows, Buffer* dst) override;
  absl::Status ScatterAddScaled(const Buffer& src, std::span<const int32_t> rows,
                                std::span<const float> scales, Buffer* dst) override;
  // Every expert of one shape and type (biases: of one unpacked type): device address tables.
  // Otherwise nullptr (host routing).
  absl::StatusOr<std::unique_ptr<ExpertSet>> PrepareExperts(const ExpertWeights& experts) override;
  // 1..16 tokens: router (softmax or sigmoid), expert GEMVs with their biases and activation, and the
  // weighted sum on the device (kernels/routed_experts.cuh), no host wait.
  using Backend::RouteAndRunExperts;
  absl::StatusOr<bool> RouteAndRunExperts(const Buffer& x, const Buffer& router_logits, int64_t k,
                                          const RouterParams& router, const ExpertFfnOptions& ffn,
                                          const ExpertSet& experts, Buffer* out, bool accumulate) override;
  // The trace copied into the arena (stream-ordered, no host wait; not while capturing); the armed
  // override rewrites the router's ids on the device right after it (kernels/routing_override.cuh),
  // reading the pass's positions from device memory: the staged positions, or with a device length
  // (a captured pass) *d_length + row, so a replayed graph routes by the replay's positions.
  absl::Status PrepareRoutingOverride(std::shared_ptr<const RoutingTable> trace) override;
  absl::Status OverrideNextRouting(int layer, std::span<const int32_t> positions) override;

  // --- beyond the Backend interface: what the resident speculative step needs ---
  cudaStream_t stream() const { return stream_; }
  DeviceArena& arena() { return *arena_; }

  // Blocks the host until the stream is idle. Every host wait of the backend goes through here.
  absl::Status Synchronize(SyncKind kind);
  const SyncCounts& syncs() const { return syncs_; }
  void ResetSyncCounts() { syncs_ = SyncCounts(); }

  // The next Embed reads its token ids from `device_ids` (device int32, as many as the host span it
  // is given, whose values are then not used): drafted tokens reach the draft and the target without
  // visiting the host. One-shot.
  void UseDeviceTokensOnce(const int32_t* device_ids) { device_tokens_ = device_ids; }

  // Copies `bytes` of host data to the device in stream order via the pinned ring; the returned
  // device pointer is valid for the work queued next (until the ring wraps, 8 MiB later).
  absl::StatusOr<void*> Stage(const void* src, size_t bytes);

  // --- a pass captured in a CUDA graph (engine/speculative/graphed_target_pass.h) ---
  // A replayed pass keeps the arguments it was captured with, so the ops whose arguments follow the
  // KV cache's length read it from the device while this is set: NormRopeStore takes positions and
  // cache rows *d_length + t (its host positions must be dst_row + t), Attention its prefix *d_length
  // (the causal decode kernel only; its grid is sized for `max_keys` keys, blocks past a query's keys
  // return). The same bits as the host-given launches. Cleared by ClearDeviceLength.
  void SetDeviceLength(const int32_t* d_length, int64_t max_keys);
  void ClearDeviceLength() { SetDeviceLength(nullptr, 0); }
  // Starts capturing the backend's stream (thread-local mode). Until EndCapture, everything that
  // needs the host mid-pass fails with FailedPrecondition naming it (a staged argument, a host wait,
  // a workspace that would grow), so a pass that cannot be replayed is refused, not recorded wrong.
  absl::Status BeginCapture();
  // Ends the capture: the graph of what was queued (the caller owns it), or the capture's error.
  // Always leaves the stream out of capture mode.
  absl::StatusOr<cudaGraph_t> EndCapture();
  // Bumped whenever a workspace of the backend is reallocated: a captured pass holds the addresses.
  int64_t scratch_generation() const { return scratch_generation_; }

  static float* Data(Buffer& b);
  static const float* Data(const Buffer& b);
  static const void* Data(const Weight& w);
  static kernels::ElemType Type(const Weight& w);
  // A Weight reading `data` (device memory it does not own, which must outlive it) as `type` [rows, cols].
  static std::unique_ptr<Weight> WeightView(int64_t rows, int64_t cols, DType source, kernels::ElemType type,
                                            const void* data);
  // A KV cache buffer's storage and element type (Data is for fp32 buffers only).
  static void* CacheData(const Buffer& b);
  static kernels::ElemType CacheType(const Buffer& b);

 private:
  CudaBackend() = default;
  absl::Status EnsureScratch(void** p, size_t* capacity, size_t bytes, std::string_view what);
  // The router's top-k on the device, into route_: weights [n, k] then ids [n, k] (`bytes` in all).
  struct DeviceRouting {
    float* weights;
    int32_t* ids;
    size_t bytes;
  };
  absl::StatusOr<DeviceRouting> RouteOnDevice(const Buffer& logits, int64_t k, const RouterParams& p);
  // RouteOnDevice's result copied to the host (the layer's expert-union wait).
  absl::Status ReadRouting(const DeviceRouting& r, int64_t n, int64_t k, Routing* routing);
  // The armed routing override applied to RouteOnDevice's ids.
  absl::Status OverrideRouting(const RoutingOverrideState::Site& site, int32_t* ids);

  int device_ = 0;
  std::unique_ptr<DeviceArena> arena_;
  cudaStream_t stream_ = nullptr;
  void* cublas_ = nullptr;  // cublasHandle_t
  // Pinned staging ring: host half and its device mirror, with an event per half.
  char* staging_host_ = nullptr;
  char* staging_dev_ = nullptr;
  size_t staging_bytes_ = 0;
  size_t staging_pos_ = 0;
  cudaEvent_t half_done_[2] = {nullptr, nullptr};
  // Pinned read-back of routing.
  char* readback_ = nullptr;
  size_t readback_bytes_ = 0;
  // Growable device scratch (attention workspace, bf16 activations, router outputs).
  void* attn_ws_ = nullptr;
  size_t attn_ws_bytes_ = 0;
  // Whether the small-batch GEMV takes x · W^T for these weights in one launch (1..16 rows, one 16-bit
  // type, rows of a multiple of 8): the fused MatMul ops fall back to their defaults otherwise.
  bool GemvFuses(const Buffer& x, std::span<const Weight* const> ws) const;
  // MatMul of more than 16 rows by packed weights: bf16 row tiles of the weights, cuBLAS on each.
  absl::Status PackedPrefill(const Buffer& x, const Weight& w, Buffer* y);
  static constexpr int64_t kPackedTileBytes = int64_t{64} << 20;
  void* packed_tile_ = nullptr;
  size_t packed_tile_bytes_ = 0;
  bool fused_ops_ = true;  // CudaBackendOptions::fused_ops
  kernels::GemvOrder gemv_order_ = kernels::kDefaultGemvOrder;  // CudaBackendOptions::gemv_order
  // The positions last staged (StagePositions): a layer's RoPE reuses the device copy while nothing
  // else has been staged since (so the ring has not moved past it).
  absl::StatusOr<const int32_t*> StagePositions(std::span<const int32_t> positions);
  std::vector<int32_t> staged_positions_;
  // Device copies of the RoPE frequency tables seen (a model has one; a draft may bring another), so a
  // layer's RoPE stages nothing and a captured pass can rotate: the oldest dropped past kMaxFreqTables.
  absl::StatusOr<const float*> DeviceFrequencies(std::span<const float> inv_freq);
  struct FreqTable {
    std::vector<float> host;
    void* dev = nullptr;
  };
  static constexpr size_t kMaxFreqTables = 8;
  std::vector<FreqTable> freq_tables_;
  const int32_t* staged_positions_dev_ = nullptr;
  size_t staged_positions_end_ = 0;  // staging_pos_ right after they were staged
  void* decode_attn_ws_ = nullptr;  // LaunchDecodeAttentionBatch's: zeroed whenever (re)allocated
  size_t decode_attn_ws_bytes_ = 0;
  void* bf16_x_ = nullptr;
  size_t bf16_x_bytes_ = 0;
  void* route_ = nullptr;
  size_t route_bytes_ = 0;
  void* experts_ws_ = nullptr;
  size_t experts_ws_bytes_ = 0;
  const int32_t* device_tokens_ = nullptr;
  RoutingOverrideState routing_override_;
  void* routing_trace_dev_ = nullptr;  // the prepared trace's ids (arena)
  const int32_t* device_length_ = nullptr;  // SetDeviceLength
  int64_t device_length_max_keys_ = 0;
  bool capturing_ = false;
  int64_t scratch_generation_ = 0;
  SyncCounts syncs_;
};

}  // namespace specgen
