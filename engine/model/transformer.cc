#include "engine/model/transformer.h"

#include <algorithm>
#include <cmath>

#include "engine/backend/routed_experts.h"
#include "engine/core/status_macros.h"
#include "engine/backend/routing_table.h"

namespace specgen {

struct Transformer::LayerWeights {
  std::unique_ptr<Weight> attn_norm, q, k, v, o;
  std::unique_ptr<Weight> q_norm, k_norm;  // qk_norm only
  std::unique_ptr<Weight> q_bias, k_bias, v_bias, o_bias, sinks;  // issue 45 attention, where present
  std::unique_ptr<Weight> router_bias, selection_bias;             // issue 45 routing, where present
  std::unique_ptr<Weight> shared_gate, shared_up, shared_down, shared_gate_inp;  // shared expert
  std::unique_ptr<Weight> ffn_norm;
  std::unique_ptr<Weight> gate, up, down;  // dense layers (null while their FFN streams)
  int64_t dense_streamed = -1;             // the layer's index among the streamed dense layers, else -1
  std::unique_ptr<Weight> router;          // MoE layers
  struct Expert {
    std::unique_ptr<Weight> gate, up, down;
    std::unique_ptr<Weight> gate_bias, up_bias, down_bias;  // expert_bias only
  };
  std::vector<Expert> experts;
  ExpertWeights expert_refs;              // the same, by id, for the routing functions
  std::unique_ptr<ExpertSet> expert_set;  // the backend's device routing, where it has one
  // Streamed: the layer's index among the streamed ones (its experts are not uploaded), else -1.
  int64_t streamed = -1;
  const ExpertSet* device_experts = nullptr;  // expert_set, or the streamed layer's set
};

// Activations of one pass, allocated for the largest batch seen and reused (set_rows) after that.
struct Transformer::Scratch {
  int64_t capacity = 0;
  std::unique_ptr<Buffer> h;        // [n, D] residual stream
  std::unique_ptr<Buffer> x;        // [n, D] normed input of a block
  std::unique_ptr<Buffer> q;        // [n, H*d]
  std::unique_ptr<Buffer> k, v;     // [n, Hkv*d]
  std::unique_ptr<Buffer> attn;     // [n, H*d]
  std::unique_ptr<Buffer> out;      // [n, D] block output before the residual add
  std::unique_ptr<Buffer> ffn_g, ffn_u;      // [n, Fd] dense FFN
  std::unique_ptr<Buffer> router_logits;     // [n, E]
  std::unique_ptr<Buffer> ex_x, ex_y;        // [≤n, D] one expert's tokens in / out
  std::unique_ptr<Buffer> ex_g, ex_u;        // [≤n, F]
  std::unique_ptr<Buffer> sh_g, sh_u;        // [n, Fs] the shared expert
  std::unique_ptr<Buffer> sh_y;              // [n, D]
  std::unique_ptr<Buffer> sh_gate;           // [n, 1] its sigmoid gate's logit
  // [rows, V]: its own capacity, since a prefill chunk of many rows asks for one row or none.
  int64_t logit_capacity = 0;
  std::unique_ptr<Buffer> logits;

  // The activation buffers (logits apart).
  std::vector<Buffer*> activations() {
    std::vector<Buffer*> v_all;
    for (auto* p : {&h, &x, &q, &k, &v, &attn, &out, &ffn_g, &ffn_u, &router_logits, &ex_x, &ex_y,
                    &ex_g, &ex_u, &sh_g, &sh_u, &sh_y, &sh_gate}) {
      if (*p) v_all.push_back(p->get());
    }
    return v_all;
  }
};

// One sequence's rows of a ForwardSequences pass, gathered for its attention: [≤n, H*d] / [≤n, Hkv*d].
struct Transformer::SequenceScratch {
  int64_t capacity = 0;
  std::unique_ptr<Buffer> q, k, v, attn;
};

Transformer::Transformer(std::shared_ptr<const LoadedModel> model, Backend* backend, KvCache cache)
    : model_(std::move(model)), backend_(backend), cache_(std::move(cache)) {}
Transformer::~Transformer() = default;

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Create(std::shared_ptr<const LoadedModel> model,
                                                                 Backend* backend,
                                                                 const TransformerOptions& options) {
  if (model == nullptr || backend == nullptr) return InvalidArgument("Transformer: no model or backend");
  const ModelSpec& spec = model->spec;
  RETURN_IF_ERROR(Validate(spec, model->source));
  RETURN_IF_ERROR(model->weights.Validate(spec, model->source));
  if (spec.head_dim % 2 != 0) {
    return InvalidArgument(model->source, ": head_dim ", spec.head_dim, " is odd; RoPE needs pairs");
  }
  if (spec.rope_scaling.active() && !backend->SupportsRopeFrequencies()) {
    return absl::UnimplementedError(Cat(model->source, ": RoPE scaling ", Describe(spec.rope_scaling),
                                        " is not supported on the ", backend->name(),
                                        " backend (its RoPE computes frequencies from rope_theta alone); "
                                        "run this model with --device cpu"));
  }
  for (const ModelFeature f : RequiredFeatures(spec)) {
    if (!backend->Supports(f)) {
      return absl::UnimplementedError(Cat(model->source, ": this ", ArchName(spec.arch), " model needs ",
                                          FeatureName(f), ", which the ", backend->name(),
                                          " backend does not compute yet; run it with --device cpu"));
    }
  }
  if (static_cast<int64_t>(spec.layer_is_moe.size()) != spec.n_layers) {
    return InvalidArgument(model->source, ": layer_is_moe has ", spec.layer_is_moe.size(),
                           " entries for ", spec.n_layers, " layers");
  }
  const int64_t max_context =
      options.max_context > 0 ? options.max_context : std::min<int64_t>(spec.context_length, 4096);
  if (max_context <= 0) return InvalidArgument(model->source, ": context length ", max_context);
  if (options.prefill_chunk < 0) return InvalidArgument(model->source, ": prefill chunk ", options.prefill_chunk);
  ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(*backend, spec.n_layers, max_context, spec.kv_dim(),
                                                      options.kv_type,
                                                      options.sliding_window_ring && backend->SupportsKvRing()
                                                          ? SlidingWindowRing(spec, std::max<int64_t>(
                                                                options.prefill_chunk > 0 ? options.prefill_chunk
                                                                                          : kPrefillChunk,
                                                                kLogitRowsReserved))
                                                          : KvRing{}));
  std::unique_ptr<Transformer> t(new Transformer(std::move(model), backend, std::move(cache)));
  if (options.prefill_chunk > 0) t->prefill_chunk_ = static_cast<size_t>(options.prefill_chunk);
  // A scaled or partial RoPE needs its table: rotary_dim / 2 pairs, theta^(−2j/rotary_dim) scaled.
  if (spec.rope_scaling.active() || spec.rotary_dim() != spec.head_dim) {
    t->rope_inv_freq_ = RopeInverseFrequencies(spec.rope_theta, spec.rotary_dim(), spec.rope_scaling);
  }
  t->rope_factor_ = RopeAttentionFactor(spec.rope_scaling);
  t->general_moe_ = !RequiredFeatures(spec).empty();
  t->device_routed_experts_ = options.device_routed_experts;
  RETURN_IF_ERROR(t->UploadWeights(options));
  return t;
}

