// Backend: the ops of the forward pass on one device (docs/design.md §5). The CPU backend (Eigen, fp32) is
// the reference; the CUDA backend implements the same interface and is tested op by op against it.
// Memory is backend-owned and opaque (host memory on the CPU, VRAM on CUDA): activations live in
// Buffers, weights in Weights; only Write/Read and the small host-side arguments cross to the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor_view.h"
#include "engine/model/model_spec.h"

namespace specgen {
class RoutingTable;  // engine/backend/routing_table.h

// An fp32 activation matrix [rows, cols], row-major, allocated by a backend for `capacity_rows` rows.
// The number of rows in use can change per pass (prefill, decode, verify) without reallocation.
// A KV cache's storage (Backend::NewCacheBuffer) is a Buffer whose elements may be 16-bit (dtype());
// only CopyRows and NormRopeStore write such a buffer and only Attention reads it.
class Buffer {
 public:
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t capacity_rows() const { return capacity_rows_; }
  // F32 for every activation; F32, F16 or BF16 for a KV cache's storage.
  DType dtype() const { return dtype_; }
  // Uses the first `rows` rows of the allocation; contents of newly exposed rows are unspecified.
  absl::Status set_rows(int64_t rows) {
    if (rows < 0 || rows > capacity_rows_) {
      return absl::InvalidArgumentError("Buffer::set_rows: rows exceed the buffer's capacity");
    }
    rows_ = rows;
    return absl::OkStatus();
  }

 protected:
  Buffer(int64_t capacity_rows, int64_t cols, DType dtype = DType::kF32)
      : rows_(capacity_rows), cols_(cols), capacity_rows_(capacity_rows), dtype_(dtype) {}

