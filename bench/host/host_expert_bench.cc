// BM_HostExpert/isa/type/n: one routed expert of Qwen3-30B-A3B's shape (hidden 2048, ffn 768) computed
// on the host for n tokens (moe/host/host_expert.h), cycling through 24 distinct experts so that the
// weights stream from memory as a layer's missed experts would. Counters: weight_GBps (the expert's
// packed bytes over the time), experts_per_s (the calibration's figure at this n), tokens_experts_per_s
// (n of them). The pool has one pinned worker per physical core. ISAs the CPU lacks are skipped.
#include <cstring>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "moe/host/host_expert.h"

namespace specgen::moe_host {
namespace {

constexpr int64_t kHidden = 2048, kFfn = 768;
constexpr int kExperts = 24;

struct Experts {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<HostExpert> views;
  size_t expert_bytes = 0;
};

std::vector<uint8_t> Random(std::mt19937_64& rng, DType t, int64_t rows, int64_t cols) {
  const DTypeInfo& info = Info(t);
  std::vector<uint8_t> b(static_cast<size_t>(rows * (cols / info.block_elems) * info.block_bytes));
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  // Every f16 scale a normal 1/16 (a subnormal would time a slow path real weights never take).
  const uint16_t scale = 0x2c00;
  const int offs_k[] = {0, 2}, off_6 = 208, off_0 = 0;
  for (size_t blk = 0; blk < b.size() / info.block_bytes; ++blk) {
    uint8_t* p = b.data() + blk * info.block_bytes;
    if (t == DType::kQ4_K || t == DType::kQ5_K) {
      for (int o : offs_k) std::memcpy(p + o, &scale, 2);
    } else {
      std::memcpy(p + (t == DType::kQ6_K ? off_6 : off_0), &scale, 2);
    }
  }
  return b;
}

const Experts& Make(DType t) {
  static std::vector<std::pair<DType, Experts>> cache;
  for (auto& [type, e] : cache) {
    if (type == t) return e;
  }
  std::mt19937_64 rng(44);
  Experts e;
  e.bytes.reserve(3 * kExperts);
  for (int i = 0; i < kExperts; ++i) {
    e.bytes.push_back(Random(rng, t, kFfn, kHidden));
    e.bytes.push_back(Random(rng, t, kFfn, kHidden));
    e.bytes.push_back(Random(rng, t, kHidden, kFfn));
    const size_t k = e.bytes.size();
    e.views.push_back({{t, e.bytes[k - 3].data(), kFfn, kHidden}, {t, e.bytes[k - 2].data(), kFfn, kHidden},
                       {t, e.bytes[k - 1].data(), kHidden, kFfn}});
  }
  e.expert_bytes = 3 * e.bytes[0].size();
  cache.emplace_back(t, std::move(e));
  return cache.back().second;
}

HostPool& Pool() {
  static HostPool pool;
  return pool;
}

void BM_HostExpert(benchmark::State& state) {
  const auto isa = static_cast<Isa>(state.range(0));
  const auto type = static_cast<DType>(state.range(1));
  const int n = static_cast<int>(state.range(2));
  if (!IsaSupported(isa)) {
    state.SkipWithError("this CPU lacks the ISA");
    return;
  }
  const Experts& e = Make(type);
  HostExpertRunner runner(Pool(), isa);
  std::vector<float> x(static_cast<size_t>(n * kHidden)), y(x.size());
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  for (float& v : x) v = normal(rng);
  int i = 0;
  for (auto _ : state) {
    if (!runner.Run(e.views[i++ % kExperts], x.data(), n, y.data()).ok()) state.SkipWithError("run failed");
    benchmark::DoNotOptimize(y.data());
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["weight_GBps"] = benchmark::Counter(it * static_cast<double>(e.expert_bytes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["experts_per_s"] = benchmark::Counter(it, benchmark::Counter::kIsRate);
  state.counters["tokens_experts_per_s"] = benchmark::Counter(it * n, benchmark::Counter::kIsRate);
  state.counters["threads"] = Pool().threads();
  state.SetLabel(std::string(IsaName(isa)) + " " + std::string(Name(type)));
}

void Args(benchmark::internal::Benchmark* b) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    for (DType t : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0}) {
      for (int n : {1, 4, 16}) {
        if (isa == Isa::kScalar && t != DType::kQ4_K) continue;  // the fallback once, for scale
        b->Args({static_cast<int64_t>(isa), static_cast<int64_t>(t), n});
      }
    }
  }
}
BENCHMARK(BM_HostExpert)->Apply(Args)->ArgNames({"isa", "type", "n"})->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace specgen::moe_host

BENCHMARK_MAIN();