absl::Status Transformer::UploadTensor(const WeightKey& key, std::unique_ptr<Weight>* dst) {
  const WeightSet& ws = model_->weights;
  ASSIGN_OR_RETURN(TensorView view, ws.Get(key));
  std::string name = std::string(ws.SourceName(key));
  if (name.empty()) name = KeyString(key);
  ASSIGN_OR_RETURN(*dst, backend_->Upload(view, Cat(model_->source, ": ", name)));
  const DType resident = backend_->ResidentDType(view.dtype);
  absl::StatusOr<size_t> bytes = TensorBytes(resident, view.cols(), view.rows());
  resident_bytes_[resident] += bytes.ok() ? *bytes : view.bytes;
  upload_done_ += view.bytes;
  if (upload_progress_) upload_progress_(std::min(upload_done_, upload_total_), upload_total_);
  return absl::OkStatus();
}

absl::Status Transformer::UploadExpertBiases(int64_t l) {
  LayerWeights& lw = layers_[l];
  if (!model_->spec.expert_bias || !lw.expert_refs.gate_bias.empty()) return absl::OkStatus();
  lw.experts.resize(model_->spec.n_experts);
  for (int e = 0; e < model_->spec.n_experts; ++e) {
    const int layer = static_cast<int>(l);
    RETURN_IF_ERROR(UploadTensor({Role::kExpertGateBias, layer, e}, &lw.experts[e].gate_bias));
    RETURN_IF_ERROR(UploadTensor({Role::kExpertUpBias, layer, e}, &lw.experts[e].up_bias));
    RETURN_IF_ERROR(UploadTensor({Role::kExpertDownBias, layer, e}, &lw.experts[e].down_bias));
    lw.expert_refs.gate_bias.push_back(lw.experts[e].gate_bias.get());
    lw.expert_refs.up_bias.push_back(lw.experts[e].up_bias.get());
    lw.expert_refs.down_bias.push_back(lw.experts[e].down_bias.get());
  }
  return absl::OkStatus();
}

absl::Status Transformer::UploadExperts(int64_t l) {
  LayerWeights& lw = layers_[l];
  lw.experts.resize(model_->spec.n_experts);
  for (int e = 0; e < model_->spec.n_experts; ++e) {
    const int layer = static_cast<int>(l);
    RETURN_IF_ERROR(UploadTensor({Role::kExpertGate, layer, e}, &lw.experts[e].gate));
    RETURN_IF_ERROR(UploadTensor({Role::kExpertUp, layer, e}, &lw.experts[e].up));
    RETURN_IF_ERROR(UploadTensor({Role::kExpertDown, layer, e}, &lw.experts[e].down));
    lw.expert_refs.gate.push_back(lw.experts[e].gate.get());
    lw.expert_refs.up.push_back(lw.experts[e].up.get());
    lw.expert_refs.down.push_back(lw.experts[e].down.get());
  }
  RETURN_IF_ERROR(UploadExpertBiases(l));
  if (!device_routed_experts_) return absl::OkStatus();
  ASSIGN_OR_RETURN(lw.expert_set, backend_->PrepareExperts(lw.expert_refs));
  lw.device_experts = lw.expert_set.get();
  return absl::OkStatus();
}

