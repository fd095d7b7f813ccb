// GPU kernel benchmarks (Google Benchmark, CUDA-event timing, manual time = median-friendly per-launch
// seconds): GEMV for 1..16 tokens against the HBM floor (kHbmGBs), bf16 and packed (Q4_K, Q5_K, Q6_K,
// Q8_0, Q4_0), a resident MoE layer routed on the device (the experts a pass reads; bf16, and Q4_K by
// union size), attention decode over a KV cache,
// and logits processing + sampling + acceptance over a 151936-token vocabulary.
// Counters: GB/s (bytes the kernel must move / time) and hbm_ratio = GB/s / 4200 (docs/design.md §2).
// Run with --benchmark_repetitions=5 --benchmark_report_aggregates_only=true for medians.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/acceptance.cuh"
#include "kernels/attention.cuh"
#include "kernels/gemv.cuh"
#include "kernels/packed.cuh"
#include "kernels/routed_experts.cuh"
#include "kernels/router.cuh"
#include "kernels/sampling.cuh"

namespace specgen::kernels {
namespace {

constexpr double kHbmGBs = 4200.0;  // HBM's device-to-device copy rate (docs/design.md §2)

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void* DeviceAlloc(size_t bytes, uint8_t fill) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
  cudaMemset(p, fill, bytes);
  return p;
}

// Times `launch(i)` (i = iteration index, for rotating buffers) with CUDA events, `inner` launches
// per benchmark iteration; reports seconds per launch.
double TimeLoop(benchmark::State& state, int inner, const std::function<void(int)>& launch,
                double bytes_per_launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  int it = 0;
  for (int w = 0; w < inner; ++w) launch(it++);  // warm-up
  double seconds = 0;
  for (auto _ : state) {
    cudaEventRecord(a);
    for (int r = 0; r < inner; ++r) launch(it++);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    state.SetIterationTime(ms * 1e-3 / inner);
    seconds += ms * 1e-3 / inner;
  }
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("CUDA error");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (bytes_per_launch > 0 && seconds > 0) {
    // Plain values (Google Benchmark's rate counters divide by CPU wall time, not manual time).
    const double gbs = bytes_per_launch * 1e-9 * state.iterations() / seconds;
    state.counters["GB/s"] = gbs;
    state.counters["hbm_ratio"] = gbs / kHbmGBs;
  }
  return state.iterations() > 0 ? seconds / state.iterations() : 0.0;
}

// args: tokens, out, in, order (GemvOrder: 0 FMA, 1 tensor cores). Weight copies rotate so the total
// exceeds the 50 MB L2 several times.
void BM_Gemv(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const int n = state.range(0), out = state.range(1), in = state.range(2);
  const GemvOrder order = state.range(3) != 0 ? GemvOrder::kTensorCores : GemvOrder::kFma;
  const size_t wbytes = size_t(out) * in * 2;
  const int copies = static_cast<int>(std::max<size_t>(2, (size_t(512) << 20) / wbytes));
  void* w = DeviceAlloc(wbytes * copies, 0x3c);  // 0x3c3c: a small finite bf16
  void* x = DeviceAlloc(size_t(n) * in * 4, 0x3c);  // finite non-zero inputs (0x3c3c3c3c)
  void* y = DeviceAlloc(size_t(n) * out * 4, 0);
  if (!w || !x || !y) return state.SkipWithError("cudaMalloc failed");
  TimeLoop(state, 10, [&](int i) {
    LaunchGemv(static_cast<uint8_t*>(w) + wbytes * (i % copies), ElemType::kBF16,
               static_cast<float*>(x), static_cast<float*>(y), n, out, in, nullptr, order);
  }, double(wbytes) + n * (in + out) * 4.0);
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
}
BENCHMARK(BM_Gemv)
    ->ArgsProduct({{1, 2, 4, 5, 8, 16}, {4096}, {4096}, {0, 1}})
    ->ArgsProduct({{1, 2, 4, 5, 8, 16}, {14336}, {4096}, {0, 1}})
    ->ArgsProduct({{1, 5, 9}, {2048}, {6144}, {0, 1}})  // qwen3-1.7b's down projection: few rows, long ones
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Weights kept packed (kernels/packed.cuh), the shapes of a Qwen3-30B-A3B expert (768 x 2048,
// 2048 x 768), its attention (4096 x 2048) and its head (151936 x 2048). Bytes: the packed weights plus
// x and y. args: type (kPackedBenchTypes index), tokens, out, in, layout (PackedLayout: 0 auto, 1 a
// half-warp a row, 2 tensor-core tiles; the same bits, kernels/packed.cuh).
constexpr ElemType kPackedBenchTypes[] = {ElemType::kQ4_K, ElemType::kQ5_K, ElemType::kQ6_K, ElemType::kQ8_0,
                                          ElemType::kQ4_0};
void BM_PackedGemv(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const ElemType type = kPackedBenchTypes[state.range(0)];
  const int n = state.range(1), out = state.range(2), in = state.range(3);
  const auto layout = static_cast<PackedLayout>(state.range(4));
  state.SetLabel(std::string(ElemTypeName(type)) + " " + PackedLayoutName(layout));
  const size_t wbytes = size_t(out) * PackedRowBytes(type, in);
  const int copies = static_cast<int>(std::max<size_t>(2, (size_t(512) << 20) / wbytes));
  void* w = DeviceAlloc(wbytes * copies, 0x3c);  // every f16 scale 0x3c3c: finite
  void* x = DeviceAlloc(size_t(n) * in * 4, 0x3c);  // finite non-zero inputs (0x3c3c3c3c)
  void* y = DeviceAlloc(size_t(n) * out * 4, 0);
  if (!w || !x || !y) return state.SkipWithError("cudaMalloc failed");
  TimeLoop(state, 10, [&](int i) {
    const GemvSegment seg{static_cast<uint8_t*>(w) + wbytes * (i % copies), static_cast<float*>(y), out};
    LaunchPackedGemvSegments(&seg, 1, type, static_cast<float*>(x), n, in, GemvEpilogue::kStore, nullptr, layout);
  }, double(wbytes) + n * (in + out) * 4.0);
  for (void* p : {w, x, y}) cudaFree(p);
}
BENCHMARK(BM_PackedGemv)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 4, 16}, {768}, {2048}, {0}})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 4, 16}, {2048}, {768}, {0}})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 4, 16}, {4096}, {2048}, {0}})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 4, 16}, {151936}, {2048}, {0}})
    ->ArgsProduct({{0, 2, 3}, {1, 2, 4, 8, 16}, {5120, 151936}, {2048}, {1, 2}})  // the layouts side by side
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The routed experts of a Qwen3-30B-A3B layer (128 experts, hidden 2048, ffn 768, top-8) at Q4_K for
// a union of exactly `union` experts: union / 8 tokens, each routed to 8 experts no other token takes
// (rotating over 8 routings, so the reads are not all L2 hits). Bytes: union x 3 x 884,736. args: union,
// layout (PackedLayout, as BM_PackedGemv's).
void BM_PackedRoutedExperts(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const int n_union = static_cast<int>(state.range(0)), experts = 128, k = 8, hidden = 2048, ffn = 768;
  const int n = n_union / k;
  const auto layout = static_cast<PackedLayout>(state.range(1));
  state.SetLabel(PackedLayoutName(layout));
  constexpr int kRoutings = 8;
  const size_t matrix = size_t(ffn) * PackedRowBytes(ElemType::kQ4_K, hidden);  // = down's bytes
  void* w = DeviceAlloc(matrix * 3 * experts, 0x3c);
  std::vector<const void*> table(3 * experts);
  for (int m = 0; m < 3 * experts; ++m) table[m] = static_cast<const char*>(w) + matrix * m;
  void* d_table = DeviceAlloc(table.size() * sizeof(void*), 0);
  void* x = DeviceAlloc(size_t(n) * hidden * 4, 0);
  void* out = DeviceAlloc(size_t(n) * hidden * 4, 0);
  void* logits = DeviceAlloc(size_t(kRoutings) * n * experts * 4, 0);
  void* route = DeviceAlloc(size_t(n) * k * 8, 0);
  const size_t ws_bytes = RoutedExpertsWorkspaceBytes(n, k, hidden, ffn);
  void* ws = DeviceAlloc(ws_bytes, 0);
  if (!w || !d_table || !x || !out || !logits || !route || !ws) return state.SkipWithError("cudaMalloc failed");
  cudaMemcpy(d_table, table.data(), table.size() * sizeof(void*), cudaMemcpyHostToDevice);
  std::vector<float> host(size_t(kRoutings) * n * experts, 0.f);
  for (int r = 0; r < kRoutings; ++r)
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < k; ++j) host[(size_t(r) * n + t) * experts + (r * n_union + t * k + j) % experts] = 8.f - j;
  cudaMemcpy(logits, host.data(), host.size() * 4, cudaMemcpyHostToDevice);
  ExpertTables tab;
  tab.gate = static_cast<const void* const*>(d_table);
  tab.up = tab.gate + experts;
  tab.down = tab.gate + 2 * experts;
  tab.experts = experts;
  tab.hidden = hidden;
  tab.ffn = ffn;
  tab.type = tab.down_type = ElemType::kQ4_K;
  float* d_w = static_cast<float*>(route);
  int32_t* d_ids = reinterpret_cast<int32_t*>(d_w + n * k);
  TimeLoop(state, 10, [&](int i) {
    LaunchRouterTopK(static_cast<const float*>(logits) + size_t(i % kRoutings) * n * experts, n, experts, k,
                     RouterMode::kSoftmaxTopKRenorm, d_w, d_ids, nullptr);
    LaunchRoutedExperts(tab, static_cast<const float*>(x), n, d_ids, d_w, k, ws, ws_bytes,
                        static_cast<float*>(out), false, nullptr, kDefaultGemvOrder, layout);
  }, double(n_union) * 3 * matrix);
  for (void* p : {w, d_table, x, out, logits, route, ws}) cudaFree(p);
}
BENCHMARK(BM_PackedRoutedExperts)
    ->ArgsProduct({{8, 16, 32, 64, 128}, {0, 1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// args: queries, context, kv type (0 f32, 2 bf16). Qwen3-8B-like: 32 q heads, 8 kv heads, d 128.
// One resident MoE layer of a Qwen3-30B-A3B-class target (128 experts of hidden 2048, ffn 768, bf16;
// top-8) run by RouteAndRunExperts' kernels for a pass of `tokens` positions: router top-k + plan +
// expert GEMVs + weighted sum, no host wait. Bytes: the distinct experts the pass routes to (each read
// once) x 9.44 MB, averaged over 8 routings (different pseudo-random router logits) that rotate.
// args: tokens, order (GemvOrder: 0 FMA, 1 tensor cores).
void BM_RoutedExperts(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const int n = static_cast<int>(state.range(0)), experts = 128, k = 8, hidden = 2048, ffn = 768;
  const GemvOrder order = state.range(1) != 0 ? GemvOrder::kTensorCores : GemvOrder::kFma;
  constexpr int kRoutings = 8;
  const size_t matrix = size_t(hidden) * ffn * 2;
  void* w = DeviceAlloc(matrix * 3 * experts, 0x3c);  // 0x3c3c: a small finite bf16
  std::vector<const void*> table(3 * experts);
  for (int m = 0; m < 3 * experts; ++m) table[m] = static_cast<const char*>(w) + matrix * m;
  void* d_table = DeviceAlloc(table.size() * sizeof(void*), 0);
  void* x = DeviceAlloc(size_t(n) * hidden * 4, 0);
  void* out = DeviceAlloc(size_t(n) * hidden * 4, 0);
  void* logits = DeviceAlloc(size_t(kRoutings) * n * experts * 4, 0);
  void* route = DeviceAlloc(size_t(n) * k * 8, 0);
  const size_t ws_bytes = RoutedExpertsWorkspaceBytes(n, k, hidden, ffn);
  void* ws = DeviceAlloc(ws_bytes, 0);
  if (!w || !d_table || !x || !out || !logits || !route || !ws) return state.SkipWithError("cudaMalloc failed");
  cudaMemcpy(d_table, table.data(), table.size() * sizeof(void*), cudaMemcpyHostToDevice);
  std::vector<float> host(size_t(kRoutings) * n * experts);
  uint32_t s = 2024;
  for (float& v : host) v = float((s = s * 1664525u + 1013904223u) >> 8) / float(1 << 24);
  cudaMemcpy(logits, host.data(), host.size() * 4, cudaMemcpyHostToDevice);
  double distinct = 0;  // mean over the routings of the experts a pass reads
  for (int r = 0; r < kRoutings; ++r) {
    std::vector<bool> used(experts);
    for (int t = 0; t < n; ++t) {
      const float* row = host.data() + (size_t(r) * n + t) * experts;
      std::vector<int> order(experts);
      for (int e = 0; e < experts; ++e) order[e] = e;
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) { return row[a] > row[b]; });
      for (int j = 0; j < k; ++j) used[order[j]] = true;
    }
    distinct += double(std::count(used.begin(), used.end(), true)) / kRoutings;
  }
  ExpertTables tab;
  tab.gate = static_cast<const void* const*>(d_table);
  tab.up = tab.gate + experts;
  tab.down = tab.gate + 2 * experts;
  tab.experts = experts;
  tab.hidden = hidden;
  tab.ffn = ffn;
  float* d_w = static_cast<float*>(route);
  int32_t* d_ids = reinterpret_cast<int32_t*>(d_w + n * k);
  TimeLoop(state, 10, [&](int i) {
    LaunchRouterTopK(static_cast<const float*>(logits) + size_t(i % kRoutings) * n * experts, n, experts, k,
                     RouterMode::kSoftmaxTopKRenorm, d_w, d_ids, nullptr);
    LaunchRoutedExperts(tab, static_cast<const float*>(x), n, d_ids, d_w, k, ws, ws_bytes,
                        static_cast<float*>(out), false, nullptr, order);
  }, distinct * 3 * matrix);
  state.counters["experts_read"] = distinct;
  for (void* p : {w, d_table, x, out, logits, route, ws}) cudaFree(p);
}
BENCHMARK(BM_RoutedExperts)
    ->ArgsProduct({{1, 5, 16}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_AttentionDecode(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const int n = state.range(0), ctx = state.range(1);
  const ElemType kv = static_cast<ElemType>(state.range(2));
  const int heads = 32, kv_heads = 8, d = 128, past = ctx - n;
  const size_t kv_bytes = size_t(ctx) * kv_heads * d * ElemBytes(kv);
  void* q = DeviceAlloc(size_t(n) * heads * d * 4, 0);
  void* o = DeviceAlloc(size_t(n) * heads * d * 4, 0);
  void* k = DeviceAlloc(kv_bytes, 0);
  void* v = DeviceAlloc(kv_bytes, 0);
  const size_t ws_bytes = AttentionWorkspaceBytes(n, heads, ctx, d);
  void* ws = DeviceAlloc(ws_bytes, 0);
  if (!q || !o || !k || !v || !ws) return state.SkipWithError("cudaMalloc failed");
  TimeLoop(state, 10, [&](int) {
    LaunchAttention(static_cast<float*>(q), k, v, kv, nullptr, static_cast<float*>(o), n, past,
                    heads, kv_heads, d, 0.088f, ws, ws_bytes, nullptr);
  }, 2.0 * kv_bytes);
  for (void* p : {q, o, k, v, ws}) cudaFree(p);
}
BENCHMARK(BM_AttentionDecode)
    ->ArgsProduct({{1, 5}, {4096, 32768}, {0, 1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

constexpr int kVocab = 151936;

// The step times sampling + acceptance are measured against (the goal: under 3% of a step):
// the bundled pair's target-only step as bench/RESULTS.md reports it, and the resident HBM floor
// of a Qwen3-30B-A3B-class verification of k+1 = 5 positions (docs/design.md §3: 48 MoE layers x 35
// distinct experts under uniform routing x 9.44 MB bf16 per expert / 4.2 TB/s; dense weights left
// out, so the true step is longer; with experts offloaded over PCIe it is tens of ms).
constexpr double kBundledStepSeconds = 0.83e-3;
constexpr double kA3bStepFloorSeconds = 48.0 * 35 * 9.44e6 / 4.2e12;  // 3.78 ms

void StepRatios(benchmark::State& state, double seconds) {
  state.counters["of_bundled_step"] = seconds / kBundledStepSeconds;
  state.counters["of_a3b_step"] = seconds / kA3bStepFloorSeconds;
}

SamplingConfig BenchConfig(int64_t mode) {
  return mode == 0 ? SamplingConfig{1.f, 0, 1.f, 0.f} : SamplingConfig{0.8f, 40, 0.95f, 0.05f};
}

// Copies of `rows` rows of logits (a fixed pseudo-random fill, uniform in [-6, 6)) totalling over
// 200 MB, so rotating through them reads HBM rather than the 50 MB L2. Returns the copy count.
int AllocLogitCopies(int rows, float** out) {
  std::vector<float> host(size_t(rows) * kVocab);
  uint32_t s = 12345;
  for (auto& x : host) {
    s = s * 1664525u + 1013904223u;
    x = ((s >> 8) * 0x1p-24f - 0.5f) * 12.f;
  }
  const size_t bytes = host.size() * 4;
  const int copies = static_cast<int>(std::max<size_t>(2, (size_t(200) << 20) / bytes));
  *out = static_cast<float*>(DeviceAlloc(bytes * copies, 0));
  if (*out == nullptr) return 0;
  for (int c = 0; c < copies; ++c) {
    cudaMemcpy(*out + c * host.size(), host.data(), bytes, cudaMemcpyHostToDevice);
  }
  return copies;
}

// args: rows, mode (0 plain T=1, 1 T=0.8 top-k 40 top-p 0.95 min-p 0.05), path (0 default: the
// cluster kernel on sm_90; 1 the one-block-per-row kernel, for comparison; 2 LaunchProcessLogitsSplit,
// the split path the speculative loop takes (top-k first for mode 1, temperature only for mode 0);
// 3 LaunchProcessAndSample, the draft's step in one call, the draw inside the split path). Processing + one keyed
// draw per row: the draft's per-token sampling cost (rows 1) and the target's k+1 rows. GB/s =
// logits read (rows x 151936 x 4 B) / time.
void BM_ProcessAndSample(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const int rows = state.range(0);
  const SamplingConfig cfg = BenchConfig(state.range(1));
  const int path = static_cast<int>(state.range(2));
  float* logits = nullptr;
  const int copies = AllocLogitCopies(rows, &logits);
  float* probs = static_cast<float*>(DeviceAlloc(size_t(rows) * kVocab * 4, 0));
  int32_t* tok = static_cast<int32_t*>(DeviceAlloc(rows * 4, 0));
  void* ws = DeviceAlloc(SampleWorkspaceBytes(rows), 0);
  const size_t topk_bytes = ProcessAndSampleWorkspaceBytes(rows, kVocab);
  void* topk_ws = DeviceAlloc(topk_bytes, 0);
  if (!copies || !probs || !tok || !ws || !topk_ws) return state.SkipWithError("cudaMalloc failed");
  const double seconds = TimeLoop(state, 20, [&](int i) {
    const float* l = logits + size_t(i % copies) * rows * kVocab;
    if (path == 3) {  // the draft's step in one call: processing and the draw
      LaunchProcessAndSample(l, rows, kVocab, cfg, probs, 7, 1000 + i, 1, tok, topk_ws, topk_bytes, nullptr);
      return;
    }
    if (path == 2) {
      LaunchProcessLogitsSplit(l, rows, kVocab, cfg, probs, topk_ws, topk_bytes, nullptr);
    } else if (path == 1) {
      detail::LaunchProcessLogitsOneBlock(l, rows, kVocab, cfg, probs, nullptr);
    } else {
      LaunchProcessLogits(l, rows, kVocab, cfg, probs, nullptr);
    }
    LaunchSampleTokens(probs, rows, kVocab, false, 7, 1000 + i, 1, tok, ws,
                       SampleWorkspaceBytes(rows), nullptr);
  }, double(rows) * kVocab * 4);
  StepRatios(state, seconds);
  state.counters["cluster_path"] = path == 0 && detail::ProcessLogitsUsesClusters(kVocab);
  state.counters["topk_first"] = path == 2 && ProcessTopKApplies(kVocab, cfg);
  state.counters["plain_split"] = path >= 2 && ProcessPlainApplies(kVocab, cfg);
  for (void* p : {static_cast<void*>(logits), static_cast<void*>(probs), static_cast<void*>(tok), ws, topk_ws})
    cudaFree(p);
}
BENCHMARK(BM_ProcessAndSample)
    ->ArgsProduct({{1, 5, 9}, {0, 1}, {0}})
    ->Args({1, 1, 2})
    ->Args({5, 1, 2})
    ->Args({9, 1, 2})
    ->Args({1, 0, 2})
    ->Args({5, 0, 2})
    ->Args({9, 0, 2})
    ->Args({1, 1, 3})
    ->Args({1, 0, 3})
    ->Args({1, 1, 1})
    ->Args({9, 1, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The greedy draft's draw of one token over a 151936-token vocabulary, as DeviceSpeculativeDecoder
// makes it: arg 0 processing to the one-hot q, then the argmax draw over it (before); arg 1 the argmax
// draw over the raw logits alone (greedy acceptance never reads q). GB/s = logits read / time.
void BM_GreedyDraftDraw(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const bool process = state.range(0) == 0;
  float* logits = nullptr;
  const int copies = AllocLogitCopies(1, &logits);
  float* probs = static_cast<float*>(DeviceAlloc(size_t(kVocab) * 4, 0));
  int32_t* tok = static_cast<int32_t*>(DeviceAlloc(4, 0));
  void* ws = DeviceAlloc(SampleWorkspaceBytes(1), 0);
  if (!copies || !probs || !tok || !ws) return state.SkipWithError("cudaMalloc failed");
  const SamplingConfig greedy{0.f, 0, 1.f, 0.f};
  const double seconds = TimeLoop(state, 20, [&](int i) {
    const float* row = logits + size_t(i % copies) * kVocab;
    if (process) {
      LaunchProcessLogits(row, 1, kVocab, greedy, probs, nullptr);
      row = probs;
    }
    LaunchSampleTokens(row, 1, kVocab, true, 7, 1000 + i, 2, tok, ws, SampleWorkspaceBytes(1), nullptr);
  }, double(kVocab) * 4);
  StepRatios(state, seconds);
  state.SetLabel(process ? "process + draw (before)" : "draw over the logits");
  for (void* p : {static_cast<void*>(logits), static_cast<void*>(probs), static_cast<void*>(tok), ws})
    cudaFree(p);
}
BENCHMARK(BM_GreedyDraftDraw)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

// args: rows, mode: processing alone and the keyed draw alone (on processed rows), to split the cost.
void BM_ProcessOnly(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const int rows = state.range(0);
  const SamplingConfig cfg = BenchConfig(state.range(1));
  const bool split = state.range(2) != 0;
  float* logits = nullptr;
  const int copies = AllocLogitCopies(rows, &logits);
  float* probs = static_cast<float*>(DeviceAlloc(size_t(rows) * kVocab * 4, 0));
  const size_t ws_bytes = ProcessSplitWorkspaceBytes(rows, kVocab);
  void* ws = DeviceAlloc(ws_bytes, 0);
  if (!copies || !probs || !ws) return state.SkipWithError("cudaMalloc failed");
  const double seconds = TimeLoop(state, 20, [&](int i) {
    const float* l = logits + size_t(i % copies) * rows * kVocab;
    if (split) {
      LaunchProcessLogitsSplit(l, rows, kVocab, cfg, probs, ws, ws_bytes, nullptr);
    } else {
      LaunchProcessLogits(l, rows, kVocab, cfg, probs, nullptr);
    }
  }, double(rows) * kVocab * 4);
  StepRatios(state, seconds);
  cudaFree(logits);
  cudaFree(probs);
  cudaFree(ws);
}
// args: rows, mode (as BM_ProcessAndSample), split (0 LaunchProcessLogits, 1 LaunchProcessLogitsSplit:
// what a verify pass's k + 1 rows cost the speculative loop).
BENCHMARK(BM_ProcessOnly)
    ->ArgsProduct({{1, 5, 9}, {0, 1}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_SampleOnly(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const int rows = state.range(0);
  const SamplingConfig cfg = BenchConfig(state.range(1));
  float* logits = nullptr;
  const int copies = AllocLogitCopies(rows, &logits);
  float* probs = static_cast<float*>(DeviceAlloc(size_t(rows) * kVocab * 4, 0));
  int32_t* tok = static_cast<int32_t*>(DeviceAlloc(rows * 4, 0));
  void* ws = DeviceAlloc(SampleWorkspaceBytes(rows), 0);
  if (!copies || !probs || !tok || !ws) return state.SkipWithError("cudaMalloc failed");
  LaunchProcessLogits(logits, rows, kVocab, cfg, probs, nullptr);
  TimeLoop(state, 20, [&](int i) {
    LaunchSampleTokens(probs, rows, kVocab, false, 7, 1000 + i, 1, tok, ws,
                       SampleWorkspaceBytes(rows), nullptr);
  }, double(rows) * kVocab * 4);
  for (void* p : {static_cast<void*>(logits), static_cast<void*>(probs), static_cast<void*>(tok), ws})
    cudaFree(p);
}
BENCHMARK(BM_SampleOnly)
    ->ArgsProduct({{1, 9}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// args: k, mode (0 greedy, 1 rejection, 2 coupled); p = q = uniform probabilities (every draft
// accepted: the longest path).
void BM_Acceptance(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const int k = state.range(0);
  const auto mode = static_cast<AcceptKernelMode>(state.range(1));
  std::vector<float> uni(size_t(k + 1) * kVocab, 1.f / kVocab);
  float* p = static_cast<float*>(DeviceAlloc(uni.size() * 4, 0));
  float* q = static_cast<float*>(DeviceAlloc(uni.size() * 4, 0));
  cudaMemcpy(p, uni.data(), uni.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(q, uni.data(), uni.size() * 4, cudaMemcpyHostToDevice);
  int32_t* drafts = static_cast<int32_t*>(DeviceAlloc(std::max(k, 1) * 4, 0));
  auto* res = static_cast<AcceptanceResult*>(DeviceAlloc(sizeof(AcceptanceResult), 0));
  void* ws = DeviceAlloc(AcceptanceWorkspaceBytes(k), 0);
  const double seconds = TimeLoop(state, 20, [&](int i) {
    LaunchAcceptance(q, p, drafts, k, kVocab, mode, 7, 1000 + i, res, ws,
                     AcceptanceWorkspaceBytes(k), nullptr);
  }, 0);
  StepRatios(state, seconds);
  for (void* x : {static_cast<void*>(p), static_cast<void*>(q), static_cast<void*>(drafts),
                  static_cast<void*>(res), ws})
    cudaFree(x);
}
BENCHMARK(BM_Acceptance)
    ->ArgsProduct({{4, 8}, {0, 1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The target side of one speculative step, as DeviceSpeculativeDecoder runs it: process the k+1
// rows of target logits (T=0.8 top-k 40 top-p 0.95 min-p 0.05; mode 0 greedy) and accept.
// args: k, mode (0 greedy, 1 rejection, 2 coupled). This is the "sampling + acceptance" of a step.
void BM_VerifySampling(benchmark::State& state) {
  if (!HaveGpu()) return state.SkipWithError("no CUDA device");
  const int k = state.range(0), rows = k + 1;
  const auto mode = static_cast<AcceptKernelMode>(state.range(1));
  const SamplingConfig cfg =
      mode == AcceptKernelMode::kGreedy ? SamplingConfig{0.f, 0, 1.f, 0.f} : BenchConfig(1);
  float* logits = nullptr;
  const int copies = AllocLogitCopies(rows, &logits);
  float* p = static_cast<float*>(DeviceAlloc(size_t(rows) * kVocab * 4, 0));
  // q: the draft's processed rows (a copy of the target's first k, so drafts are plausible).
  float* q = static_cast<float*>(DeviceAlloc(size_t(rows) * kVocab * 4, 0));
  LaunchProcessLogits(logits, rows, kVocab, cfg, q, nullptr);
  int32_t* drafts = static_cast<int32_t*>(DeviceAlloc(rows * 4, 0));
  void* sws = DeviceAlloc(SampleWorkspaceBytes(k), 0);
  if (k > 0) {
    LaunchSampleTokens(q, k, kVocab, false, 7, 1000, 2, drafts, sws, SampleWorkspaceBytes(k),
                       nullptr);
  }
  auto* res = static_cast<AcceptanceResult*>(DeviceAlloc(sizeof(AcceptanceResult), 0));
  void* ws = DeviceAlloc(AcceptanceWorkspaceBytes(k), 0);
  if (!copies || !p || !q || !drafts || !res || !ws) return state.SkipWithError("cudaMalloc failed");
  const double seconds = TimeLoop(state, 20, [&](int i) {
    LaunchProcessLogits(logits + size_t(i % copies) * rows * kVocab, rows, kVocab, cfg, p, nullptr);
    LaunchAcceptance(q, p, drafts, k, kVocab, mode, 7, 1000, res, ws, AcceptanceWorkspaceBytes(k),
                     nullptr);
  }, double(rows) * kVocab * 4);
  StepRatios(state, seconds);
  for (void* x : {static_cast<void*>(logits), static_cast<void*>(p), static_cast<void*>(q),
                  static_cast<void*>(drafts), sws, static_cast<void*>(res), ws})
    cudaFree(x);
}
BENCHMARK(BM_VerifySampling)
    ->ArgsProduct({{4, 8}, {0, 1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace specgen::kernels

BENCHMARK_MAIN();
