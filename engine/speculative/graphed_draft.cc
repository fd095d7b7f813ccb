#include "engine/speculative/graphed_draft.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/core/status_macros.h"
#include "kernels/attention.cuh"
#include "kernels/backend_ops.cuh"
#include "kernels/cuda_check.h"
#include "kernels/decode_fused.cuh"
#include "kernels/split_row_gemv.cuh"
#include "kernels/persistent_decode.cuh"

namespace specgen {
namespace {

using kernels::ElemType;

bool IsHalfType(const Weight* w) {
  return w != nullptr && (CudaBackend::Type(*w) == ElemType::kBF16 ||
                          CudaBackend::Type(*w) == ElemType::kF16);
}

// The decode attention kernel is what CudaBackend::Attention picks for one query; keep the same one.
bool DecodeKernelTakes(const ModelSpec& s) {
  return kernels::DecodeAttentionTakes(static_cast<int>(s.head_dim)) &&
         s.n_heads / s.n_kv_heads <= kernels::kAttentionMaxGroup;
}
// The general chunked kernel (the fallback for caches the decode kernel cannot read) takes fewer sizes.
bool ChunkedKernelTakes(const ModelSpec& s) {
  return (s.head_dim == 64 || s.head_dim == 128 || s.head_dim == 256) &&
         s.n_heads / s.n_kv_heads <= kernels::kAttentionMaxGroup;
}

}  // namespace

const char* DraftDecodePathName(DraftDecodePath path) {
  switch (path) {
    case DraftDecodePath::kTransformer: return "transformer";
    case DraftDecodePath::kFused: return "fused";
    case DraftDecodePath::kGraph: return "graph";
    case DraftDecodePath::kPersistent: return "persistent";
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
  if (!IsHalfType(lm.layer_refs(0).q)) return "layer 0: q is not bf16/f16";
  const ElemType t = CudaBackend::Type(*lm.layer_refs(0).q);
  const auto same = [&](const Weight* w) { return IsHalfType(w) && CudaBackend::Type(*w) == t; };
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const Transformer::LayerRefs r = lm.layer_refs(l);
    for (const Weight* w : {r.q, r.k, r.v, r.o, r.gate, r.up, r.down}) {
      if (!same(w)) return Cat("layer ", l, ": projection weights are not all bf16 (or all f16)");
    }
  }
  if (!IsHalfType(&lm.output_head())) return "the output head is not bf16/f16";
  return "";
}

absl::StatusOr<std::unique_ptr<GraphedDraft>> GraphedDraft::Create(CudaBackend* backend, Transformer* lm,
                                                                   DraftDecodePath path) {
  if (backend == nullptr || lm == nullptr || &lm->backend() != backend) {
    return InvalidArgument("graphed draft: the model must run on the given CUDA backend");
  }
  if (path == DraftDecodePath::kTransformer) {
    return InvalidArgument("graphed draft: the Transformer path is not one of its paths");
  }
  if (const std::string why = Unsupported(*lm); !why.empty()) {
    return absl::FailedPreconditionError(Cat("graphed draft: ", why));
  }
  std::unique_ptr<GraphedDraft> g(new GraphedDraft(backend, lm, path != DraftDecodePath::kFused));
  RETURN_IF_ERROR(g->Allocate());
  if (path == DraftDecodePath::kPersistent) RETURN_IF_ERROR(g->SetUpPersistent());
  return g;
}

namespace {

// The persistent kernel's view of a dense Transformer (weights, cache, the draft's scratch buffers).
kernels::PersistentDecodeParams ParamsFor(const Transformer& lm) {
  const ModelSpec& s = lm.spec();
  kernels::PersistentDecodeParams p;
  p.n_layers = static_cast<int>(s.n_layers);
  p.hidden = static_cast<int>(s.hidden);
  p.heads = static_cast<int>(s.n_heads);
  p.kv_heads = static_cast<int>(s.n_kv_heads);
  p.head_dim = static_cast<int>(s.head_dim);
  p.ffn = static_cast<int>(s.ffn_dim);
  p.vocab = static_cast<int>(lm.output_head().rows());
  p.capacity = static_cast<int>(lm.max_context());
  p.w_type = CudaBackend::Type(*lm.layer_refs(0).q);
  p.norm_type = CudaBackend::Type(*lm.layer_refs(0).attn_norm);
  p.embed_type = CudaBackend::Type(lm.token_embedding());
  p.eps = s.rms_eps;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  p.style = s.rope_style == RopeStyle::kRotateHalf ? kernels::RopeStyle::kRotateHalf
                                                   : kernels::RopeStyle::kInterleaved;
  p.embedding = CudaBackend::Data(lm.token_embedding());
  p.out_norm = CudaBackend::Data(lm.output_norm());
  p.head = CudaBackend::Data(lm.output_head());
  return p;
}

// Every norm weight of the model has one type (the kernel takes one norm_type).
bool NormsShareOneType(const Transformer& lm) {
  const kernels::ElemType t = CudaBackend::Type(*lm.layer_refs(0).attn_norm);
  const auto same = [&](const Weight* w) { return w == nullptr || CudaBackend::Type(*w) == t; };
  for (int64_t l = 0; l < lm.spec().n_layers; ++l) {
    const Transformer::LayerRefs r = lm.layer_refs(l);
    if (!same(r.attn_norm) || !same(r.ffn_norm) || !same(r.q_norm) || !same(r.k_norm)) return false;
  }
  return same(&lm.output_norm());
}

}  // namespace

absl::Status GraphedDraft::SetUpPersistent() {
  kernels::PersistentDecodeParams p = ParamsFor(*lm_);
  if (const char* why = kernels::PersistentDecodeUnsupported(p); *why != '\0') {
    fallback_ = Cat("persistent kernel: ", why);
    return absl::OkStatus();
  }
  if (!NormsShareOneType(*lm_)) {
    fallback_ = "persistent kernel: the norm weights are not all of one type";
    return absl::OkStatus();
  }
  // Only the shapes and the device decide the grid (the buffers are filled in per launch).
  const int blocks = kernels::PersistentDecodeBlocks(p);
  if (blocks <= 0) {
    fallback_ = "persistent kernel: this device cannot launch a cooperative grid of one block per SM";
    return absl::OkStatus();
  }
  const ModelSpec& s = lm_->spec();
  KvCache& cache = lm_->kv_cache();
  std::vector<kernels::PersistentLayer> layers(s.n_layers);
  const auto data = [](const Weight* w) { return w ? CudaBackend::Data(*w) : nullptr; };
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const Transformer::LayerRefs r = lm_->layer_refs(l);
    kernels::PersistentLayer& L = layers[l];
    L.attn_norm = data(r.attn_norm);
    L.q = data(r.q);
    L.k = data(r.k);
    L.v = data(r.v);
    L.q_norm = data(r.q_norm);
    L.k_norm = data(r.k_norm);
    L.o = data(r.o);
    L.ffn_norm = data(r.ffn_norm);
    L.gate = data(r.gate);
    L.up = data(r.up);
    L.down = data(r.down);
    L.k_cache = CudaBackend::Data(const_cast<Buffer&>(cache.k(l)));
    L.v_cache = CudaBackend::Data(const_cast<Buffer&>(cache.v(l)));
  }
  DeviceArena& a = backend_->arena();
  const size_t table_bytes = layers.size() * sizeof(kernels::PersistentLayer);
  ASSIGN_OR_RETURN(persistent_layers_, a.Allocate(table_bytes, "persistent draft layer table"));
  persistent_ws_bytes_ = kernels::PersistentDecodeWorkspaceBytes(p);
  ASSIGN_OR_RETURN(persistent_ws_, a.Allocate(persistent_ws_bytes_, "persistent draft workspace"));
  const cudaStream_t stream = backend_->stream();
  SPECGEN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(persistent_layers_, layers.data(), table_bytes, cudaMemcpyHostToDevice, stream));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(persistent_ws_, 0, persistent_ws_bytes_, stream));
  // The table's host copy must outlive the asynchronous copy: wait once, at set-up.
  RETURN_IF_ERROR(backend_->Synchronize(SyncKind::kOther));
  p.layers = static_cast<const kernels::PersistentLayer*>(persistent_layers_);
  p.rope_table = static_cast<const float2*>(rope_table_);
  p.logits = logits_;
  p.workspace = persistent_ws_;
  p.workspace_bytes = persistent_ws_bytes_;
  persistent_params_ = std::make_unique<kernels::PersistentDecodeParams>(p);
  persistent_blocks_ = blocks;
  return absl::OkStatus();
}