absl::Status Transformer::UploadWeights(const TransformerOptions& options) {
  const ModelSpec& spec = model_->spec;
  const WeightSet& ws = model_->weights;
  upload_progress_ = options.upload_progress;
  upload_done_ = upload_total_ = 0;
  const bool experts_stream = options.expert_cache_slots >= 0;  // copied by the backend, not uploaded
  layers_.resize(spec.n_layers);
  RETURN_IF_ERROR(PrepareDenseStreaming(options));  // marks the layers whose FFN streams
  auto streams_ffn = [&](const WeightKey& key) {
    return key.layer >= 0 && key.expert < 0 && layers_[key.layer].dense_streamed >= 0 &&
           (key.role == Role::kFfnGate || key.role == Role::kFfnUp || key.role == Role::kFfnDown);
  };
  // A streamed layer's expert biases are uploaded all the same (small, and read by every pass).
  for (const auto& [key, view] : ws.tensors()) {
    if (!(experts_stream && key.expert >= 0 && !IsVectorRole(key.role)) && !streams_ffn(key)) {
      upload_total_ += view.bytes;
    }
  }
  auto up = [&](Role role, int layer, int expert, std::unique_ptr<Weight>* dst) {
    return UploadTensor({role, layer, expert}, dst);
  };
  RETURN_IF_ERROR(up(Role::kTokenEmbd, -1, -1, &token_embd_));
  RETURN_IF_ERROR(up(Role::kOutputNorm, -1, -1, &output_norm_));
  if (!spec.tied_embeddings) RETURN_IF_ERROR(up(Role::kOutput, -1, -1, &output_));
  std::vector<ExpertViews> streamed_views;
  for (int l = 0; l < spec.n_layers; ++l) {
    LayerWeights& lw = layers_[l];
    RETURN_IF_ERROR(up(Role::kAttnNorm, l, -1, &lw.attn_norm));
    RETURN_IF_ERROR(up(Role::kAttnQ, l, -1, &lw.q));
    RETURN_IF_ERROR(up(Role::kAttnK, l, -1, &lw.k));
    RETURN_IF_ERROR(up(Role::kAttnV, l, -1, &lw.v));
    RETURN_IF_ERROR(up(Role::kAttnOut, l, -1, &lw.o));
    if (spec.qk_norm) {
      RETURN_IF_ERROR(up(Role::kAttnQNorm, l, -1, &lw.q_norm));
      RETURN_IF_ERROR(up(Role::kAttnKNorm, l, -1, &lw.k_norm));
    }
    if (spec.attn_qkv_bias) {
      RETURN_IF_ERROR(up(Role::kAttnQBias, l, -1, &lw.q_bias));
      RETURN_IF_ERROR(up(Role::kAttnKBias, l, -1, &lw.k_bias));
      RETURN_IF_ERROR(up(Role::kAttnVBias, l, -1, &lw.v_bias));
    }
    if (spec.attn_out_bias) RETURN_IF_ERROR(up(Role::kAttnOutBias, l, -1, &lw.o_bias));
    if (spec.attn_sinks) RETURN_IF_ERROR(up(Role::kAttnSinks, l, -1, &lw.sinks));
    RETURN_IF_ERROR(up(Role::kFfnNorm, l, -1, &lw.ffn_norm));
    if (spec.layer_is_moe[l]) {
      RETURN_IF_ERROR(up(Role::kRouter, l, -1, &lw.router));
      if (spec.router_bias) RETURN_IF_ERROR(up(Role::kRouterBias, l, -1, &lw.router_bias));
      if (spec.expert_selection_bias) RETURN_IF_ERROR(up(Role::kExpertSelBias, l, -1, &lw.selection_bias));
      if (spec.shared_expert_ffn_dim > 0) {  // resident: every token runs it
        RETURN_IF_ERROR(up(Role::kSharedGate, l, -1, &lw.shared_gate));
        RETURN_IF_ERROR(up(Role::kSharedUp, l, -1, &lw.shared_up));
        RETURN_IF_ERROR(up(Role::kSharedDown, l, -1, &lw.shared_down));
        if (spec.shared_expert_gate) RETURN_IF_ERROR(up(Role::kSharedGateInp, l, -1, &lw.shared_gate_inp));
      }
      if (options.expert_cache_slots < 0) {
        RETURN_IF_ERROR(UploadExperts(l));
      } else {  // gathered below, for the backend to keep in host memory; the biases stay resident
        RETURN_IF_ERROR(UploadExpertBiases(l));
        ExpertViews v;
        v.name = Cat(model_->source, ": blk.", l, " experts");
        v.gate_bias = lw.expert_refs.gate_bias;
        v.up_bias = lw.expert_refs.up_bias;
        v.down_bias = lw.expert_refs.down_bias;
        for (int e = 0; e < spec.n_experts; ++e) {
          ASSIGN_OR_RETURN(TensorView g, ws.Get({Role::kExpertGate, l, e}));
          ASSIGN_OR_RETURN(TensorView u, ws.Get({Role::kExpertUp, l, e}));
          ASSIGN_OR_RETURN(TensorView d, ws.Get({Role::kExpertDown, l, e}));
          v.gate.push_back(g);
          v.up.push_back(u);
          v.down.push_back(d);
        }
        lw.streamed = static_cast<int64_t>(streamed_views.size());
        streamed_views.push_back(std::move(v));
      }
    } else if (lw.dense_streamed < 0) {
      RETURN_IF_ERROR(up(Role::kFfnGate, l, -1, &lw.gate));
      RETURN_IF_ERROR(up(Role::kFfnUp, l, -1, &lw.up));
      RETURN_IF_ERROR(up(Role::kFfnDown, l, -1, &lw.down));
    }
  }
  if (streamed_views.empty()) return absl::OkStatus();
  ExpertStreamingOptions so;
  so.cache_slots = options.expert_cache_slots;
  so.progress = options.expert_copy_progress;
  if (options.streaming != nullptr) {
    ASSIGN_OR_RETURN(streamed_, options.streaming->PrepareExperts(streamed_views, so));
  }
  expert_cache_slots_ = options.expert_cache_slots;
  for (int l = 0; l < spec.n_layers; ++l) {
    LayerWeights& lw = layers_[l];
    if (lw.streamed < 0) continue;
    if (streamed_ == nullptr) {  // no streaming: uploaded with the rest
      lw.streamed = -1;
      RETURN_IF_ERROR(UploadExperts(l));
    } else if (device_routed_experts_) {
      lw.device_experts = &streamed_->layer(static_cast<size_t>(lw.streamed));
    }
  }
  BindHostExperts(options, streamed_views.size());
  return absl::OkStatus();
}

absl::Status Transformer::PrepareDenseStreaming(const TransformerOptions& options) {
  const ModelSpec& spec = model_->spec;
  if (options.streamed_dense_layers.empty()) return absl::OkStatus();
  if (options.dense_ring_layers < 1) {
    return InvalidArgument(model_->source, ": a ring of ", options.dense_ring_layers,
                           " layer buffers for the streamed dense layers (at least 1)");
  }
  std::vector<int> listed = options.streamed_dense_layers;
  std::sort(listed.begin(), listed.end());
  for (size_t i = 0; i < listed.size(); ++i) {
    const int l = listed[i];
    if (l < 0 || l >= spec.n_layers) {
      return InvalidArgument(model_->source, ": streamed dense layer ", l, " is outside the model's ",
                             spec.n_layers, " layers");
    }
    if (spec.layer_is_moe[l]) {
      return InvalidArgument(model_->source, ": layer ", l, " is an MoE layer; only a dense layer's FFN streams "
                             "through the layer ring (experts stream through the expert cache)");
    }
    if (i > 0 && listed[i - 1] == l) return InvalidArgument(model_->source, ": dense layer ", l, " listed twice");
  }
  // Layer order: the pass acquires them in this order.
  std::vector<LayerViews> views;
  for (const int l : listed) {
    LayerViews v;
    v.name = Cat(model_->source, ": blk.", l, " ffn");
    for (const Role role : {Role::kFfnGate, Role::kFfnUp, Role::kFfnDown}) {
      ASSIGN_OR_RETURN(TensorView t, model_->weights.Get({role, l, -1}));
      v.weights.push_back(t);
    }
    views.push_back(std::move(v));
  }
  LayerStreamingOptions lo;
  lo.ring_layers = options.dense_ring_layers;
  lo.progress = options.dense_copy_progress;
  if (options.streaming == nullptr) return absl::OkStatus();  // no streaming: uploaded with the rest
  ASSIGN_OR_RETURN(dense_stream_, options.streaming->PrepareLayers(views, lo));
  for (size_t i = 0; i < listed.size(); ++i) layers_[listed[i]].dense_streamed = static_cast<int64_t>(i);
  return absl::OkStatus();
}

