// Transformer: the forward pass of every supported architecture (llama, qwen3, qwen3moe, mixtral) on
// any Backend. One loop built from shared blocks (attention, dense FFN, MoE FFN); what differs between
// architectures is data read from ModelSpec (qk_norm, rope_style, router_norm, layer_is_moe,
// tied_embeddings), never a copy of the loop. Prefill and decode are the same call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/routed_experts.h"
#include "engine/io/weight_set.h"
#include "engine/model/causal_lm.h"
#include "engine/model/host_experts.h"
#include "engine/model/kv_cache.h"
#include "engine/model/model_spec.h"
#include "engine/model/weight_streaming.h"

namespace specgen {

struct TransformerOptions {
  // Largest number of positions (prompt + generated); 0: min(spec.context_length, 4096).
  int64_t max_context = 0;
  // Where streamed weights go (WeightStreaming::PrepareExperts, PrepareLayers): the CUDA backend's
  // streaming (moe/cuda/cuda_streaming.h), which moe::ApplyRunPlan hands in for a plan that streams.
  // Null: every weight uploaded (the CPU's weights are host memory already), whatever the two fields
  // below ask. Used during Create only.
  std::shared_ptr<WeightStreaming> streaming = nullptr;
  // -1: every expert uploaded (resident). Otherwise the MoE layers' experts stay in pinned host memory
  // and stream into at most this many VRAM cache slots (through `streaming`; without it they are
  // uploaded as usual). The results are the resident run's, bit for bit.
  int64_t expert_cache_slots = -1;
  // Positions of a prompt chunk (CausalLm::prefill_chunk); 0: kPrefillChunk. A target whose experts
  // stream takes the offload plan's (moe::Plan::prefill_chunk): each chunk streams nearly every
  // expert, so fewer, larger chunks stream less.
  int64_t prefill_chunk = 0;
  // The copy of the streamed experts into host memory: (bytes done, bytes in all).
  std::function<void(size_t done, size_t total)> expert_copy_progress = {};
  // Dense layers (by index) whose FFN (gate, up, down) stays in pinned host memory and is copied, every
  // pass, through a ring of `dense_ring_layers` VRAM layer buffers (through `streaming`; without it
  // they are uploaded as usual): the planner's streamed_dense_layers
  // (moe/run_plan.h). An MoE layer, a layer out of range or one listed twice is an error.
  // The results are the resident run's, bit for bit.
  std::vector<int> streamed_dense_layers = {};
  int dense_ring_layers = 2;
  // The copy of the streamed dense layers into host memory: (bytes done, bytes in all).
  std::function<void(size_t done, size_t total)> dense_copy_progress = {};
  // Routed experts computed on the host CPU (engine/model/host_experts.h; moe::ApplyRunPlan makes one
  // from --moe-host): with experts streaming, the passes it takes (at most 16 positions) route on the
  // host and split their experts between it and the link (split_routed_experts.h), bypassing the VRAM
  // cache. Ignored where experts do not stream; where it cannot compute them (Bind's error) the model
  // runs without it and host_experts_note() says why. The results are the resident run's, bit for bit.
  std::shared_ptr<HostExpertPath> host_experts = nullptr;
  // Called after each weight is uploaded with the stored bytes done and their total; may be empty.
  std::function<void(size_t done, size_t total)> upload_progress = {};
  // The KV cache's element type (f32, f16 or bf16; rows rounded to it when stored). The library's
  // default is the fp32 reference; the CLI's --cache-type defaults to f16 (docs/design.md §6.9).
  DType kv_type = DType::kF32;
  // Sliding-window layers keep a ring of their window (KvCache, KvRing) rather than every position;
  // false: every position, masked (the reference the ring is tested against). Honoured only on a
  // backend whose Attention takes a ring (Backend::SupportsKvRing); elsewhere every position is kept.
  bool sliding_window_ring = true;
  // MoE layers route and run their experts on the device where the backend has that path
  // (Backend::PrepareExperts, RouteAndRunExperts: no host wait a layer), else on the host. false: always
  // on the host (RunRoutedExperts; a streamed layer stages every routed expert), the reference the
  // device path is tested against bit for bit.
  bool device_routed_experts = true;
};

// Which rows of a pass the output norm and head run on. A prompt's prefill reads at most its last row,
// and the head (vocabulary × hidden) is the largest matrix a pass multiplies.
enum class LogitRows {
  kAll,   // every position (verification, perplexity, `specgen logits`)
  kLast,  // the last position only: its logits equal kAll's last row
  kNone,  // none: the pass only fills the KV cache
};

class Transformer : public CausalLm {
 public:
  // Validates the weights against the spec (a mismatch names the tensor) and uploads them to
  // `backend`. `model` is kept alive (the CPU backend may read f32 weights in place); `backend` must
  // outlive the Transformer.
  static absl::StatusOr<std::unique_ptr<Transformer>> Create(std::shared_ptr<const LoadedModel> model,
                                                             Backend* backend,
                                                             const TransformerOptions& options = {});
  ~Transformer() override;

