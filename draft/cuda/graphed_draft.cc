#include "draft/cuda/graphed_draft.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/core/status_macros.h"
#include "kernels/attention.cuh"
#include "kernels/attention_choice.h"
#include "kernels/attention_simple.cuh"
#include "kernels/cuda_check.h"
#include "kernels/decode_fused.cuh"
#include "kernels/split_row_gemv.cuh"

namespace specgen {
namespace {

using kernels::ElemType;

bool IsHalfType(const Weight* w) {
  return w != nullptr && (CudaBackend::Type(*w) == ElemType::kBF16 ||
                          CudaBackend::Type(*w) == ElemType::kF16);
}

// A matrix the fused GEMVs take: 16-bit, or packed in a GGUF block type (kernels/decode_fused.cuh).
bool IsGemvType(const Weight* w) {
  return w != nullptr && (IsHalfType(w) || kernels::IsPacked(CudaBackend::Type(*w)));
}


}  // namespace

const char* DraftDecodePathName(DraftDecodePath path) {
  switch (path) {
    case DraftDecodePath::kTransformer: return "transformer";
    case DraftDecodePath::kFused: return "fused";
    case DraftDecodePath::kGraph: return "graph";
  }
  return "?";
}

std::string GraphedDraft::Unsupported(const Transformer& lm) {
  const ModelSpec& s = lm.spec();
  if (lm.backend().name() != "cuda") return "not on the CUDA backend";
  for (int64_t l = 0; l < s.n_layers; ++l) {
    if (s.layer_is_moe[l]) return Cat("layer ", l, " is MoE (its expert union needs the host)");
  }
  const auto fits = [](int64_t in) { return in > 0 && in % 8 == 0 && in <= kernels::kFusedGemvMaxIn; };
  if (!fits(s.hidden) || !fits(s.q_dim()) || !fits(s.ffn_dim)) {
    return Cat("hidden ", s.hidden, ", q_dim ", s.q_dim(), ", ffn ", s.ffn_dim,
               " are not multiples of 8 up to ", kernels::kFusedGemvMaxIn);
  }
  if (s.head_dim % 2 != 0 || s.head_dim > 256 || s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads != 0) {
    return Cat("head_dim ", s.head_dim, " with ", s.n_heads, "/", s.n_kv_heads, " heads");
  }
  // Every matrix 16-bit or packed; the matrices of one launch (q, k, v; gate, up) of one type.
  const auto type_name = [](const Weight* w) { return w ? kernels::ElemTypeName(CudaBackend::Type(*w)) : "none"; };
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const Transformer::LayerRefs r = lm.layer_refs(l);
    for (const Weight* w : {r.q, r.k, r.v, r.o, r.gate, r.up, r.down}) {
      if (!IsGemvType(w)) return Cat("layer ", l, ": a projection of ", type_name(w), " (bf16, f16 or packed)");
    }
    const ElemType q = CudaBackend::Type(*r.q), gate = CudaBackend::Type(*r.gate);
    if (CudaBackend::Type(*r.k) != q || CudaBackend::Type(*r.v) != q) {
      return Cat("layer ", l, ": q, k and v of different types (", type_name(r.q), ", ", type_name(r.k), ", ",
                 type_name(r.v), ")");
    }
    if (CudaBackend::Type(*r.up) != gate) {
      return Cat("layer ", l, ": gate and up of different types (", type_name(r.gate), ", ", type_name(r.up), ")");
    }
  }
  if (!IsGemvType(&lm.output_head())) return Cat("the output head is ", type_name(&lm.output_head()));
  return "";
}