absl::StatusOr<LayerStreamStats> Transformer::dense_stream_stats() const {
  if (dense_stream_ == nullptr) return absl::FailedPreconditionError("the model's dense layers do not stream");
  LayerStreamStats s = dense_stream_->Stats();  // the passes it queued eagerly
  s.passes += dense_replays_;
  s.copied_bytes = s.passes * static_cast<int64_t>(s.pass_bytes);
  return s;
}

absl::StatusOr<ExpertStreamStats> Transformer::expert_stream_stats() const {
  if (streamed_ == nullptr) return absl::FailedPreconditionError("the model's experts do not stream");
  ASSIGN_OR_RETURN(ExpertStreamStats stats, streamed_->Stats());
  stats.layer_passes += host_routed_layer_passes_;
  if (host_experts_ != nullptr) {
    const HostExpertStats h = host_experts_->Stats();
    stats.host_experts = h.experts;
    stats.host_seconds = h.seconds;
    stats.host_activation_bytes = h.activation_bytes;
  }
  return stats;
}

bool Transformer::StreamsOnHost(int64_t n) const {
  // The rule of the CUDA backend's streamed sets (DeviceExpertFetch::Takes): the union must fit.
  const ModelSpec& spec = model_->spec;
  if (host_experts_ != nullptr && host_experts_->TakesPass(n)) return true;
  return streamed_ != nullptr && n * spec.n_experts_used > expert_cache_slots_ && spec.n_experts > expert_cache_slots_;
}

absl::Status Transformer::EmptyExpertCache() {
  if (streamed_ == nullptr) return absl::FailedPreconditionError("the model's experts do not stream");
  return streamed_->EmptyCache();
}

absl::Status Transformer::SetRoutingOverride(std::shared_ptr<const RoutingTable> trace) {
  const ModelSpec& spec = model_->spec;
  if (trace != nullptr) {
    const int64_t moe_layers = std::count(spec.layer_is_moe.begin(), spec.layer_is_moe.end(), true);
    if (trace->moe_layers() != moe_layers || trace->n_experts() != spec.n_experts ||
        trace->top_k() != spec.n_experts_used) {
      return InvalidArgument(model_->source, ": a routing table of ", trace->moe_layers(), " MoE layers, top-",
                             trace->top_k(), " of ", trace->n_experts(), " experts for a model of ", moe_layers,
                             ", top-", spec.n_experts_used, " of ", spec.n_experts);
    }
  }
  RETURN_IF_ERROR(backend_->PrepareRoutingOverride(trace));
  // A captured pass has the override's launches or not; another trace in their place is the backend's
  // business (it moves the device copy, or rewrites it where the graphs read it).
  if ((routing_override_ == nullptr) != (trace == nullptr)) ++scratch_generation_;
  routing_override_ = std::move(trace);
  return absl::OkStatus();
}

Transformer::LayerRefs Transformer::layer_refs(int64_t layer) const {
  const LayerWeights& w = layers_[layer];
  return {w.attn_norm.get(), w.q.get(), w.k.get(), w.v.get(), w.o.get(), w.q_norm.get(),
          w.k_norm.get(), w.ffn_norm.get(), w.gate.get(), w.up.get(), w.down.get()};
}

absl::Status Transformer::EnsureScratch(int64_t n, int64_t logit_rows) {
  const ModelSpec& spec = model_->spec;
  if (scratch_ == nullptr || scratch_->capacity < n) {
    auto s = std::make_unique<Scratch>();
    s->capacity = n;
    if (scratch_ != nullptr) {  // the logits buffer stays as it is
      s->logit_capacity = scratch_->logit_capacity;
      s->logits = std::move(scratch_->logits);
    }
    auto alloc = [&](int64_t cols, std::unique_ptr<Buffer>* dst) -> absl::Status {
      ASSIGN_OR_RETURN(*dst, backend_->NewBuffer(n, cols));
      return absl::OkStatus();
    };
    const bool any_dense = std::count(spec.layer_is_moe.begin(), spec.layer_is_moe.end(), false) > 0;
    const bool any_moe = std::count(spec.layer_is_moe.begin(), spec.layer_is_moe.end(), true) > 0;
    RETURN_IF_ERROR(alloc(spec.hidden, &s->h));
    RETURN_IF_ERROR(alloc(spec.hidden, &s->x));
    RETURN_IF_ERROR(alloc(spec.q_dim(), &s->q));
    RETURN_IF_ERROR(alloc(spec.kv_dim(), &s->k));
    RETURN_IF_ERROR(alloc(spec.kv_dim(), &s->v));
    RETURN_IF_ERROR(alloc(spec.q_dim(), &s->attn));
    RETURN_IF_ERROR(alloc(spec.hidden, &s->out));
    if (any_dense) {
      RETURN_IF_ERROR(alloc(spec.ffn_dim, &s->ffn_g));
      RETURN_IF_ERROR(alloc(spec.ffn_dim, &s->ffn_u));
    }
    if (any_moe && spec.shared_expert_ffn_dim > 0) {
      RETURN_IF_ERROR(alloc(spec.shared_expert_ffn_dim, &s->sh_g));
      RETURN_IF_ERROR(alloc(spec.shared_expert_ffn_dim, &s->sh_u));
      RETURN_IF_ERROR(alloc(spec.hidden, &s->sh_y));
      if (spec.shared_expert_gate) RETURN_IF_ERROR(alloc(1, &s->sh_gate));
    }
    if (any_moe) {
      RETURN_IF_ERROR(alloc(spec.n_experts, &s->router_logits));
      RETURN_IF_ERROR(alloc(spec.hidden, &s->ex_x));
      RETURN_IF_ERROR(alloc(spec.hidden, &s->ex_y));
      RETURN_IF_ERROR(alloc(spec.expert_ffn_dim, &s->ex_g));
      RETURN_IF_ERROR(alloc(spec.expert_ffn_dim, &s->ex_u));
    }
    scratch_ = std::move(s);
    ++scratch_generation_;
  }
  Scratch& s = *scratch_;
  if (logit_rows > 0 && s.logit_capacity < logit_rows) {
    s.logits.reset();  // before the new one: the arena may reuse its block
    s.logit_capacity = 0;
    const int64_t capacity = std::max(logit_rows, kLogitRowsReserved);
    ASSIGN_OR_RETURN(s.logits, backend_->NewBuffer(capacity, spec.vocab_size));
    s.logit_capacity = capacity;
    ++scratch_generation_;
  }
  for (Buffer* b : s.activations()) RETURN_IF_ERROR(b->set_rows(n));
  if (logit_rows > 0) RETURN_IF_ERROR(s.logits->set_rows(logit_rows));
  return absl::OkStatus();
}