absl::Status GraphedDraft::LaunchPersistent(const int32_t* device_token, int32_t host_token, int32_t pos) {
  kernels::PersistentDecodeParams& p = *persistent_params_;
  p.timeline = probe_timeline_;
  p.l2_prefetch = l2_prefetch_;
  SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchPersistentDecode(p, device_token, host_token, pos,
                                                               static_cast<uint64_t>(persistent_launches_),
                                                               persistent_blocks_, backend_->stream()));
  ++persistent_launches_;
  return absl::OkStatus();
}

GraphedDraft::GraphedDraft(CudaBackend* backend, Transformer* lm, bool use_graph)
    : backend_(backend), lm_(lm), use_graph_(use_graph) {}

GraphedDraft::~GraphedDraft() {
  (void)backend_->Synchronize(SyncKind::kOther);
  for (cudaGraphExec_t exec : exec_) {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
  for (cudaGraph_t graph : graph_) {
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
  DeviceArena& a = backend_->arena();
  for (void* p : {state_, static_cast<void*>(h_), static_cast<void*>(q_), static_cast<void*>(k_),
                  static_cast<void*>(v_), static_cast<void*>(attn_), static_cast<void*>(act_),
                  static_cast<void*>(logits_), attn_ws_, rope_table_, persistent_layers_, persistent_ws_}) {
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
  if (DecodeKernelTakes(s)) {
    // The single-query decode kernel needs 16-byte aligned caches (vector loads); else the general
    // chunked kernel, as CudaBackend::Attention.
    KvCache& cache = lm_->kv_cache();
    decode_attention_ = true;
    for (int64_t l = 0; l < s.n_layers; ++l) {
      for (const Buffer* b : {&cache.k(l), &cache.v(l)}) {
        decode_attention_ = decode_attention_ &&
                            reinterpret_cast<uintptr_t>(CudaBackend::Data(const_cast<Buffer&>(*b))) % 16 == 0;
      }
    }
    const int heads = static_cast<int>(s.n_heads), kv_heads = static_cast<int>(s.n_kv_heads),
              keys = static_cast<int>(lm_->max_context()), hd = static_cast<int>(s.head_dim);
    if (decode_attention_ || ChunkedKernelTakes(s)) {  // else the simple kernel, without a workspace
      attn_ws_bytes_ = decode_attention_
                           ? kernels::DecodeAttentionWorkspaceBytes(heads, kv_heads, keys, hd)
                           : kernels::AttentionWorkspaceBytes(1, heads, keys, hd);
      ASSIGN_OR_RETURN(attn_ws_, a.Allocate(attn_ws_bytes_, "graphed draft attention workspace"));
      // The decode kernel's per-query-head counters start at zero (each launch leaves them there).
      SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(attn_ws_, 0, attn_ws_bytes_, backend_->stream()));
    }
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
  max_blocks_ = sms_ * 8;  // 8 blocks of 256 threads fill a multiprocessor
  programmatic_ = kernels::ProgrammaticLaunchSupported(device);
  return absl::OkStatus();
}

// H200, synth:qwen3-0.6b bf16, us a token (A/B in one device session): a row a warp everywhere was
// 600 / 657 / 686 at ctx 32 / 128 / 256 (gate/up at 2 row pairs: 609 / 659 / 700), while from ctx 512
// gate/up at 2 row pairs (192 blocks, one an SM beside O's) wins: 703 / 788 at ctx 512 / 1900 against
// 719 / 812. QKV at 4 rows a warp: 686 / 797 (worse at 1900 and below 512). Figures in docs/experiments.md.
// The O and down projections as split-row GEMVs (kernels/split_row_gemv.cuh), A/B in one device call, us
// a token at ctx 32 / 512 / 1900 (two rounds agree within 1%): five fused kernels 587 / 673 / 761; down
// split 573 / 663 / 754; O split 615 / 657 / 751; both 607 / 648 / 743. A split O's 512 blocks (4 warps
// a row) crowd out the attention's and gate/up's early blocks at a short context, where the attention
// is short; from the long-context shape on, its shorter chain wins.
GraphedDraft::GemvShape GraphedDraft::ShapeFor(int index) const {
  if (has_forced_shape_) return forced_shape_;
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
    const Transformer::LayerRefs r = lm_->layer_refs(share_layer_weights_ ? 0 : l);
    const ElemType wt = type(r.q);
    float* kc = CudaBackend::Data(const_cast<Buffer&>(cache.k(l)));
    float* vc = CudaBackend::Data(const_cast<Buffer&>(cache.v(l)));
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
      SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchDecodeAttention(rope, kc, vc, attn_, max_past, H, Hkv, d,
                                                                  scale, attn_ws_, attn_ws_bytes_,
                                                                  &state->pos, stream, pdl));
    } else {
      SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchQkNormRopeAppend(
          q_, k_, v_, q_, data(r.q_norm), data(r.k_norm), type(r.q_norm), eps, kc, vc, state, H, Hkv, d,
          rope_table, style, stream, pdl));
      if (attn_ws_ != nullptr) {
        SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchAttention(q_, kc, vc, ElemType::kF32, nullptr, attn_, 1,
                                                              max_past, H, Hkv, d, scale, attn_ws_,
                                                              attn_ws_bytes_, stream, &state->pos, pdl));
      } else {  // not a PDL kernel: launched plainly, it waits for the previous kernel's end
        SPECGEN_CUDA_RETURN_IF_ERROR(kernels::LaunchAttentionSimple(q_, kc, vc, nullptr, attn_, 1, max_past,
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
  const cudaStream_t stream = backend_->stream();
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status queued = Enqueue(programmatic, ShapeFor(index), in);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  absl::Status status = queued;
  if (status.ok()) status = SPECGEN_CUDA_STATUS(ended);
  // The input kernel, queued first, is the graph's only root.
  cudaGraphNode_t root = nullptr;
  size_t roots = 0;
  if (status.ok()) status = SPECGEN_CUDA_STATUS(cudaGraphGetRootNodes(graph, nullptr, &roots));
  if (status.ok() && roots != 1) status = absl::InternalError(Cat("draft graph: ", roots, " root nodes, not 1"));
  if (status.ok()) status = SPECGEN_CUDA_STATUS(cudaGraphGetRootNodes(graph, &root, &roots));
  if (status.ok()) status = SPECGEN_CUDA_STATUS(cudaGraphInstantiate(&exec_[index], graph, 0));
  if (!status.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // clear the launch error a failed capture leaves behind
    exec_[index] = nullptr;
    return status;
  }
  graph_[index] = graph;
  input_node_[index] = root;
  return status;
}

bool GraphedDraft::ReplaysCaptured() const {
  const int64_t pos = lm_->kv_cache().size();
  return persistent_blocks_ == 0 && use_graph_ && pos < lm_->kv_cache().max_positions() &&
         exec_[ShapeIndex(pos)] != nullptr;
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
  if (persistent_blocks_ > 0) {
    RETURN_IF_ERROR(LaunchPersistent(device_token, host_token, static_cast<int32_t>(pos)));
    RETURN_IF_ERROR(cache.Append(1));
    return static_cast<const float*>(logits_);
  }
  const cudaStream_t stream = on_stream != nullptr ? on_stream : backend_->stream();
  const kernels::DecodeInput in = InputFor(device_token, host_token, static_cast<int32_t>(pos));
  const int shape = ShapeIndex(pos);
  if (use_graph_ && exec_[shape] == nullptr) {
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
    // the replay: H200, A/B in one call, 621 against 631 us a token at ctx 128, 646.5 / 649.5 at 512,
    // 742 / 744 at 1900, 576.5 / 574 at 32 (within its noise).
    SPECGEN_CUDA_RETURN_IF_ERROR(kernels::SetDecodeInputNodeArgs(exec_[shape], input_node_[shape], in));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_[shape], stream));
    ++replays_;
  } else {
    RETURN_IF_ERROR(Enqueue(programmatic_, ShapeFor(shape), in));
    ++eager_;
  }
  RETURN_IF_ERROR(cache.Append(1));
  return static_cast<const float*>(logits_);
}

}  // namespace specgen
