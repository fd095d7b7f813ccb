// Where the draft's decoded token spends its time, kernel by kernel:
//  - BM_DraftLayerKernels: each fused kernel of one decode layer of synth:qwen3-0.6b timed alone with
//    CUDA events (no ncu needed): rounds of back-to-back launches, one per layer (so the weights come
//    from HBM, not L2); us per launch (us_*) and the fraction of the HBM bandwidth for the bytes it must
//    read (hbm_*), at context 32 (and the attention at 1900), plus their sum over one layer.
// Skips (with an error message) without a device.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cmath>
#include <memory>
#include <string>

#include "bench/e2e_gpu/bench_models.h"
#include "draft/cuda/graphed_draft.h"
#include "kernels/attention.cuh"
#include "kernels/decode_fused.cuh"

namespace specgen::e2e {
namespace {

// kernel ids of BM_DraftLayerKernels
enum LayerKernel : int {
  kNormQkv = 0, kQkNormRope = 1, kAttention = 2, kOProj = 3, kNormGateUp = 4, kDown = 5, kNormHead = 6,
  kAttentionGeneric = 7  // LaunchAttention (the Transformer's kernel), for comparison: not in the layer
};
void BM_DraftLayerKernels(benchmark::State& state) {
  namespace kn = kernels;
  auto draft = QwenDraftOrSkip(state);
  if (draft == nullptr) return;
  std::unique_ptr<CudaBackend>* be = &draft->backend;  // (*be)-> / (*lm)-> as for StatusOr results
  std::unique_ptr<Transformer>* lm = &draft->lm;
  const ModelSpec& s = (*lm)->spec();
  int ctx = 32, which = 0;  // set per measurement below
  const int D = static_cast<int>(s.hidden), H = static_cast<int>(s.n_heads),
            Hkv = static_cast<int>(s.n_kv_heads), d = static_cast<int>(s.head_dim),
            F = static_cast<int>(s.ffn_dim), L = static_cast<int>(s.n_layers);
  const int max_past = static_cast<int>((*lm)->max_context()) - 1;
  DeviceArena& a = (*be)->arena();
  const size_t ws_bytes = kn::AttentionWorkspaceBytes(1, H, max_past + 1, d);
  const size_t dec_ws_bytes = kn::DecodeAttentionWorkspaceBytes(H, Hkv, max_past + 1, d);
  const size_t table_bytes = sizeof(float2) * static_cast<size_t>(max_past + 1) * (d / 2);
  auto buf = a.Allocate(sizeof(kn::DecodeState) + ws_bytes + dec_ws_bytes + table_bytes +
                            sizeof(float) * (2 * D + 3 * H * d + 2 * Hkv * d + F + s.vocab_size) + 4096,
                        "layer kernel bench");
  if (!buf.ok()) return state.SkipWithError(std::string(buf.status().message()).c_str());
  char* p = static_cast<char*>(*buf);
  auto take = [&](size_t bytes) { void* r = p; p += (bytes + 255) / 256 * 256; return r; };
  auto* st = static_cast<kn::DecodeState*>(take(sizeof(kn::DecodeState)));
  void* ws = take(ws_bytes);
  void* dec_ws = take(dec_ws_bytes);
  cudaMemset(dec_ws, 0, dec_ws_bytes);  // the decode kernel's counters start at zero
  auto* rope_table = static_cast<float2*>(take(table_bytes));
  auto floats = [&](int64_t n) { return static_cast<float*>(take(static_cast<size_t>(n) * sizeof(float))); };
  float *h = floats(D), *q = floats(H * d), *k = floats(Hkv * d), *v = floats(Hkv * d), *attn = floats(H * d),
        *act = floats(F), *logits = floats(s.vocab_size);
  cudaMemset(*buf, 0, sizeof(kn::DecodeState));
  for (float* f : {h, q, k, v, attn, act}) cudaMemset(f, 0, 4);  // values do not matter for timing
  const cudaStream_t stream = (*be)->stream();
  if (kn::LaunchRopeTable(rope_table, max_past + 1, d, static_cast<double>(s.rope_theta), stream) != cudaSuccess) {
    return state.SkipWithError("RoPE table");
  }
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int max_blocks = sms * 8;  // as GraphedDraft
  const float eps = s.rms_eps, scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto data = [](const Weight* w) { return CudaBackend::Data(*w); };
  const auto type = [](const Weight* w) { return CudaBackend::Type(*w); };
  const auto layer_gemv = [&](const float* x, const void* norm_w, kn::ElemType norm_type,
                              const kn::GemvSegment* seg, int n, kn::ElemType w_type, int in,
                              kn::GemvEpilogue epi) {
    return kn::LaunchFusedGemv(x, norm_w, norm_type, eps, seg, n, w_type, in, epi, max_blocks, stream);
  };
  double bytes = 0;  // what one launch must read (weights; K/V rows for attention)
  const auto launch = [&](int l) -> cudaError_t {
    const Transformer::LayerRefs r = (*lm)->layer_refs(l);
    void* kc = CudaBackend::CacheData((*lm)->kv_cache().k(l));
    void* vc = CudaBackend::CacheData((*lm)->kv_cache().v(l));
    const kn::ElemType kv = CudaBackend::CacheType((*lm)->kv_cache().k(l));
    const double kv_bytes = kn::ElemBytes(kv);
    switch (which) {
      case kNormQkv: {
        const kn::GemvSegment seg[3] = {{data(r.q), q, H * d}, {data(r.k), k, Hkv * d}, {data(r.v), v, Hkv * d}};
        bytes = 2.0 * D * (H * d + 2 * Hkv * d);
        return layer_gemv(h, data(r.attn_norm), type(r.attn_norm), seg, 3, type(r.q), D,
                          kn::GemvEpilogue::kStore);
      }
      case kQkNormRope:
        bytes = 4.0 * (H * d + 4 * Hkv * d);
        return kn::LaunchQkNormRopeAppend(q, k, v, q, data(r.q_norm), data(r.k_norm), type(r.q_norm), eps, kc, vc, kv,
                                          st, H, Hkv, d, rope_table,
                                          s.rope_style == RopeStyle::kRotateHalf ? kn::RopeStyle::kRotateHalf
                                                                                 : kn::RopeStyle::kInterleaved,
                                          stream, /*programmatic=*/false);
      case kAttention:
        bytes = 2.0 * kv_bytes * (ctx + 1) * Hkv * d;
        return kn::LaunchDecodeAttention(q, kc, vc, kv, attn, max_past, H, Hkv, d, scale, dec_ws,
                                         dec_ws_bytes, &st->pos, stream, /*programmatic=*/false);
      case kAttentionGeneric:
        bytes = 2.0 * kv_bytes * (ctx + 1) * Hkv * d;
        return kn::LaunchAttention(q, kc, vc, kv, nullptr, attn, 1, max_past, H, Hkv, d, scale, ws,
                                   ws_bytes, stream, &st->pos);
      case kOProj: {
        const kn::GemvSegment seg[1] = {{data(r.o), h, D}};
        bytes = 2.0 * D * H * d;
        return layer_gemv(attn, nullptr, kn::ElemType::kF32, seg, 1, type(r.o), H * d,
                          kn::GemvEpilogue::kAddTo);
      }
      case kNormGateUp: {
        const kn::GemvSegment seg[2] = {{data(r.gate), act, F}, {data(r.up), act, F}};
        bytes = 2.0 * 2 * D * F;
        return layer_gemv(h, data(r.ffn_norm), type(r.ffn_norm), seg, 2, type(r.gate), D,
                          kn::GemvEpilogue::kSwiGlu);
      }
      case kDown: {
        const kn::GemvSegment seg[1] = {{data(r.down), h, D}};
        bytes = 2.0 * D * F;
        return layer_gemv(act, nullptr, kn::ElemType::kF32, seg, 1, type(r.down), F,
                          kn::GemvEpilogue::kAddTo);
      }
      default: {
        const Weight& head = (*lm)->output_head();
        const kn::GemvSegment seg[1] = {{CudaBackend::Data(head), logits, static_cast<int>(head.rows())}};
        bytes = 2.0 * D * head.rows();
        const Weight& norm = (*lm)->output_norm();
        return kn::LaunchFusedGemv(h, CudaBackend::Data(norm), CudaBackend::Type(norm), eps, seg, 1,
                                   CudaBackend::Type(head), D, kn::GemvEpilogue::kStore, max_blocks, stream);
      }
    }
  };
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  // us per launch of kernel `which` at context `ctx`: 20 rounds of back-to-back launches, one per layer
  // (the head: 4, it is never L2-resident), after one warm-up round.
  const auto measure = [&](int kernel, int context) -> double {
    which = kernel;
    ctx = context;
    (void)kn::LaunchSetDecodeState(st, nullptr, 1, ctx, stream);
    const int per_rep = which == kNormHead ? 4 : L;
    for (int l = 0; l < per_rep; ++l) {
      if (launch(l) != cudaSuccess) return -1;
    }
    cudaEventRecord(start, stream);
    for (int rep = 0; rep < 20; ++rep) {
      for (int l = 0; l < per_rep; ++l) (void)launch(l);
    }
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    return cudaGetLastError() == cudaSuccess ? ms * 1e3 / (20.0 * per_rep) : -1;
  };
  static const char* const kKeys[] = {"qkv", "rope", "attn", "o", "gateup", "down", "head"};
  for (auto _ : state) {
    double layer_us = 0, layer_bytes = 0;
    for (int kernel = 0; kernel < 7; ++kernel) {
      const double us = measure(kernel, 32);
      if (us < 0) return state.SkipWithError("a launch failed");
      state.counters[std::string("us_") + kKeys[kernel]] = us;
      state.counters[std::string("hbm_") + kKeys[kernel]] = bytes / kHbmBytesPerSecond / (us * 1e-6);
      if (kernel != kNormHead) {
        layer_us += us;
        layer_bytes += bytes;
      }
    }
    state.counters["us_layer_sum"] = layer_us;
    state.counters["hbm_layer"] = layer_bytes / kHbmBytesPerSecond / (layer_us * 1e-6);
    const double us = measure(kAttention, 1900);
    if (us < 0) return state.SkipWithError("a launch failed");
    state.counters["us_attn_ctx1900"] = us;
    state.counters["us_attn_generic"] = measure(kAttentionGeneric, 32);
    state.counters["us_attn_generic_ctx1900"] = measure(kAttentionGeneric, 1900);
  }
  state.SetLabel("ctx 32 (attn also at 1900; attn_generic: LaunchAttention); one layer's kernels, each alone");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  a.Free(*buf);
}
BENCHMARK(BM_DraftLayerKernels)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace specgen::e2e