absl::Status Transformer::Forward(std::span<const int32_t> tokens, std::vector<float>* logits) {
  ASSIGN_OR_RETURN(const Buffer* out, ForwardResident(tokens));
  return ReadBack(*out, logits);
}

absl::Status Transformer::ForwardLast(std::span<const int32_t> tokens, std::vector<float>* logits) {
  ASSIGN_OR_RETURN(const Buffer* out, ForwardResident(tokens, LogitRows::kLast));
  return ReadBack(*out, logits);
}

absl::Status Transformer::Feed(std::span<const int32_t> tokens) {
  return ForwardResident(tokens, LogitRows::kNone).status();
}

absl::StatusOr<const Buffer*> Transformer::ForwardResident(std::span<const int32_t> tokens, LogitRows rows) {
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) positions[i] = static_cast<int32_t>(n_past() + i);
  return ForwardResident(tokens, positions, {}, rows);
}

absl::Status Transformer::ForwardMasked(std::span<const int32_t> tokens,
                                        std::span<const int32_t> positions,
                                        std::span<const uint8_t> mask, std::vector<float>* logits) {
  ASSIGN_OR_RETURN(const Buffer* out, ForwardResident(tokens, positions, mask));
  return ReadBack(*out, logits);
}

absl::Status Transformer::ReadBack(const Buffer& out, std::vector<float>* logits) const {
  logits->resize(out.rows() * out.cols());
  return backend_->Read(out, *logits);
}

absl::StatusOr<const Buffer*> Transformer::ForwardResident(std::span<const int32_t> tokens,
                                                           std::span<const int32_t> positions,
                                                           std::span<const uint8_t> mask, LogitRows rows) {
  const ModelSpec& spec = model_->spec;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return InvalidArgument("forward: no tokens");
  RETURN_IF_ERROR(CheckRoom(n));
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= spec.vocab_size) {
      return InvalidArgument("token id ", tokens[i], " at position ", n_past() + i,
                             " is outside the vocabulary [0, ", spec.vocab_size, ")");
    }
  }
  if (static_cast<int64_t>(positions.size()) != n) {
    return InvalidArgument("forward: ", positions.size(), " positions for ", n, " tokens");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (positions[i] < 0) return InvalidArgument("forward: negative position ", positions[i]);
  }
  if (!mask.empty()) {
    if (static_cast<int64_t>(mask.size()) != n * n) {
      return InvalidArgument("forward: mask of ", mask.size(), " entries for ", n, " tokens (need n*n)");
    }
    for (int64_t i = 0; i < n; ++i) {
      if (mask[i * n + i] == 0) return InvalidArgument("forward: mask row ", i, " does not see itself");
    }
  }

  const int64_t logit_rows = rows == LogitRows::kAll ? n : rows == LogitRows::kLast ? 1 : 0;
  RETURN_IF_ERROR(EnsureScratch(n, logit_rows));
  Scratch& s = *scratch_;
  pass_positions_ = positions;
  RETURN_IF_ERROR(backend_->Embed(*token_embd_, tokens, s.h.get()));
  // Streamed dense layers: their ring's copies begin with the pass, and the pass ends joined with them
  // even when a layer fails (a capture must not end with the copy stream left out).
  if (dense_stream_ != nullptr) RETURN_IF_ERROR(dense_stream_->BeginPass());
  absl::Status layers = absl::OkStatus();
  for (int64_t l = 0; l < spec.n_layers && layers.ok(); ++l) {
    layers = AttentionBlock(l, positions, mask);
    if (layers.ok()) layers = spec.layer_is_moe[l] ? MoeFfnBlock(l) : DenseFfnBlock(l);
  }
  if (dense_stream_ != nullptr) {
    const absl::Status ended = dense_stream_->EndPass();
    if (layers.ok()) layers = ended;
  }
  RETURN_IF_ERROR(layers);
  if (logit_rows > 0) {
    const Buffer* h = s.h.get();
    if (logit_rows < n) {  // the last row alone, through the free block-output buffer
      const int32_t last = static_cast<int32_t>(n - 1);
      RETURN_IF_ERROR(s.out->set_rows(1));
      RETURN_IF_ERROR(s.x->set_rows(1));
      RETURN_IF_ERROR(backend_->GatherRows(*s.h, {&last, 1}, s.out.get()));
      h = s.out.get();
    }
    // Row-wise norm, and a head product whose elements do not depend on the rows beside them
    // (docs/design.md §6.6; on the GPU a pass of more than 16 rows is the one exception).
    RETURN_IF_ERROR(backend_->RmsNorm(*h, *output_norm_, spec.hidden, spec.rms_eps, s.x.get()));
    RETURN_IF_ERROR(backend_->MatMul(*s.x, output_ ? *output_ : *token_embd_, s.logits.get()));
  }
  RETURN_IF_ERROR(cache_.Append(n));
  return logit_rows > 0 ? s.logits.get() : nullptr;
}