absl::StatusOr<std::unique_ptr<GraphedDraft>> GraphedDraft::Create(CudaBackend* backend, Transformer* lm,
                                                                   DraftDecodePath path,
                                                                   const GraphedDraftHooks& hooks) {
  if (backend == nullptr || lm == nullptr || &lm->backend() != backend) {
    return InvalidArgument("graphed draft: the model must run on the given CUDA backend");
  }
  if (path == DraftDecodePath::kTransformer) {
    return InvalidArgument("graphed draft: the Transformer path is not one of its paths");
  }
  if (hooks.gemv_blocks_per_sm < 1 || hooks.qkv_rows_per_warp < 0 || hooks.gate_up_rows_per_warp < 0) {
    return InvalidArgument("graphed draft hooks: ", hooks.gemv_blocks_per_sm, " GEMV blocks a multiprocessor, ",
                           hooks.qkv_rows_per_warp, " / ", hooks.gate_up_rows_per_warp,
                           " QKV / gate-up rows a warp (want >= 1, >= 0, >= 0)");
  }
  if (const std::string why = Unsupported(*lm); !why.empty()) {
    return absl::FailedPreconditionError(Cat("graphed draft: ", why));
  }
  std::unique_ptr<GraphedDraft> g(new GraphedDraft(backend, lm, path != DraftDecodePath::kFused, hooks));
  RETURN_IF_ERROR(g->Allocate());
  return g;
}

GraphedDraft::GraphedDraft(CudaBackend* backend, Transformer* lm, bool use_graph,
                           const GraphedDraftHooks& hooks)
    : backend_(backend), lm_(lm), use_graph_(use_graph), hooks_(hooks) {}

GraphedDraft::~GraphedDraft() {
  (void)backend_->Synchronize(SyncKind::kOther);
  for (CudaGraph& g : graphs_) g.Reset();
  DeviceArena& a = backend_->arena();
  for (void* p : {state_, static_cast<void*>(h_), static_cast<void*>(q_), static_cast<void*>(k_),
                  static_cast<void*>(v_), static_cast<void*>(attn_), static_cast<void*>(act_),
                  static_cast<void*>(logits_), attn_ws_, rope_table_}) {
    a.Free(p);
  }
}

absl::Status GraphedDraft::Allocate() {
  const ModelSpec& s = lm_->spec();
  DeviceArena& a = backend_->arena();
  auto floats = [&](int64_t n, const char* what, float** dst) -> absl::Status {
    ASSIGN_OR_RETURN(void* p, a.Allocate(static_cast<size_t>(n) * sizeof(float), what));
    *dst = static_cast<float*>(p);
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(state_, a.Allocate(sizeof(kernels::DecodeState), "graphed draft state"));
  RETURN_IF_ERROR(floats(s.hidden, "graphed draft residual", &h_));
  RETURN_IF_ERROR(floats(s.q_dim(), "graphed draft q", &q_));
  RETURN_IF_ERROR(floats(s.kv_dim(), "graphed draft k", &k_));
  RETURN_IF_ERROR(floats(s.kv_dim(), "graphed draft v", &v_));
  RETURN_IF_ERROR(floats(s.q_dim(), "graphed draft attention", &attn_));
  RETURN_IF_ERROR(floats(s.ffn_dim, "graphed draft FFN", &act_));
  RETURN_IF_ERROR(floats(s.vocab_size, "graphed draft logits", &logits_));
  // The attention kernel CudaBackend::Attention takes for one query over these caches.
  KvCache& cache = lm_->kv_cache();
  kernels::AttentionProblem problem;
  problem.head_dim = static_cast<int>(s.head_dim);
  problem.heads = static_cast<int>(s.n_heads);
  problem.kv_heads = static_cast<int>(s.n_kv_heads);
  problem.queries = 1;
  for (int64_t l = 0; l < s.n_layers; ++l) {
    for (const Buffer* b : {&cache.k(l), &cache.v(l)}) {
      problem.caches_aligned = problem.caches_aligned &&
                               reinterpret_cast<uintptr_t>(CudaBackend::CacheData(*b)) % 16 == 0;
    }
  }
  const kernels::AttentionKernel kernel = kernels::ChooseAttentionKernel(problem);
  decode_attention_ = kernel == kernels::AttentionKernel::kDecode;
  if (kernel != kernels::AttentionKernel::kSimple) {  // the simple kernel needs no workspace
    const int heads = problem.heads, kv_heads = problem.kv_heads, hd = problem.head_dim,
              keys = static_cast<int>(lm_->max_context());
    attn_ws_bytes_ = decode_attention_ ? kernels::DecodeAttentionWorkspaceBytes(heads, kv_heads, keys, hd)
                                       : kernels::AttentionWorkspaceBytes(1, heads, keys, hd);
    ASSIGN_OR_RETURN(attn_ws_, a.Allocate(attn_ws_bytes_, "graphed draft attention workspace"));
    // The decode kernel's per-query-head counters start at zero (each launch leaves them there).
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(attn_ws_, 0, attn_ws_bytes_, backend_->stream()));
  }
  // RoPE's cos/sin for every position of the cache, computed once (the same double arithmetic as the
  // per-call kernel, so the rotation is bit-identical).
  const int positions = static_cast<int>(lm_->kv_cache().max_positions());
  const int half = static_cast<int>(s.head_dim / 2);
  ASSIGN_OR_RETURN(rope_table_, a.Allocate(static_cast<size_t>(positions) * half * sizeof(float2),
                                           "graphed draft RoPE table"));
  SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchRopeTable(static_cast<float2*>(rope_table_), positions,
                                                        static_cast<int>(s.head_dim),
                                                        static_cast<double>(s.rope_theta),
                                                        backend_->stream()));
  int device = 0, sms = 0;
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  sms_ = std::max(sms, 1);
  max_blocks_ = sms_ * hooks_.gemv_blocks_per_sm;  // 8 blocks of 256 threads fill a multiprocessor
  programmatic_ = kernels::ProgrammaticLaunchSupported(device) && !hooks_.disable_programmatic_launch;
  return absl::OkStatus();
}