  const ModelSpec& spec() const override { return model_->spec; }
  int64_t n_past() const override { return cache_.size(); }
  int64_t max_context() const override { return cache_.max_positions(); }

  // Consecutive positions n_past() .. with a causal mask (CausalLm).
  absl::Status Forward(std::span<const int32_t> tokens, std::vector<float>* logits) override;
  // The head on the last row only / on no row (CausalLm).
  absl::Status ForwardLast(std::span<const int32_t> tokens, std::vector<float>* logits) override;
  absl::Status Feed(std::span<const int32_t> tokens) override;
  size_t prefill_chunk() const override { return prefill_chunk_; }

  // General form (token trees for speculative verification): token i is roped at positions[i], its K/V
  // go to cache row n_past()+i, and it attends to all committed rows plus the batch rows j with
  // mask[i*n + j] != 0 (empty mask: causal). All n rows are committed; Truncate drops what a tree
  // rejects. logits: [n, V] row-major fp32.
  absl::Status ForwardMasked(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                             std::span<const uint8_t> mask, std::vector<float>* logits);

  // ForwardMasked without the copy back: the logits [n, V] stay in backend memory (valid until the
  // next forward), for callers that process them where they are (the GPU-resident speculative step).
  // `rows`: kLast gives [1, V] (the last position's), kNone gives null.
  absl::StatusOr<const Buffer*> ForwardResident(std::span<const int32_t> tokens,
                                                std::span<const int32_t> positions,
                                                std::span<const uint8_t> mask, LogitRows rows = LogitRows::kAll);
  // The same at consecutive positions n_past() .. with a causal mask (what Forward computes).
  absl::StatusOr<const Buffer*> ForwardResident(std::span<const int32_t> tokens, LogitRows rows = LogitRows::kAll);

  // Several sequences in ONE pass (docs/design.md §14): sequence i's tokens run at positions
  // cache->size() .. of its own KV cache, attending to that cache and its own earlier tokens alone
  // (causal); every other product of the pass (projections, FFN, the routed experts of the union of
  // all rows, the head) runs once over all rows. logits: [Σ n_i, V], the sequences' rows in order,
  // each equal to what Forward gives for that sequence alone. Each cache gets its rows appended; the
  // model's own cache (n_past) is not touched. A cache given twice is an error.
  struct SequenceRows {
    std::span<const int32_t> tokens;
    KvCache* cache = nullptr;
  };
  absl::Status ForwardSequences(std::span<const SequenceRows> sequences, std::vector<float>* logits);
  // A KV cache like the model's own (layers, rows, context, type), for a sequence of its own.
  absl::StatusOr<KvCache> NewKvCache() const;

  absl::Status Truncate(int64_t n) override { return cache_.Truncate(n); }
  int64_t KeepablePrefix(int64_t n) const override { return cache_.KeepablePrefix(n); }
  // For a caller that replays a ForwardResident of n positions captured in a CUDA graph
  // (engine/speculative/graphed_target_pass.h): commits the n positions as the pass does and returns
  // its logits buffer with n rows (the buffer the captured pass wrote; see scratch_generation).
  absl::StatusOr<const Buffer*> CommitReplayedPass(int64_t n);
  // Bumped whenever the pass's activation buffers are reallocated (a larger batch than any before):
  // a captured pass holds their addresses.
  int64_t scratch_generation() const { return scratch_generation_; }
  // n more positions fit the context (the error names both counts and the flag that raises it).
  absl::Status CheckRoom(int64_t n) const;