absl::Status Transformer::CheckRoom(int64_t n) const {
  if (n_past() + n <= max_context()) return absl::OkStatus();
  return InvalidArgument("forward: ", n_past(), " cached + ", n, " new positions exceed the context of ",
                         max_context(), " (raise it with -c)");
}

absl::StatusOr<const Buffer*> Transformer::CommitReplayedPass(int64_t n) {
  if (scratch_ == nullptr || n <= 0 || n > scratch_->capacity || n > scratch_->logit_capacity) {
    return absl::FailedPreconditionError(Cat("replayed pass of ", n, " positions: no captured pass of that size"));
  }
  RETURN_IF_ERROR(CheckRoom(n));
  for (Buffer* b : scratch_->activations()) RETURN_IF_ERROR(b->set_rows(n));
  RETURN_IF_ERROR(scratch_->logits->set_rows(n));
  RETURN_IF_ERROR(cache_.Append(n));
  if (dense_stream_ != nullptr) ++dense_replays_;  // the replayed pass copied the streamed layers again
  return scratch_->logits.get();
}

absl::Status Transformer::AttentionBlock(int64_t layer, std::span<const int32_t> positions,
                                         std::span<const uint8_t> mask) {
  const ModelSpec& spec = model_->spec;
  const LayerWeights& lw = layers_[layer];
  Scratch& s = *scratch_;
  Backend& be = *backend_;
  RETURN_IF_ERROR(be.RmsNorm(*s.h, *lw.attn_norm, spec.hidden, spec.rms_eps, s.x.get()));
  const Weight* qkv[3] = {lw.q.get(), lw.k.get(), lw.v.get()};
  Buffer* qkv_out[3] = {s.q.get(), s.k.get(), s.v.get()};
  RETURN_IF_ERROR(be.MatMulMany(*s.x, qkv, qkv_out));
  if (lw.q_bias != nullptr) {
    RETURN_IF_ERROR(be.AddBias(*lw.q_bias, s.q.get()));
    RETURN_IF_ERROR(be.AddBias(*lw.k_bias, s.k.get()));
    RETURN_IF_ERROR(be.AddBias(*lw.v_bias, s.v.get()));
  }
  if (!sequences_.empty()) return SequencesAttention(layer, positions);
  // q/k norm per head (Qwen3) before RoPE, then K and V into the cache; V is neither normed nor roped.
  RETURN_IF_ERROR(cache_.NormRopeStore(be, layer, NormRopeFor(layer, positions), s.q.get(), s.k.get(), *s.v));
  RETURN_IF_ERROR(be.Attention(*s.q, cache_.k(layer), cache_.v(layer), ShapeFor(layer, cache_, positions),
                               mask, s.attn.get()));
  return OutputProjection(layer);
}

// One definition of a layer's per-head norm and RoPE, and of its attention's shape, for a pass of its
// own and for each sequence of a shared pass, so an architecture's fields are set in one place.
Backend::HeadNormRope Transformer::NormRopeFor(int64_t layer, std::span<const int32_t> positions) const {
  const ModelSpec& spec = model_->spec;
  const LayerWeights& lw = layers_[layer];
  Backend::HeadNormRope nr;
  if (spec.qk_norm) {
    nr.q_norm = lw.q_norm.get();
    nr.k_norm = lw.k_norm.get();
  }
  nr.eps = spec.rms_eps;
  nr.head_dim = spec.head_dim;
  nr.positions = positions;
  nr.theta = spec.rope_theta;
  nr.inv_freq = rope_inv_freq_;  // empty unless the model scales its RoPE
  nr.style = spec.rope_style;
  nr.rope_dim = spec.rotary_dim();
  nr.rope_factor = rope_factor_;
  return nr;
}

AttentionShape Transformer::ShapeFor(int64_t layer, const KvCache& cache,
                                     std::span<const int32_t> positions) const {
  const ModelSpec& spec = model_->spec;
  AttentionShape shape;
  shape.n_heads = spec.n_heads;
  shape.n_kv_heads = spec.n_kv_heads;
  shape.head_dim = spec.head_dim;
  shape.n_prefix = cache.size();
  shape.scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
  shape.sinks = layers_[layer].sinks.get();
  if (spec.is_swa(layer)) {
    shape.window = spec.sliding_window;
    shape.positions = positions;
    shape.ring = cache.ring_rows(layer);  // a sliding layer's ring (KvCache), or 0
  }
  return shape;
}

// h += o(attn) (+ o's bias before the residual, as transformers adds it).
absl::Status Transformer::OutputProjection(int64_t layer) {
  const LayerWeights& lw = layers_[layer];
  Scratch& s = *scratch_;
  Backend& be = *backend_;
  if (lw.o_bias == nullptr) return be.MatMulAdd(*s.attn, *lw.o, s.out.get(), s.h.get());
  RETURN_IF_ERROR(be.MatMul(*s.attn, *lw.o, s.out.get()));
  RETURN_IF_ERROR(be.AddBias(*lw.o_bias, s.out.get()));
  return be.Add(*s.out, s.h.get());
}

absl::Status Transformer::DenseFfnBlock(int64_t layer) {
  const ModelSpec& spec = model_->spec;
  const LayerWeights& lw = layers_[layer];
  Scratch& s = *scratch_;
  Backend& be = *backend_;
  RETURN_IF_ERROR(be.RmsNorm(*s.h, *lw.ffn_norm, spec.hidden, spec.rms_eps, s.x.get()));
  if (lw.dense_streamed < 0) {
    RETURN_IF_ERROR(be.MatMulSwiGlu(*s.x, *lw.gate, *lw.up, s.ffn_u.get(), s.ffn_g.get()));
    return be.MatMulAdd(*s.ffn_g, *lw.down, s.out.get(), s.h.get());
  }
  // The FFN from its ring buffer: the same kernels on the same bytes as the resident weights.
  const size_t i = static_cast<size_t>(lw.dense_streamed);
  StreamedLayers& ring = *dense_stream_;
  RETURN_IF_ERROR(ring.Acquire(i));
  RETURN_IF_ERROR(be.MatMulSwiGlu(*s.x, ring.weight(i, 0), ring.weight(i, 1), s.ffn_u.get(), s.ffn_g.get()));
  RETURN_IF_ERROR(be.MatMulAdd(*s.ffn_g, ring.weight(i, 2), s.out.get(), s.h.get()));
  return ring.Release(i);
}