 private:
  int64_t rows_;
  int64_t cols_;
  int64_t capacity_rows_;
  DType dtype_;
};

// The element types a KV cache may be stored in.
inline bool IsCacheType(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// A weight prepared for this backend from a TensorView of any supported DType: a matrix [rows, cols]
// = [out, in] (a vector is [1, n]). The backend chooses the representation (CPU: fp32).
class Weight {
 public:
  virtual ~Weight() = default;
  Weight(const Weight&) = delete;
  Weight& operator=(const Weight&) = delete;

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  DType source_dtype() const { return source_dtype_; }

 protected:
  Weight(int64_t rows, int64_t cols, DType source_dtype)
      : rows_(rows), cols_(cols), source_dtype_(source_dtype) {}

 private:
  int64_t rows_;
  int64_t cols_;
  DType source_dtype_;
};

// Router decision for a batch, on the host (the union of experts decides what to fetch, §6).
struct Routing {
  int64_t n_tokens = 0;
  int64_t k = 0;
  std::vector<int32_t> expert;  // [n_tokens, k]; per token by descending weight, ties: lower id first
  std::vector<float> weight;    // [n_tokens, k]; the factor applied to that expert's output
};

// One MoE layer's experts, indexed by expert id: gate and up [ffn, hidden], down [hidden, ffn].
struct ExpertWeights {
  std::vector<const Weight*> gate, up, down;
  // Biases by expert id ([1, ffn], [1, ffn], [1, hidden]; ModelFeature::kExpertBias), or empty.
  std::vector<const Weight*> gate_bias, up_bias, down_bias;
};

// A backend's own form of an ExpertWeights (Backend::PrepareExperts); it refers to, and must not
// outlive, the weights.
class ExpertSet {
 public:
  virtual ~ExpertSet() = default;
};

// One expert's three matrices where the backend's ops can read them.
struct ExpertRefs {
  const Weight* gate = nullptr;
  const Weight* up = nullptr;
  const Weight* down = nullptr;
  // Biases (ModelFeature::kExpertBias), or null.
  const Weight* gate_bias = nullptr;
  const Weight* up_bias = nullptr;
  const Weight* down_bias = nullptr;
};

// Geometry of one attention call. The batch's n queries sit at KV rows n_prefix .. n_prefix+n-1 (their
// K and V are already stored there); every query sees all rows < n_prefix, plus the batch rows allowed
// by the mask (causal when no explicit mask is given).
struct AttentionShape {
  int64_t n_heads = 0;     // H; query head h reads KV head h / (H / Hkv)
  int64_t n_kv_heads = 0;  // Hkv
  int64_t head_dim = 0;    // d
  int64_t n_prefix = 0;    // KV rows before the batch
  float scale = 0.0f;      // multiplies q·k (1/sqrt(d))
  // gpt-oss (ModelFeature::kAttentionSinks): head h's softmax also counts exp(sinks[h]) in its
  // denominator (a logit no value goes with). Null: none.
  const Weight* sinks = nullptr;  // [1, H]
  // A sliding layer (ModelFeature::kSlidingWindow): a query at position p sees only keys at positions
  // > p − window. KV row r < n_prefix holds position r; batch row j holds positions[j]. 0: no window.
  int64_t window = 0;
  std::span<const int32_t> positions;  // the batch rows' positions (needed with a window)
  // A sliding layer's ring cache (KvCache, engine/model/kv_cache.h): k_cache and v_cache have this many
  // rows and KV row r (prefix or batch) lives at row r mod ring. Every row a query sees must still be
  // there: r >= n_prefix + n − ring. Needs a window. 0: rows as above. The CUDA backend has no ring yet.
  int64_t ring = 0;
};

// The expert FFN beyond SwiGLU (issue 45): the activation between gate/up and down (gpt-oss clamps).
// Biases come with the experts (ExpertRefs, ExpertWeights).
struct ExpertFfnOptions {
  FfnActivation act = FfnActivation::kSwiGlu;
  float alpha = 1.702f;  // kSwiGluClamped
  float limit = 7.0f;
};

// How router logits become the top-k experts and their weights (Backend::RouteWith).
struct RouterParams {
  RouterNorm norm = RouterNorm::kSoftmaxThenTopK;
  const Weight* selection_bias = nullptr;  // [1, E], kSigmoid*: added to the scores for selection only
  int64_t n_groups = 1;                    // kSigmoid*: group-limited selection (n_group) ...
  int64_t groups_used = 1;                 // ... keeping the best groups_used (topk_group)
  float scale = 1.0f;                      // routed_scaling_factor, on every final weight
  // Whether Route alone computes it (no bias, groups or scale, a softmax norm).
  bool plain() const {
    return !IsSigmoidRouter(norm) && selection_bias == nullptr && n_groups == 1 && scale == 1.0f;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Memory. A Buffer starts with rows() == capacity_rows and unspecified contents.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> NewBuffer(int64_t capacity_rows, int64_t cols) = 0;
  // A KV cache's storage [capacity_rows, cols] of `type` (IsCacheType). CopyRows and NormRopeStore
  // round what they store into it to `type` (round to nearest even), Attention reads it in fp32, so
  // every backend computes the same model for a given type. Read and Write refuse a 16-bit one.
  virtual absl::StatusOr<std::unique_ptr<Buffer>> NewCacheBuffer(int64_t capacity_rows, int64_t cols,
                                                                 DType type) = 0;
  // Prepares a 1-D or 2-D tensor for the ops below; `name` is used in error messages. The view's data
  // must stay valid as long as the returned Weight (the CPU backend may use f32 data in place).
  virtual absl::StatusOr<std::unique_ptr<Weight>> Upload(const TensorView& t, std::string_view name) = 0;
  // The element type Upload keeps a weight stored as `stored` in (for reports of what went where).
  virtual DType ResidentDType(DType stored) const { return stored; }
  // host → dst's first dst->rows() rows (src.size() == rows * cols), and back.
  virtual absl::Status Write(std::span<const float> src, Buffer* dst) = 0;
  virtual absl::Status Read(const Buffer& src, std::span<float> dst) = 0;

  // out[i] = table[tokens[i]]; table [V, D], out [n, D]. Ids must be < V (checked: error names the id).
  virtual absl::Status Embed(const Weight& table, std::span<const int32_t> tokens, Buffer* out) = 0;
  // y[n, out] = x[n, in] · W[out, in]^T. Every row is reduced in the same order whatever n (batch
  // invariance, docs/design.md §6.6).
  virtual absl::Status MatMul(const Buffer& x, const Weight& w, Buffer* y) = 0;
  // y = w ⊙ x / sqrt(mean(x²) + eps) over each consecutive group of `group` columns of a row (group ==
  // cols: the usual row norm; group == head_dim: per-head q/k norm). w has `group` elements. y may be x.
  virtual absl::Status RmsNorm(const Buffer& x, const Weight& w, int64_t group, float eps, Buffer* y) = 0;
  // In place on x [n, heads*head_dim]: rotates each head of row i by positions[i] (θ_j = pos ·
  // theta^(−2j/head_dim)), pairing (j, j + d/2) for kRotateHalf and (2j, 2j+1) for kInterleaved.
  virtual absl::Status Rope(std::span<const int32_t> positions, int64_t head_dim, float theta,
                            RopeStyle style, Buffer* x) = 0;
  // The same with pair j's inverse frequency given (inv_freq: head_dim / 2 entries; scaled RoPE,
  // engine/model/rope_scaling.h): θ_j = pos · inv_freq[j]. Only where SupportsRopeFrequencies();
  // elsewhere an Unimplemented error.
  virtual absl::Status RopeWithFrequencies(std::span<const int32_t> positions, int64_t head_dim,
                                           std::span<const float> inv_freq, RopeStyle style, Buffer* x);
  virtual bool SupportsRopeFrequencies() const { return false; }
  // Whether Attention takes AttentionShape::ring (a sliding layer's ring KV cache, KvCache). Where it
  // does not (the default, and the CUDA backend so far), the Transformer keeps every position of a
  // sliding layer and attends through the window alone, whatever TransformerOptions asks.
  virtual bool SupportsKvRing() const { return false; }
  // y = 0 (the first y->rows() rows).
  virtual absl::Status Zero(Buffer* y) = 0;
  // y += x (same shape).
  virtual absl::Status Add(const Buffer& x, Buffer* y) = 0;
  // out = silu(gate) ⊙ up, silu(z) = z / (1 + e^−z). out may be gate or up.
  virtual absl::Status SwiGlu(const Buffer& gate, const Buffer& up, Buffer* out) = 0;
  // dst rows dst_row .. dst_row + src.rows() − 1 = src (KV cache append), rounded to dst's dtype.
  virtual absl::Status CopyRows(const Buffer& src, int64_t dst_row, Buffer* dst) = 0;
  // Scaled-dot-product attention with GQA. q [n, H*d]; k_cache, v_cache [≥ n_prefix + n, Hkv*d] of one
  // cache type (read as fp32, every sum in fp32);
  // out [n, H*d]. mask: empty for causal, else n*n bytes, mask[i*n + j] != 0 iff batch query i may see
  // batch row j (a tree; the diagonal must be set). Softmax in fp32 with max subtraction.
  virtual absl::Status Attention(const Buffer& q, const Buffer& k_cache, const Buffer& v_cache,
                                 const AttentionShape& shape, std::span<const uint8_t> mask,
                                 Buffer* out) = 0;
  // Router logits [n, E] → top-k experts and weights per token (docs/formats.md §8).
  virtual absl::Status Route(const Buffer& logits, int64_t k, RouterNorm norm, Routing* routing) = 0;
  // The same for any RouterParams: Route where p.plain(), else (sigmoid routing, selection bias, groups,
  // a routed scale) Unimplemented unless the backend Supports(kSigmoidRouting). Per token the experts
  // come by descending selection score (score + bias), ties: the lower id first.
  virtual absl::Status RouteWith(const Buffer& logits, int64_t k, const RouterParams& p, Routing* routing);
  // dst[i] = src[rows[i]]; dst->rows() must equal rows.size().
  virtual absl::Status GatherRows(const Buffer& src, std::span<const int32_t> rows, Buffer* dst) = 0;
  // dst[rows[i]] += scales[i] · src[i], applied in order i = 0, 1, … (expert outputs into the residual
  // stream of the tokens that chose the expert).
  virtual absl::Status ScatterAddScaled(const Buffer& src, std::span<const int32_t> rows,
                                        std::span<const float> scales, Buffer* dst) = 0;

  // --- the ops of ModelFeature (issue 45): each Unimplemented unless the backend Supports it ---
  // Which ModelFeatures this backend computes (Transformer::Create refuses a model needing another).
  virtual bool Supports(ModelFeature f) const {
    (void)f;
    return false;
  }
  // y[i, :] += b for every row (a projection's bias); b [1, y.cols()].
  virtual absl::Status AddBias(const Weight& b, Buffer* y);
  // gpt-oss's expert activation: g = min(gate, limit), u = clamp(up, −limit, limit),
  // out = (u + 1) · g · σ(alpha · g). out may be gate or up.
  virtual absl::Status SwiGluClamped(const Buffer& gate, const Buffer& up, float alpha, float limit, Buffer* out);
  // y[i, :] *= σ(g[i, 0]) (a shared expert's gate); g [n, 1].
  virtual absl::Status ScaleRowsBySigmoid(const Buffer& g, Buffer* y);
  // RopeWithFrequencies on the first rope_dim dims of each head only (pairs within them: (j, j +
  // rope_dim/2) or (2j, 2j+1); inv_freq has rope_dim / 2 entries), the rotated dims' cos and sin
  // multiplied by `factor` (YaRN's attention factor); the other dims are kept.
  virtual absl::Status RopePartial(std::span<const int32_t> positions, int64_t head_dim, int64_t rope_dim,
                                   std::span<const float> inv_freq, float factor, RopeStyle style, Buffer* x);

  // Fused products. Each default runs the ops named; a backend may do it in one pass with the same
  // arithmetic (CUDA: one launch each for 1..16 rows, the same bits).
  // ys[i] = x · ws[i]^T for up to 3 matrices of one input (the attention's q, k and v): MatMul each.
  virtual absl::Status MatMulMany(const Buffer& x, std::span<const Weight* const> ws,
                                  std::span<Buffer* const> ys);
  // y += x · W^T (the residual after the attention's and the FFN's output projections): MatMul into
  // `scratch` (same shape as y), then Add.
  virtual absl::Status MatMulAdd(const Buffer& x, const Weight& w, Buffer* scratch, Buffer* y);
  // gate_out = silu(x · Wg^T) ⊙ (x · Wu^T) (a dense FFN's first half): MatMul gate into gate_out and up
  // into up_scratch, then SwiGlu into gate_out.
  virtual absl::Status MatMulSwiGlu(const Buffer& x, const Weight& gate, const Weight& up, Buffer* up_scratch,
                                    Buffer* gate_out);

  // The attention block's per-head step between the projections and the attention, in place on q
  // [n, H*d] and k [n, Hkv*d]: each head RMS-normed (RmsNorm with group = head_dim; only when q_norm /
  // k_norm are set: Qwen3), then rotated as Rope at `positions`; then k and v [n, Hkv*d] copied to rows
  // dst_row .. dst_row + n - 1 of k_cache and v_cache (CopyRows). The default runs those ops one after
  // the other; a backend may do it in one pass with the same arithmetic (CUDA: one kernel instead of
  // four kernels and two copies a layer).
  struct HeadNormRope {
    const Weight* q_norm = nullptr;  // [head_dim] each, or both null
    const Weight* k_norm = nullptr;
    float eps = 0.0f;
    int64_t head_dim = 0;
    std::span<const int32_t> positions;  // one a row of q
    float theta = 0.0f;
    // Per-pair inverse frequencies of a scaled RoPE (RopeWithFrequencies), or empty: from theta.
    std::span<const float> inv_freq;
    RopeStyle style = RopeStyle::kRotateHalf;
    // Partial or YaRN RoPE (RopePartial): dims rotated (0: head_dim) and the rotated dims' factor.
    int64_t rope_dim = 0;
    float rope_factor = 1.0f;
  };
  virtual absl::Status NormRopeStore(const HeadNormRope& p, Buffer* q, Buffer* k, const Buffer& v,
                                     int64_t dst_row, Buffer* k_cache, Buffer* v_cache);

  // --- MoE routing without the host (docs/design.md §6.2: the expert-union read is needed only where the host
  // must fetch experts; with every expert resident the device can route by itself) ---
  // An MoE layer's experts, prepared once for RouteAndRunExperts (on the GPU: device tables of the
  // experts' addresses, and of their biases where `experts` has them: all three roles' or some, each
  // role for every expert or for none). The set refers to the weights, biases included, which must
  // outlive it. nullptr when this backend has no such path (the CPU: routing on the host costs nothing
  // there) or the experts do not suit it; the caller then routes on the host.
  virtual absl::StatusOr<std::unique_ptr<ExpertSet>> PrepareExperts(const ExpertWeights& experts) {
    (void)experts;
    return std::unique_ptr<ExpertSet>();
  }
  // out [n, hidden] = the routed experts' weighted sum for each token of x [n, hidden], routed from
  // router_logits [n, E] as RouteWith(router) would, each expert's FFN as `ffn` and the set's biases
  // make it, equal bit for bit to routing on the host (RunRoutedExperts with the same router, ffn and
  // experts); with `accumulate`, out += that sum instead (the residual add, Add's bits).
  // Returns false, having done nothing, when this batch is not one the path takes (more than 16 tokens;
  // for a set whose experts stream (engine/model/weight_streaming.h), also a batch whose union of
  // experts might not fit the cache's slots). Invalid router params are an error, as in RouteWith.
  virtual absl::StatusOr<bool> RouteAndRunExperts(const Buffer& x, const Buffer& router_logits, int64_t k,
                                                  const RouterParams& router, const ExpertFfnOptions& ffn,
                                                  const ExpertSet& experts, Buffer* out, bool accumulate) {
    (void)x, (void)router_logits, (void)k, (void)router, (void)ffn, (void)experts, (void)out, (void)accumulate;
    return false;
  }
  // The plain models' form: softmax routing by `norm`, SwiGLU experts.
  absl::StatusOr<bool> RouteAndRunExperts(const Buffer& x, const Buffer& router_logits, int64_t k, RouterNorm norm,
                                          const ExpertSet& experts, Buffer* out, bool accumulate) {
    return RouteAndRunExperts(x, router_logits, k, RouterParams{norm}, ExpertFfnOptions{}, experts, out, accumulate);
  }

  // --- the routing regimes of the offload benchmarks (docs/design.md §12; never generate or chat) ---
  // Readies `table` for OverrideNextRouting (the CUDA backend copies it to the device in stream order;
  // not while capturing); null drops it. One table a backend: models sharing it share the last one
  // prepared. Unimplemented where the backend has no override.
  virtual absl::Status PrepareRoutingOverride(std::shared_ptr<const RoutingTable> table);
  // The next Route or RouteAndRunExperts (that one call) keeps the router's top-k weights in rank order
  // and takes the prepared table's ids instead: row i those of MoE layer `layer` at absolute position
  // positions[i] (RoutingTable::Rewrite). `positions` must stay valid until that call.
  virtual absl::Status OverrideNextRouting(int layer, std::span<const int32_t> positions);
};

}  // namespace specgen