// Short contexts: a row a warp everywhere and the down projection as a split-row GEMV. Long contexts:
// gate/up at 2 row pairs a warp (a grid whose blocks start beside O's) and O split too: a split O's
// blocks crowd out the attention's and gate/up's early blocks where the attention is short, and its
// shorter chain wins where the attention is long (bench/e2e_gpu's BM_DraftDecode qkv_rows/gu_rows rows).
GraphedDraft::GemvShape GraphedDraft::ShapeFor(int index) const {
  if (hooks_.qkv_rows_per_warp > 0) {  // one shape everywhere: the short-context one, rows as asked
    return GemvShape{hooks_.qkv_rows_per_warp, hooks_.gate_up_rows_per_warp, false, true};
  }
  return index == 0 ? GemvShape{1, 1, false, true} : GemvShape{1, 2, true, true};
}

kernels::DecodeInput GraphedDraft::InputFor(const int32_t* device_token, int32_t host_token, int32_t pos) const {
  const Weight& table = lm_->token_embedding();
  kernels::DecodeInput in;
  in.state = static_cast<kernels::DecodeState*>(state_);
  in.device_token = device_token;
  in.host_token = host_token;
  in.pos = pos;
  in.table = CudaBackend::Data(table);
  in.table_type = CudaBackend::Type(table);
  in.vocab = table.rows();
  in.dim = static_cast<int>(lm_->spec().hidden);
  in.out = h_;
  return in;
}