absl::Status Transformer::MoeFfnBlock(int64_t layer) {
  const ModelSpec& spec = model_->spec;
  const LayerWeights& lw = layers_[layer];
  Scratch& s = *scratch_;
  Backend& be = *backend_;
  RETURN_IF_ERROR(be.RmsNorm(*s.h, *lw.ffn_norm, spec.hidden, spec.rms_eps, s.x.get()));
  RETURN_IF_ERROR(be.MatMul(*s.x, *lw.router, s.router_logits.get()));
  if (lw.router_bias != nullptr) RETURN_IF_ERROR(be.AddBias(*lw.router_bias, s.router_logits.get()));
  if (general_moe_) return MoeFfnGeneral(layer);
  if (routing_override_ != nullptr) {  // benchmarks only: the trace's ids at the pass's positions
    const auto& is_moe = spec.layer_is_moe;
    const int moe_layer = static_cast<int>(std::count(is_moe.begin(), is_moe.begin() + layer, true));
    RETURN_IF_ERROR(be.OverrideNextRouting(moe_layer, pass_positions_));
  }
  if (lw.streamed >= 0 && host_experts_ != nullptr && host_experts_->TakesPass(s.x->rows())) {
    const HostRoutingScratch split{s.ex_x.get(), s.ex_y.get(), s.ex_g.get(), s.ex_u.get()};
    RETURN_IF_ERROR(SplitStreamedExperts(static_cast<size_t>(lw.streamed), *s.x, *s.router_logits, split, s.out.get()));
    return be.Add(*s.out, s.h.get());
  }
  if (lw.device_experts != nullptr) {  // on the device, the experts' sum added to the residual there
    ASSIGN_OR_RETURN(const bool on_device, be.RouteAndRunExperts(*s.x, *s.router_logits, spec.n_experts_used,
                                                                 spec.router_norm, *lw.device_experts, s.h.get(), true));
    if (on_device) return absl::OkStatus();
  }
  RETURN_IF_ERROR(HostRoutedExperts(layer, RouterParams{spec.router_norm}, ExpertFfnOptions{}));
  return be.Add(*s.out, s.h.get());
}

absl::StatusOr<KvCache> Transformer::NewKvCache() const {
  const ModelSpec& spec = model_->spec;
  return KvCache::Create(*backend_, spec.n_layers, cache_.max_positions(), spec.kv_dim(), cache_.dtype(),
                         cache_.ring());
}

absl::Status Transformer::ForwardSequences(std::span<const SequenceRows> sequences, std::vector<float>* logits) {
  const ModelSpec& spec = model_->spec;
  if (sequences.empty()) return InvalidArgument("forward sequences: no sequences");
  std::vector<int32_t> tokens, positions;
  std::vector<int64_t> first_row;
  int64_t longest = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const SequenceRows& q = sequences[i];
    const int64_t n = static_cast<int64_t>(q.tokens.size());
    if (q.cache == nullptr) return InvalidArgument("forward sequences: sequence ", i, " has no KV cache");
    if (n == 0) return InvalidArgument("forward sequences: sequence ", i, " has no tokens");
    if (q.cache == &cache_) return InvalidArgument("forward sequences: sequence ", i, " uses the model's own cache");
    for (size_t j = 0; j < i; ++j) {
      if (sequences[j].cache == q.cache) {
        return InvalidArgument("forward sequences: sequences ", j, " and ", i, " share one KV cache");
      }
    }
    if (q.cache->n_layers() != spec.n_layers || q.cache->k(0).cols() != spec.kv_dim()) {
      return InvalidArgument("forward sequences: sequence ", i, "'s KV cache is not of this model's shape");
    }
    if (q.cache->size() + n > q.cache->max_positions()) {
      return InvalidArgument("forward sequences: sequence ", i, ": ", q.cache->size(), " cached + ", n,
                             " new positions exceed its context of ", q.cache->max_positions());
    }
    first_row.push_back(static_cast<int64_t>(tokens.size()));
    for (int64_t j = 0; j < n; ++j) {
      if (q.tokens[j] < 0 || q.tokens[j] >= spec.vocab_size) {
        return InvalidArgument("forward sequences: sequence ", i, ": token id ", q.tokens[j],
                               " is outside the vocabulary [0, ", spec.vocab_size, ")");
      }
      tokens.push_back(q.tokens[j]);
      positions.push_back(static_cast<int32_t>(q.cache->size() + j));
    }
    longest = std::max(longest, n);
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (sequence_scratch_ == nullptr || sequence_scratch_->capacity < longest) {
    auto ss = std::make_unique<SequenceScratch>();
    ss->capacity = longest;
    ASSIGN_OR_RETURN(ss->q, backend_->NewBuffer(longest, spec.q_dim()));
    ASSIGN_OR_RETURN(ss->k, backend_->NewBuffer(longest, spec.kv_dim()));
    ASSIGN_OR_RETURN(ss->v, backend_->NewBuffer(longest, spec.kv_dim()));
    ASSIGN_OR_RETURN(ss->attn, backend_->NewBuffer(longest, spec.q_dim()));
    sequence_scratch_ = std::move(ss);
  }
  // The pass is ForwardResident's with the attention split by sequence (AttentionBlock asks
  // sequences_); the model's own cache is neither read nor written, so its Append is skipped by
  // running the layers here rather than through ForwardResident.
  RETURN_IF_ERROR(EnsureScratch(n, n));
  Scratch& s = *scratch_;
  sequences_ = sequences;
  sequence_first_row_ = std::move(first_row);
  pass_positions_ = positions;
  absl::Status layers = backend_->Embed(*token_embd_, tokens, s.h.get());
  if (layers.ok() && dense_stream_ != nullptr) layers = dense_stream_->BeginPass();
  for (int64_t l = 0; l < spec.n_layers && layers.ok(); ++l) {
    layers = AttentionBlock(l, positions, {});
    if (layers.ok()) layers = spec.layer_is_moe[l] ? MoeFfnBlock(l) : DenseFfnBlock(l);
  }
  if (dense_stream_ != nullptr) {
    const absl::Status ended = dense_stream_->EndPass();
    if (layers.ok()) layers = ended;
  }
  sequences_ = {};
  RETURN_IF_ERROR(layers);
  RETURN_IF_ERROR(backend_->RmsNorm(*s.h, *output_norm_, spec.hidden, spec.rms_eps, s.x.get()));
  RETURN_IF_ERROR(backend_->MatMul(*s.x, output_ ? *output_ : *token_embd_, s.logits.get()));
  for (const SequenceRows& q : sequences) RETURN_IF_ERROR(q.cache->Append(static_cast<int64_t>(q.tokens.size())));
  return ReadBack(*s.logits, logits);
}

