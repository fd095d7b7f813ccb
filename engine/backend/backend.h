// Backend: the ops of the forward pass on one device (docs/design.md §5). The CPU backend (Eigen, fp32) is
// the reference; the CUDA backend implements the same interface and is tested op by op against it.
// Memory is backend-owned and opaque (host memory on the CPU, VRAM on CUDA): activations live in
// Buffers, weights in Weights; only Write/Read and the small host-side arguments cross to the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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
};

// A backend's own form of an ExpertWeights (Backend::PrepareExperts); it refers to, and must not
// outlive, the weights.
class ExpertSet {
 public:
  virtual ~ExpertSet() = default;
};

// --- experts kept in host memory and streamed into a VRAM cache (docs/design.md §12) ---
// One MoE layer's experts as loaded (host views), by expert id.
struct ExpertViews {
  std::vector<TensorView> gate, up, down;
  std::string name;  // names the layer in messages
};
struct ExpertStreamingOptions {
  // VRAM slots shared by every streamed layer, each the size of one expert (of the largest layer).
  int64_t cache_slots = 0;
  // The copy of the experts into host memory: (bytes done, bytes in all), now and then and at the end.
  std::function<void(size_t done, size_t total)> progress;
};
struct ExpertStreamStats {
  int64_t slots = 0;
  size_t slot_bytes = 0;
  size_t host_bytes = 0;  // the pinned host copy of every streamed expert
  // The cache, decided on the device (passes the device routes: at most 16 positions, a union that fits).
  int64_t hits = 0, misses = 0, evictions = 0;
  int64_t fetched_bytes = 0;
  // The host-routed path (larger batches; unions that may exceed the slots): each routed expert copied
  // through a staging buffer, once per pass.
  int64_t staged = 0;
  int64_t staged_bytes = 0;
  // (pass, streamed layer) pairs the device decided (Transformer::expert_stream_stats adds the ones
  // routed on the host): the unions the counts above sum over.
  int64_t layer_passes = 0;
};
// One expert's three matrices where the backend's ops can read them.
struct ExpertRefs {
  const Weight* gate = nullptr;
  const Weight* up = nullptr;
  const Weight* down = nullptr;
};
// Every streamed layer's experts: the host copy, the VRAM cache, and per layer an ExpertSet for
// RouteAndRunExperts, which fetches the layer's misses on its own.
class StreamedExperts {
 public:
  virtual ~StreamedExperts() = default;
  // Layer i (its index among the layers given to PrepareStreamedExperts).
  virtual const ExpertSet& layer(size_t i) const = 0;
  // For the host-routed path: expert `expert` of layer i copied into VRAM in stream order (no host
  // wait); the refs are valid for the ops queued before the next Stage.
  virtual absl::StatusOr<ExpertRefs> Stage(size_t i, int expert) = 0;
  // The counters so far (a host wait: read them with the stats, not per step).
  virtual absl::StatusOr<ExpertStreamStats> Stats() = 0;
  // Empties the cache in stream order (every slot free; the counters go on): a cold start for benchmarks.
  virtual absl::Status EmptyCache() = 0;
};