  Backend& backend() const { return *backend_; }
  // Whether the experts stream from host memory (TransformerOptions::expert_cache_slots), and their
  // counters (a host wait; FailedPrecondition when they do not stream).
  bool streams_experts() const { return streamed_ != nullptr; }
  absl::StatusOr<ExpertStreamStats> expert_stream_stats() const;
  // Whether dense layers stream through the VRAM ring (TransformerOptions::streamed_dense_layers), and
  // the ring's sizes with the passes run and bytes copied so far (no host wait; FailedPrecondition when
  // none stream).
  bool streams_dense_layers() const { return dense_stream_ != nullptr; }
  absl::StatusOr<LayerStreamStats> dense_stream_stats() const;
  // Empties the expert cache (a cold start, for benchmarks; FailedPrecondition when nothing streams).
  absl::Status EmptyExpertCache();
  // Benchmarks only (docs/design.md §12; generate and chat never call it): every MoE layer's top-k ids
  // replaced by `table`'s at each row's absolute position, the router's weights kept
  // (Backend::OverrideNextRouting); null: the model's own router. The table must match the model's MoE
  // layers, experts and experts_used. Turning it on or off makes captured passes stale (scratch_generation).
  absl::Status SetRoutingOverride(std::shared_ptr<const RoutingTable> table);
  // Whether a pass of n positions routes a streamed layer on the host (its union of n * experts_used
  // ids might exceed the cache's slots, or the host expert path takes it), so that it cannot be
  // captured in a CUDA graph.
  bool StreamsOnHost(int64_t n) const;
  // Whether streamed layers' passes may take the host expert path (TransformerOptions::host_experts),
  // and why not where one was given but could not be used (empty otherwise).
  bool uses_host_experts() const { return host_experts_ != nullptr; }
  const std::string& host_experts_note() const { return host_experts_note_; }

  // The uploaded weights of a dense layer and the KV cache, for decode paths that run their own fused
  // kernels on the same memory (the CUDA-graph draft decode, draft/cuda/graphed_draft.h).
  // q_norm/k_norm are null without qk_norm; gate/up/down are null for MoE layers and for dense layers
  // whose FFN streams (their bytes are in VRAM only during a pass).
  struct LayerRefs {
    const Weight *attn_norm, *q, *k, *v, *o, *q_norm, *k_norm, *ffn_norm, *gate, *up, *down;
  };
  LayerRefs layer_refs(int64_t layer) const;
  const Weight& token_embedding() const { return *token_embd_; }
  const Weight& output_norm() const { return *output_norm_; }
  const Weight& output_head() const { return output_ ? *output_ : *token_embd_; }
  KvCache& kv_cache() { return cache_; }
  const KvCache& kv_cache() const { return cache_; }
  // Bytes of the uploaded weights by the dtype the backend keeps them in (Backend::ResidentDType).
  const std::map<DType, size_t>& resident_bytes() const { return resident_bytes_; }

 private:
  struct LayerWeights;
  struct Scratch;