absl::Status Transformer::SequencesAttention(int64_t layer, std::span<const int32_t> positions) {
  Scratch& s = *scratch_;
  SequenceScratch& ss = *sequence_scratch_;
  Backend& be = *backend_;
  std::vector<int32_t> rows;
  for (size_t i = 0; i < sequences_.size(); ++i) {
    KvCache& cache = *sequences_[i].cache;
    const int64_t first = sequence_first_row_[i];
    const int64_t n = static_cast<int64_t>(sequences_[i].tokens.size());
    rows.resize(n);
    for (int64_t j = 0; j < n; ++j) rows[j] = static_cast<int32_t>(first + j);
    for (Buffer* b : {ss.q.get(), ss.k.get(), ss.v.get(), ss.attn.get()}) RETURN_IF_ERROR(b->set_rows(n));
    RETURN_IF_ERROR(be.GatherRows(*s.q, rows, ss.q.get()));
    RETURN_IF_ERROR(be.GatherRows(*s.k, rows, ss.k.get()));
    RETURN_IF_ERROR(be.GatherRows(*s.v, rows, ss.v.get()));
    // The sequence's rows as AttentionBlock treats a pass of its own: the same row-wise norm and
    // RoPE, its K and V into its cache, causal attention over that cache.
    const std::span<const int32_t> own = positions.subspan(first, n);
    RETURN_IF_ERROR(cache.NormRopeStore(be, layer, NormRopeFor(layer, own), ss.q.get(), ss.k.get(), *ss.v));
    RETURN_IF_ERROR(
        be.Attention(*ss.q, cache.k(layer), cache.v(layer), ShapeFor(layer, cache, own), {}, ss.attn.get()));
    RETURN_IF_ERROR(be.CopyRows(*ss.attn, first, s.attn.get()));
  }
  return OutputProjection(layer);
}

}  // namespace specgen

namespace specgen {

absl::Status Transformer::HostRoutedExperts(int64_t layer, const RouterParams& router, const ExpertFfnOptions& ffn) {
  const ModelSpec& spec = model_->spec;
  const LayerWeights& lw = layers_[layer];
  Scratch& s = *scratch_;
  const HostRoutingScratch scratch{s.ex_x.get(), s.ex_y.get(), s.ex_g.get(), s.ex_u.get()};
  if (lw.streamed < 0) {
    return RunRoutedExperts(*backend_, *s.x, *s.router_logits, spec.n_experts_used, router, ffn, lw.expert_refs,
                            scratch, s.out.get());
  }
  // Each routed expert staged into VRAM once (its biases are resident: Stage returns them too).
  StreamedExperts* streamed = streamed_.get();
  const size_t index = static_cast<size_t>(lw.streamed);
  ++host_routed_layer_passes_;
  return RunRoutedExperts(
      *backend_, *s.x, *s.router_logits, spec.n_experts_used, router, ffn, spec.n_experts,
      [streamed, index](int e) { return streamed->Stage(index, e); }, scratch, s.out.get());
}

absl::Status Transformer::MoeFfnGeneral(int64_t layer) {
  const ModelSpec& spec = model_->spec;
  const LayerWeights& lw = layers_[layer];
  Scratch& s = *scratch_;
  Backend& be = *backend_;
  if (routing_override_ != nullptr) {
    const auto& is_moe = spec.layer_is_moe;
    const int moe_layer = static_cast<int>(std::count(is_moe.begin(), is_moe.begin() + layer, true));
    RETURN_IF_ERROR(be.OverrideNextRouting(moe_layer, pass_positions_));
  }
  RouterParams router;
  router.norm = spec.router_norm;
  router.selection_bias = lw.selection_bias.get();
  router.n_groups = spec.n_expert_groups;
  router.groups_used = spec.n_groups_used;
  router.scale = spec.routed_scale;
  ExpertFfnOptions ffn;
  ffn.act = spec.expert_act;
  ffn.alpha = spec.swiglu_alpha;
  ffn.limit = spec.swiglu_limit;
  // With a shared expert the routed sum goes to `out`, the shared expert is added to it, then out to
  // the residual: the host path's order of additions. Without one, the device adds the sum to the
  // residual itself (accumulate: Add's bits, one kernel fewer).
  const bool shared = lw.shared_gate != nullptr;
  bool on_device = false;
  if (lw.device_experts != nullptr) {
    ASSIGN_OR_RETURN(on_device, be.RouteAndRunExperts(*s.x, *s.router_logits, spec.n_experts_used, router, ffn,
                                                      *lw.device_experts, shared ? s.out.get() : s.h.get(), !shared));
    if (on_device && !shared) return absl::OkStatus();
  }
  if (!on_device) RETURN_IF_ERROR(HostRoutedExperts(layer, router, ffn));
  if (shared) {
    // The shared expert on the same normed input, added to the routed sum (transformers' order).
    RETURN_IF_ERROR(be.MatMulSwiGlu(*s.x, *lw.shared_gate, *lw.shared_up, s.sh_u.get(), s.sh_g.get()));
    RETURN_IF_ERROR(be.MatMul(*s.sh_g, *lw.shared_down, s.sh_y.get()));
    if (lw.shared_gate_inp != nullptr) {
      RETURN_IF_ERROR(be.MatMul(*s.x, *lw.shared_gate_inp, s.sh_gate.get()));
      RETURN_IF_ERROR(be.ScaleRowsBySigmoid(*s.sh_gate, s.sh_y.get()));
    }
    RETURN_IF_ERROR(be.Add(*s.sh_y, s.out.get()));
  }
  return be.Add(*s.out, s.h.get());
}

}  // namespace specgen