// --- dense layers kept in host memory, streamed through a ring of VRAM layer buffers (§12) ---
// One streamed layer's weights as loaded (host views), in the order StreamedLayers::weight gives them.
struct LayerViews {
  std::vector<TensorView> weights;
  std::string name;  // names the layer in messages
};
struct LayerStreamingOptions {
  // VRAM layer buffers (>= 1; more than the layers is the layers): streamed layer i uses buffer i mod
  // ring, and layer i + ring copies while layers i + 1 .. i + ring - 1 compute.
  int ring_layers = 2;
  // The copy of the layers into host memory: (bytes done, bytes in all), now and then and at the end.
  std::function<void(size_t done, size_t total)> progress;
};
struct LayerStreamStats {
  int64_t layers = 0;
  int ring = 0;            // buffers
  size_t buffer_bytes = 0;  // one buffer
  size_t host_bytes = 0;    // the pinned host copy
  size_t pass_bytes = 0;    // copied by every pass: each streamed layer once
  // Passes so far and the bytes they copied: StreamedLayers counts the passes it queued outside a
  // graph capture; Transformer::dense_stream_stats adds the replays of captured ones.
  int64_t passes = 0;
  int64_t copied_bytes = 0;
};
// Every streamed layer's weights: the host copy and the ring. A pass brackets its use of the layers:
//   BeginPass, then for each streamed layer i in order Acquire(i) .. (the ops reading weight(i, *)) ..
//   Release(i), then EndPass.
// Every call only queues work (no host wait), so a pass between BeginPass and EndPass can be captured
// in a CUDA graph and replayed: each pass copies its layers again, and EndPass joins whatever the
// copies ran on back into the backend's stream.
class StreamedLayers {
 public:
  virtual ~StreamedLayers() = default;
  virtual size_t size() const = 0;
  // Weight t of streamed layer i: a view of the layer's ring buffer (a fixed address), holding the
  // layer's bytes between Acquire(i) and Release(i) of a pass.
  virtual const Weight& weight(size_t i, size_t t) const = 0;
  // Starts the copies of the first layers (one per buffer), ordered after the work already queued.
  virtual absl::Status BeginPass() = 0;
  // The ops queued next wait for layer i's copy. Layers are acquired in order, once a pass.
  virtual absl::Status Acquire(size_t i) = 0;
  // Layer i's ops are queued: its buffer takes the next layer that maps to it once they have run.
  virtual absl::Status Release(size_t i) = 0;
  // Ends the pass (also one cut short by an error): the backend's stream waits for every copy queued.
  virtual absl::Status EndPass() = 0;
  virtual LayerStreamStats Stats() const = 0;
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
  // dst[i] = src[rows[i]]; dst->rows() must equal rows.size().
  virtual absl::Status GatherRows(const Buffer& src, std::span<const int32_t> rows, Buffer* dst) = 0;
  // dst[rows[i]] += scales[i] · src[i], applied in order i = 0, 1, … (expert outputs into the residual
  // stream of the tokens that chose the expert).
  virtual absl::Status ScatterAddScaled(const Buffer& src, std::span<const int32_t> rows,
                                        std::span<const float> scales, Buffer* dst) = 0;

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
  };
  virtual absl::Status NormRopeStore(const HeadNormRope& p, Buffer* q, Buffer* k, const Buffer& v,
                                     int64_t dst_row, Buffer* k_cache, Buffer* v_cache);

  // --- MoE routing without the host (docs/design.md §6.2: the expert-union read is needed only where the host
  // must fetch experts; with every expert resident the device can route by itself) ---
  // An MoE layer's experts, prepared once for RouteAndRunExperts (on the GPU: device tables of the
  // experts' addresses). nullptr when this backend has no such path (the CPU: routing on the host costs
  // nothing there) or the experts do not suit it; the caller then routes on the host.
  virtual absl::StatusOr<std::unique_ptr<ExpertSet>> PrepareExperts(const ExpertWeights& experts) {
    (void)experts;
    return std::unique_ptr<ExpertSet>();
  }
  // Every layer of `layers` kept in host memory (copied there once, in the backend's form of each
  // weight) and streamed on demand into `options.cache_slots` VRAM slots. nullptr where the backend has
  // no such path (the CPU: its weights are host memory already); the caller then uploads them.
  virtual absl::StatusOr<std::unique_ptr<StreamedExperts>> PrepareStreamedExperts(
      std::span<const ExpertViews> layers, const ExpertStreamingOptions& options) {
    (void)layers, (void)options;
    return std::unique_ptr<StreamedExperts>();
  }
  // Every layer of `layers` kept in host memory (copied there once, in the backend's form of each
  // weight) and streamed through a ring of `options.ring_layers` VRAM layer buffers, pass by pass.
  // nullptr where the backend has no such path (the CPU); the caller then uploads the weights.
  virtual absl::StatusOr<std::unique_ptr<StreamedLayers>> PrepareStreamedLayers(
      std::span<const LayerViews> layers, const LayerStreamingOptions& options) {
    (void)layers, (void)options;
    return std::unique_ptr<StreamedLayers>();
  }
  // out [n, hidden] = the routed experts' weighted sum for each token of x [n, hidden], routed from
  // router_logits [n, E] as Route would, equal bit for bit to routing on the host (RunRoutedExperts);
  // with `accumulate`, out += that sum instead (the residual add, Add's bits).
  // Returns false, having done nothing, when this batch is not one the path takes (more than 16 tokens;
  // for a streamed set, also a batch whose union of experts might not fit the cache's slots).
  virtual absl::StatusOr<bool> RouteAndRunExperts(const Buffer& x, const Buffer& router_logits, int64_t k,
                                                  RouterNorm norm, const ExpertSet& experts, Buffer* out,
                                                  bool accumulate) {
    (void)x, (void)router_logits, (void)k, (void)norm, (void)experts, (void)out, (void)accumulate;
    return false;
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