  Transformer(std::shared_ptr<const LoadedModel> model, Backend* backend, KvCache cache);
  absl::Status UploadWeights(const TransformerOptions& options);
  // Uploads one tensor, counting its resident bytes and the upload's progress.
  absl::Status UploadTensor(const WeightKey& key, std::unique_ptr<Weight>* dst);
  absl::Status UploadExperts(int64_t layer);
  // The layer's expert biases (ModelSpec::expert_bias), resident whether or not its experts stream;
  // once (UploadExperts after a streamed layer's fallback finds them there).
  absl::Status UploadExpertBiases(int64_t layer);
  // The dense FFN layers TransformerOptions::streamed_dense_layers names: checked, then kept by the
  // backend in host memory (or uploaded where it keeps everything resident).
  absl::Status PrepareDenseStreaming(const TransformerOptions& options);
  // Activations for n positions and a logits buffer of `logit_rows` rows.
  absl::Status EnsureScratch(int64_t n, int64_t logit_rows);
  // A pass's logits left in backend memory, copied to the host (Forward, ForwardMasked).
  absl::Status ReadBack(const Buffer& out, std::vector<float>* logits) const;
  absl::Status AttentionBlock(int64_t layer, std::span<const int32_t> positions,
                              std::span<const uint8_t> mask);
  // The layer's per-head norm and RoPE and its attention's shape, for a pass of its own and for each
  // sequence of a shared pass alike; then h += o(attn) with o's bias when the model has one.
  Backend::HeadNormRope NormRopeFor(int64_t layer, std::span<const int32_t> positions) const;
  AttentionShape ShapeFor(int64_t layer, const KvCache& cache, std::span<const int32_t> positions) const;
  absl::Status OutputProjection(int64_t layer);
  absl::Status DenseFfnBlock(int64_t layer);
  absl::Status MoeFfnBlock(int64_t layer);
  // An MoE layer with any of issue 45's features (sigmoid routing, biases, clamped experts, shared
  // experts); router_logits already computed. Routed on the device where MoeFfnBlock would route a
  // plain layer there (streamed layers too), else on the host; the shared expert runs as ops after.
  absl::Status MoeFfnGeneral(int64_t layer);
  // out = the layer's routed sum, routed on the host (RunRoutedExperts; a streamed layer's experts staged).
  absl::Status HostRoutedExperts(int64_t layer, const RouterParams& router, const ExpertFfnOptions& ffn);
  // The host expert path (transformer_host_experts.cc): bound after the experts are prepared, and a
  // streamed layer's pass split between the host and the link.
  void BindHostExperts(const TransformerOptions& options, size_t streamed_layers);
  absl::Status SplitStreamedExperts(size_t streamed_layer, const Buffer& x, const Buffer& router_logits,
                                    const HostRoutingScratch& scratch, Buffer* out);

  std::shared_ptr<const LoadedModel> model_;
  Backend* backend_;
  KvCache cache_;
  std::vector<float> rope_inv_freq_;  // per-pair inverse frequencies of a scaled or partial RoPE, else empty
  float rope_factor_ = 1.0f;          // YaRN's attention factor on the rotated dims (RopeAttentionFactor)
  bool general_moe_ = false;          // the model needs a ModelFeature: MoE layers run MoeFfnGeneral
  bool device_routed_experts_ = true;  // TransformerOptions::device_routed_experts
  std::unique_ptr<Weight> token_embd_;
  std::unique_ptr<Weight> output_norm_;
  std::unique_ptr<Weight> output_;  // null when tied: token_embd_ is the head
  std::vector<LayerWeights> layers_;
  std::unique_ptr<StreamedExperts> streamed_;  // the MoE layers' experts when they stream
  std::unique_ptr<StreamedLayers> dense_stream_;  // the streamed dense layers' FFNs, when any stream
  int64_t dense_replays_ = 0;                     // replayed passes (each copied them again)
  int64_t expert_cache_slots_ = -1;             // TransformerOptions::expert_cache_slots
  size_t prefill_chunk_ = kPrefillChunk;        // TransformerOptions::prefill_chunk
  int64_t host_routed_layer_passes_ = 0;        // streamed layers' passes routed on the host
  std::shared_ptr<HostExpertPath> host_experts_;  // TransformerOptions::host_experts, once bound
  std::string host_experts_note_;                 // why the given one is not used
  std::unique_ptr<Buffer> pairs_z_, pairs_y_;     // the split path's [16·k, D] pair buffers (lazily)
  std::map<DType, size_t> resident_bytes_;
  std::function<void(size_t, size_t)> upload_progress_;  // TransformerOptions::upload_progress
  size_t upload_done_ = 0, upload_total_ = 0;
  std::unique_ptr<Scratch> scratch_;
  // ForwardSequences: the sequences of the pass running (empty otherwise) with each one's first row,
  // and the per-sequence attention buffers.
  struct SequenceScratch;
  std::span<const SequenceRows> sequences_;
  std::vector<int64_t> sequence_first_row_;
  std::unique_ptr<SequenceScratch> sequence_scratch_;
  // The attention of a ForwardSequences pass: each sequence's rows against its own cache.
  absl::Status SequencesAttention(int64_t layer, std::span<const int32_t> positions);
  int64_t scratch_generation_ = 0;
  std::shared_ptr<const RoutingTable> routing_override_;  // SetRoutingOverride
  std::span<const int32_t> pass_positions_;  // the positions of the pass running (the override's index)
};

}  // namespace specgen