absl::Status GraphedDraft::Enqueue(bool programmatic, const GemvShape& shape, const kernels::DecodeInput& input) {
  const ModelSpec& s = lm_->spec();
  const cudaStream_t stream = backend_->stream();
  const auto* state = static_cast<const kernels::DecodeState*>(state_);
  // The state and the token's embedding row, first and launched plainly: the attention reads the
  // position before its PDL wait, so the state must be complete before any later kernel starts.
  SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchDecodeInput(input, stream));
  const int D = static_cast<int>(s.hidden), H = static_cast<int>(s.n_heads),
            Hkv = static_cast<int>(s.n_kv_heads), d = static_cast<int>(s.head_dim),
            F = static_cast<int>(s.ffn_dim);
  const float eps = s.rms_eps;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const bool pdl = programmatic;
  const auto* rope_table = static_cast<const float2*>(rope_table_);
  const kernels::RopeStyle style = s.rope_style == RopeStyle::kRotateHalf
                                       ? kernels::RopeStyle::kRotateHalf
                                       : kernels::RopeStyle::kInterleaved;
  const auto data = [](const Weight* w) { return w ? CudaBackend::Data(*w) : nullptr; };
  const auto type = [](const Weight* w) { return w ? CudaBackend::Type(*w) : ElemType::kF32; };
  // rows_per_warp: a grid of rows / rows_per_warp warps (at most max_blocks_ blocks of 8 warps).
  const auto layer_gemv = [&](const float* x, const void* norm_w, ElemType norm_type,
                              const kernels::GemvSegment* segs, int n, ElemType w_type, int in,
                              kernels::GemvEpilogue epi, int rows_per_warp = 1) {
    return kernels::LaunchFusedGemv(x, norm_w, norm_type, eps, segs, n, w_type, in, epi, max_blocks_, stream, pdl,
                                    std::max(rows_per_warp, 1));
  };
  // h_ += W x (the O and down projections): a split-row GEMV where the shape asks for one and takes w,
  // else the fused GEMV's residual epilogue.
  const auto residual_gemv = [&](const float* x, const Weight* w, int in, bool split) {
    if (split && kernels::SplitRowAddGemvTakes(in, type(w))) {
      return kernels::LaunchSplitRowAddGemv(x, data(w), type(w), h_, D, in, stream, pdl);
    }
    const kernels::GemvSegment seg[1] = {{data(w), h_, D}};
    return layer_gemv(x, nullptr, ElemType::kF32, seg, 1, type(w), in, kernels::GemvEpilogue::kAddTo);
  };
  KvCache& cache = lm_->kv_cache();
  const int max_past = static_cast<int>(cache.max_positions()) - 1;
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const Transformer::LayerRefs r = lm_->layer_refs(hooks_.share_layer_weights ? 0 : l);
    const ElemType wt = type(r.q);
    void* kc = CudaBackend::CacheData(cache.k(l));
    void* vc = CudaBackend::CacheData(cache.v(l));
    const ElemType kv = CudaBackend::CacheType(cache.k(l));
    const kernels::GemvSegment qkv[3] = {{data(r.q), q_, H * d}, {data(r.k), k_, Hkv * d},
                                         {data(r.v), v_, Hkv * d}};
    SPECGEN_CUDA_RETURN_IF_ERROR(layer_gemv(h_, data(r.attn_norm), type(r.attn_norm), qkv, 3, wt, D,
                                            kernels::GemvEpilogue::kStore, shape.qkv_rows));
    if (decode_attention_) {
      // q/k-norm + RoPE + KV append fused into the decode attention: one kernel fewer per layer.
      kernels::DecodeRopeAppend rope;
      rope.q_raw = q_;
      rope.k_raw = k_;
      rope.v_raw = v_;
      rope.q_norm = data(r.q_norm);
      rope.k_norm = data(r.k_norm);
      rope.norm_type = type(r.q_norm);
      rope.eps = eps;
      rope.rope_table = rope_table;
      rope.style = style;
      SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchDecodeAttention(rope, kc, vc, kv, attn_, max_past, H, Hkv, d,
                                                                  scale, attn_ws_, attn_ws_bytes_,
                                                                  &state->pos, stream, pdl));
    } else {
      SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchQkNormRopeAppend(
          q_, k_, v_, q_, data(r.q_norm), data(r.k_norm), type(r.q_norm), eps, kc, vc, kv, state, H, Hkv, d,
          rope_table, style, stream, pdl));
      if (attn_ws_ != nullptr) {
        SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchAttention(q_, kc, vc, kv, nullptr, attn_, 1,
                                                              max_past, H, Hkv, d, scale, attn_ws_,
                                                              attn_ws_bytes_, stream, &state->pos, pdl));
      } else {  // not a PDL kernel: launched plainly, it waits for the previous kernel's end
        SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchAttentionSimple(q_, kc, vc, kv, nullptr, attn_, 1, max_past,
                                                                    H, Hkv, d, scale, stream, &state->pos));
      }
    }
    SPECGEN_CUDA_RETURN_IF_ERROR(residual_gemv(attn_, r.o, H * d, shape.split_o));
    // The up segment's y is unused by kSwiGlu (the product lands in the gate's y).
    const kernels::GemvSegment gate_up[2] = {{data(r.gate), act_, F}, {data(r.up), act_, F}};
    SPECGEN_CUDA_RETURN_IF_ERROR(layer_gemv(h_, data(r.ffn_norm), type(r.ffn_norm), gate_up, 2,
                                            type(r.gate), D, kernels::GemvEpilogue::kSwiGlu,
                                            shape.gate_up_rows));
    SPECGEN_CUDA_RETURN_IF_ERROR(residual_gemv(act_, r.down, F, shape.split_down));
  }
  const Weight& head = lm_->output_head();
  const kernels::GemvSegment logits[1] = {{CudaBackend::Data(head), logits_, static_cast<int>(head.rows())}};
  const Weight& norm = lm_->output_norm();
  return SPECGEN_CUDA_STATUS(kernels::LaunchFusedGemv(h_, CudaBackend::Data(norm), type(&norm), eps,
                                                      logits, 1, type(&head), D,
                                                      kernels::GemvEpilogue::kStore, max_blocks_,
                                                      stream, pdl));
}

