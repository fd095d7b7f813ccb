// Where the draft's decoded token spends its time, kernel by kernel (the figures behind
// docs/experiments.md's draft decode table):
//  - BM_DecodeTimeline: one graph-replayed token from the kernels' own global-timer stamps
//    (kernels::SetDecodeProbe): per kernel kind, the window before its input existed, the kernel
//    boundary before it (from the previous grid's end), the input staging, the rest and the blocks that
//    finish after block 0; and the time between two tokens that no decode kernel covers.
//  - BM_DraftLayerKernels: each fused kernel of one decode layer of the same model timed alone with
//    CUDA events (no ncu needed): rounds of 28 back-to-back launches, one per layer (so the weights
//    come from HBM, not L2); us per launch (us_*) and the fraction of 4.2 TB/s for the bytes it must
//    read (hbm_*), at context 32 (and the attention at 1900), plus their sum over one layer.
//  - BM_PersistentPhases: where the persistent kernel's token goes, phase by phase (global-timer stamps
//    written by the kernel itself), with its L2 prefetch off and on.
// Skips (with an error message) without a device.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "bench/e2e_gpu/bench_models.h"
#include "engine/speculative/graphed_draft.h"
#include "kernels/attention.cuh"
#include "kernels/decode_fused.cuh"
#include "kernels/persistent_decode.cuh"