absl::Status GraphedDraft::Capture(bool programmatic, int index, const kernels::DecodeInput& in) {
  ASSIGN_OR_RETURN(CudaGraph graph, CudaGraph::Capture(backend_->stream(), [&] {
                     return Enqueue(programmatic, ShapeFor(index), in);
                   }));
  // The input kernel, queued first, is the graph's only root.
  ASSIGN_OR_RETURN(input_node_[index], graph.SingleRoot("draft graph"));
  graphs_[index] = std::move(graph);
  return absl::OkStatus();
}

bool GraphedDraft::ReplaysCaptured() const {
  const int64_t pos = lm_->kv_cache().size();
  return use_graph_ && pos < lm_->kv_cache().max_positions() &&
         !graphs_[ShapeIndex(pos)].empty();
}

absl::StatusOr<const float*> GraphedDraft::Decode(const int32_t* device_token, int32_t host_token,
                                                  cudaStream_t on_stream) {
  if (on_stream != nullptr && on_stream != backend_->stream() && !ReplaysCaptured()) {
    return absl::FailedPreconditionError("draft decode on a side stream: no captured graph to replay there");
  }
  KvCache& cache = lm_->kv_cache();
  const int64_t pos = cache.size();
  if (pos >= cache.max_positions()) {
    return InvalidArgument("draft decode: position ", pos, " is past the draft's context of ",
                           cache.max_positions(), " (raise it with -c)");
  }
  if (device_token == nullptr && (host_token < 0 || host_token >= lm_->vocab_size())) {
    return InvalidArgument("token id ", host_token, " at position ", pos,
                           " is outside the vocabulary [0, ", lm_->vocab_size(), ")");
  }
  const cudaStream_t stream = on_stream != nullptr ? on_stream : backend_->stream();
  const kernels::DecodeInput in = InputFor(device_token, host_token, static_cast<int32_t>(pos));
  const int shape = ShapeIndex(pos);
  if (use_graph_ && graphs_[shape].empty()) {
    absl::Status captured = Capture(programmatic_, shape, in);
    // A graph without programmatic edges still beats eager launches: try it before giving up.
    if (!captured.ok() && programmatic_) {
      programmatic_ = false;
      captured = Capture(false, shape, in);
    }
    if (!captured.ok()) {
      use_graph_ = false;  // the same kernels, launched one by one
      fallback_ = std::string(captured.message());
    }
  }
  if (use_graph_) {
    // The token and position go into the graph's first node rather than into a kernel queued before
    // the replay: a replayed token is one graph launch.
    SPECGEN_CUDA_RETURN_IF_ERROR(kernels::SetDecodeInputNodeArgs(graphs_[shape].exec(), input_node_[shape], in));
    RETURN_IF_ERROR(graphs_[shape].Launch(stream));
    ++replays_;
  } else {
    RETURN_IF_ERROR(Enqueue(programmatic_, ShapeFor(shape), in));
    ++eager_;
  }
  RETURN_IF_ERROR(cache.Append(1));
  return static_cast<const float*>(logits_);
}

}  // namespace specgen