namespace specgen::e2e {
namespace {

// Where a graph-replayed token's time goes, from the kernels' own stamps (SetDecodeProbe): per kind
// (QKV, attention, O, gate/up, down: averages over the 28 layers; the head once) at context ctx,
// pre = block 0's start -> its return from the wait (the window its weight loads had before its input
// existed), gap = the previous kernel's grid end -> this one's wait return (the kernel boundary),
// stage = the input read (and normalized; attention: K/V appended, queries rotated), rest = block 0's
// rest to its end, tail = block 0's end -> the grid's end (the blocks that finish after it).
// Per block (the probe's per-block stamps), relative to the previous kernel's grid end E, per kind:
// blocks = the grid, early = the share of its blocks that started before E (beside the previous
// kernel: their weight loads overlap it), last_start = the last block's start after E (the blocks that
// waited for registers to free), end_p50 = the median block's end after E.
// us_token_span = the first QKV's start -> the head's grid end; us_between_tokens = the replayed
// token's period (CUDA events over 32 tokens, at ctx + 1 .. ctx + 32) minus that span: the state
// kernel, the graph launch, the embedding (within the probe's own noise: at ctx 1900 it came out at
// -1.5 us).
void BM_DecodeTimeline(benchmark::State& state) {
  auto draft = QwenDraftOrSkip(state, state.range(0) == 1);
  if (draft == nullptr) return;
  const int layers = static_cast<int>(draft->spec.n_layers);
  const int launches = 5 * layers + 1;  // QKV, attention, O, gate/up, down a layer; the head
  unsigned long long* stamps = nullptr;
  const size_t n_stamps = static_cast<size_t>(kernels::kDecodeProbeFields) * launches;
  const size_t bytes = sizeof(unsigned long long) * n_stamps;
  if (cudaMalloc(&stamps, bytes) != cudaSuccess) return state.SkipWithError("cudaMalloc");
  cudaMemset(stamps, 0, bytes);
  auto g = GraphedDraft::Create(draft->backend.get(), draft->lm.get(), DraftDecodePath::kGraph);
  if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
  if (state.range(2) > 0) {
    (*g)->SetGemvRowsPerWarp(static_cast<int>(state.range(2)), static_cast<int>(state.range(3)));
  }
  if (state.range(0) == 2) (*g)->ShareLayerWeightsForBenchmark();
  const int context = static_cast<int>(state.range(1));
  std::vector<int32_t> prompt(context), pos(context);
  for (int i = 0; i < context; ++i) prompt[i] = (i * 7919) % 1000, pos[i] = i;
  (void)draft->lm->ForwardResident(prompt, pos, {});
  kernels::SetDecodeProbe(stamps);  // the first Decode captures the graph: its launches carry it
  const auto first = (*g)->Decode(nullptr, 11);
  kernels::SetDecodeProbe(nullptr);
  if (!first.ok() || (*g)->path() != DraftDecodePath::kGraph) return state.SkipWithError("no graph");
  const cudaStream_t stream = draft->backend->stream();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<unsigned long long> h(n_stamps);
  // kinds: 0 QKV, 1 attention, 2 O, 3 gate/up, 4 down, 5 head; fields: pre, gap, stage, rest, tail
  double sum[6][5] = {}, span_us = 0, period_us = 0;
  double blocks_sum[6] = {}, early_sum[6] = {}, last_start_sum[6] = {}, end_p50_sum[6] = {};
  int rounds = 0;
  constexpr int kPeriodTokens = 32;
  for (auto _ : state) {
    cudaEventRecord(start, stream);
    for (int t = 0; t < kPeriodTokens; ++t) (void)(*g)->Decode(nullptr, 17 + t);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    period_us += ms * 1e3 / kPeriodTokens;
    (void)draft->lm->Truncate(draft->lm->n_past() - kPeriodTokens);  // back to ctx + 1 for the probe
    cudaMemsetAsync(stamps, 0, bytes, stream);
    auto st = (*g)->Decode(nullptr, 23);
    if (!st.ok()) return state.SkipWithError(std::string(st.status().message()).c_str());
    cudaStreamSynchronize(stream);
    cudaMemcpy(h.data(), stamps, bytes, cudaMemcpyDeviceToHost);
    const auto at = [&](int t, int i) { return static_cast<double>(h[kernels::kDecodeProbeFields * t + i]); };
    for (int t = 0; t < launches; ++t) {
      if (at(t, 0) == 0 || at(t, 4) == 0) return state.SkipWithError("a launch left no stamps");
      const int kind = t == launches - 1 ? 5 : t % 5;
      sum[kind][0] += (at(t, 1) - at(t, 0)) / 1e3;
      sum[kind][1] += t > 0 ? (at(t, 1) - at(t - 1, 4)) / 1e3 : 0.0;
      sum[kind][2] += (at(t, 2) - at(t, 1)) / 1e3;
      sum[kind][3] += (at(t, 3) - at(t, 2)) / 1e3;
      sum[kind][4] += (at(t, 4) - at(t, 3)) / 1e3;
      if (t == 0) continue;
      const double e = at(t - 1, 4);
      std::vector<double> ends;
      int early = 0;
      double last_start = -1e30;
      for (int b = 0; b < kernels::kDecodeProbeMaxBlocks; ++b) {
        const double b_start = at(t, kernels::kDecodeProbeHeader + 3 * b);
        const double b_end = at(t, kernels::kDecodeProbeHeader + 3 * b + 2);
        if (b_start == 0 || b_end == 0) continue;
        early += b_start < e;
        last_start = std::max(last_start, (b_start - e) / 1e3);
        ends.push_back((b_end - e) / 1e3);
      }
      if (ends.empty()) continue;
      std::nth_element(ends.begin(), ends.begin() + ends.size() / 2, ends.end());
      blocks_sum[kind] += static_cast<double>(ends.size());
      early_sum[kind] += static_cast<double>(early) / static_cast<double>(ends.size());
      last_start_sum[kind] += last_start;
      end_p50_sum[kind] += ends[ends.size() / 2];
    }
    span_us += (at(launches - 1, 4) - at(0, 0)) / 1e3;
    (void)draft->lm->Truncate(draft->lm->n_past() - 1);
    ++rounds;
  }
  static const char* const kKind[] = {"qkv", "attn", "o", "gu", "down", "head"};
  static const char* const kField[] = {"pre", "gap", "stage", "rest", "tail"};
  for (int k = 0; k < 6; ++k) {
    for (int f = 0; f < 5; ++f) {
      state.counters[std::string(kKind[k]) + "_" + kField[f]] = sum[k][f] / rounds / (k == 5 ? 1 : layers);
    }
  }
  for (int k = 0; k < 6; ++k) {
    const double n = static_cast<double>(rounds) * (k == 5 ? 1 : (k == 0 ? layers - 1 : layers));
    state.counters[std::string(kKind[k]) + "_blocks"] = blocks_sum[k] / n;
    state.counters[std::string(kKind[k]) + "_early"] = early_sum[k] / n;
    state.counters[std::string(kKind[k]) + "_last_start"] = last_start_sum[k] / n;
    state.counters[std::string(kKind[k]) + "_end_p50"] = end_p50_sum[k] / n;
  }
  state.counters["us_token_span"] = span_us / rounds;
  state.counters["us_per_token"] = period_us / rounds;
  state.counters["us_between_tokens"] = (period_us - span_us) / rounds;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(stamps);
}
BENCHMARK(BM_DecodeTimeline)
    // narrow 1: the shrunk matrices; 2: every layer on layer 0's weights (L2-resident from layer 1 on).
    // qkv_rows / gu_rows: rows a warp (0: the draft's choice).
    ->ArgNames({"narrow", "ctx", "qkv_rows", "gu_rows"})
    ->Args({0, 32, 0, 0})->Args({1, 32, 0, 0})->Args({2, 32, 0, 0})->Args({0, 1900, 0, 0})
    ->Args({0, 32, 4, 3})->Args({0, 32, 2, 1})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

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
    float* kc = CudaBackend::Data(const_cast<Buffer&>((*lm)->kv_cache().k(l)));
    float* vc = CudaBackend::Data(const_cast<Buffer&>((*lm)->kv_cache().v(l)));
    switch (which) {
      case kNormQkv: {
        const kn::GemvSegment seg[3] = {{data(r.q), q, H * d}, {data(r.k), k, Hkv * d}, {data(r.v), v, Hkv * d}};
        bytes = 2.0 * D * (H * d + 2 * Hkv * d);
        return layer_gemv(h, data(r.attn_norm), type(r.attn_norm), seg, 3, type(r.q), D,
                          kn::GemvEpilogue::kStore);
      }
      case kQkNormRope:
        bytes = 4.0 * (H * d + 4 * Hkv * d);
        return kn::LaunchQkNormRopeAppend(q, k, v, q, data(r.q_norm), data(r.k_norm), type(r.q_norm), eps, kc, vc,
                                          st, H, Hkv, d, rope_table,
                                          s.rope_style == RopeStyle::kRotateHalf ? kn::RopeStyle::kRotateHalf
                                                                                 : kn::RopeStyle::kInterleaved,
                                          stream, /*programmatic=*/false);
      case kAttention:
        bytes = 2.0 * 4 * (ctx + 1) * Hkv * d;
        return kn::LaunchDecodeAttention(q, kc, vc, kn::ElemType::kF32, attn, max_past, H, Hkv, d, scale, dec_ws,
                                         dec_ws_bytes, &st->pos, stream, /*programmatic=*/false);
      case kAttentionGeneric:
        bytes = 2.0 * 4 * (ctx + 1) * Hkv * d;
        return kn::LaunchAttention(q, kc, vc, kn::ElemType::kF32, nullptr, attn, 1, max_past, H, Hkv, d, scale, ws,
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

// Where a persistent-kernel token's time goes: per-phase timestamps of one token (after 16 warm-up
// tokens) at context 32, averaged over the layers. A phase's time = the last block's end of it minus
// the last block's end of the phase before (its critical-path share; blocks overlap phases).
// Arg: L2 prefetch of the weights ahead on (1) or off (0). The a* counters split block 0's attention
// (entry after its own QKV rows, K/V appended, q rotated + cache rows staged, the slot loop, the merge).
void BM_PersistentPhases(benchmark::State& state) {
  auto draft = QwenDraftOrSkip(state);
  if (draft == nullptr) return;
  const ModelSpec* spec = &draft->spec;
  std::unique_ptr<CudaBackend>* be = &draft->backend;  // (*be)-> / (*lm)-> as for StatusOr results
  std::unique_ptr<Transformer>* lm = &draft->lm;
  auto g = GraphedDraft::Create(be->get(), lm->get(), DraftDecodePath::kPersistent);
  if (!g.ok()) return state.SkipWithError(std::string(g.status().message()).c_str());
  if ((*g)->path() != DraftDecodePath::kPersistent) return state.SkipWithError((*g)->fallback_reason().c_str());
  const int nb = (*g)->persistent_blocks(), layers = static_cast<int>(spec->n_layers);
  const int phases = kernels::PersistentDecodePhases(layers);  // + the head
  const size_t entries = kernels::PersistentDecodeTimelineEntries(layers, nb);
  auto dev = (*be)->arena().Allocate(entries * sizeof(unsigned long long), "timeline");
  if (!dev.ok()) return state.SkipWithError(std::string(dev.status().message()).c_str());
  auto* timeline = static_cast<unsigned long long*>(*dev);
  const bool prefetch = state.range(0) != 0;
  std::vector<unsigned long long> t(entries);
  constexpr int kContext = 32;
  std::vector<int32_t> prompt(kContext), pos(kContext);
  for (int i = 0; i < kContext; ++i) prompt[i] = (i * 7919) % static_cast<int>(spec->vocab_size), pos[i] = i;
  // phase kinds: 0 embedding, 1 qkv, 2 attention, 3 o, 4 gate/up, 5 down
  double compute[6] = {}, head = 0, total = 0, attn_inside[5] = {};
  int64_t rounds = 0;
  for (auto _ : state) {
    (void)(*lm)->Truncate(0);
    (void)(*lm)->ForwardResident(prompt, pos, {});
    (*g)->SetPersistentProbe(nullptr, prefetch);
    for (int i = 0; i < 16; ++i) (void)(*g)->Decode(nullptr, 100 + i);
    (*g)->SetPersistentProbe(timeline, prefetch);
    (void)(*g)->Decode(nullptr, 7);
    (void)(*be)->Synchronize(SyncKind::kOther);
    cudaMemcpy(t.data(), timeline, entries * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
    const auto last = [&](int k) {
      double m = 0;
      for (int b = 0; b < nb; ++b) m = std::max(m, static_cast<double>(t[static_cast<size_t>(k) * (nb + 1) + b]));
      return m;
    };
    const auto first = [&](int k) {
      double m = 1e300;
      for (int b = 0; b < nb; ++b) m = std::min(m, static_cast<double>(t[static_cast<size_t>(k) * (nb + 1) + b]));
      return m;
    };
    double prev = last(0);
    for (int k = 1; k < phases; ++k) {
      const double end = last(k);
      compute[1 + (k - 1) % 5] += (end - prev) * 1e-3;
      prev = end;
    }
    head += (last(phases) - prev) * 1e-3;
    // Block 0's attention, inside: entry after its QKV rows, K/V appended, q rotated, slots, merge.
    const size_t pb = static_cast<size_t>(phases + 1) * (nb + 1);
    for (int l = 0; l < layers; ++l) {
      const auto at = [&](int slot) { return static_cast<double>(t[pb + l * kernels::kPersistentProbeSlots + slot]); };
      const double qkv_end = static_cast<double>(t[static_cast<size_t>(1 + 5 * l) * (nb + 1)]);
      attn_inside[0] += (at(0) - qkv_end) * 1e-3;
      for (int s2 = 1; s2 <= 4; ++s2) attn_inside[s2] += (at(s2) - at(s2 - 1)) * 1e-3;
    }
    total += (last(phases) - first(0)) * 1e-3;
    ++rounds;
  }
  const char* names[6] = {"us_embed", "us_qkv", "us_attn", "us_o", "us_gateup", "us_down"};
  for (int i = 1; i < 6; ++i) state.counters[names[i]] = compute[i] / rounds / layers;
  state.counters["us_head"] = head / rounds;
  const char* inside[5] = {"a0_entry", "a1_kv_append", "a2_q_rope", "a3_slots", "a4_merge"};
  for (int i = 0; i < 5; ++i) state.counters[inside[i]] = attn_inside[i] / rounds / layers;
  state.counters["us_token"] = total / rounds;
  state.counters["blocks"] = nb;
  (*be)->arena().Free(*dev);
}
BENCHMARK(BM_PersistentPhases)->ArgNames({"prefetch"})->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace specgen::e2e
