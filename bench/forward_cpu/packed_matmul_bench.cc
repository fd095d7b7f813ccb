// CPU MatMul per weight DType: block types kept packed (rows dequantized as the product reads them),
// f16/bf16 converted at upload, f32 read in place; on the bundled target's head shape [4096, 256] and a
// Qwen3-30B-A3B expert's gate [768, 2048], at 1 and 16 tokens. Counter weight_bytes_per_second: bytes
// of the weight as stored, per second. One thread: the per-core cost of dequantizing on the fly.
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/quant.h"

namespace specgen {
namespace {

void BM_PackedMatMul(benchmark::State& state, DType t) {
  const int64_t out = state.range(0), in = state.range(1), n = state.range(2);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(out * in);
  for (float& x : w) x = u(gen);
  std::vector<uint8_t> packed(TensorBytes(t, in, out).value());
  const size_t row_bytes = RowBytes(t, in).value();
  for (int64_t r = 0; r < out; ++r) {
    if (!QuantizeRow(t, w.data() + r * in, in, packed.data() + r * row_bytes).ok()) {
      state.SkipWithError("quantize failed");
      return;
    }
  }
  CpuBackend be(1);
  TensorView v{t, 2, {out, in}, Location::kHost, packed.data(), packed.size()};
  auto weight = be.Upload(v, "w");
  auto x = be.NewBuffer(n, in);
  auto y = be.NewBuffer(n, out);
  if (!weight.ok() || !x.ok() || !y.ok()) {
    state.SkipWithError("setup failed");
    return;
  }
  std::vector<float> xs(n * in);
  for (float& e : xs) e = u(gen);
  (void)be.Write(xs, x->get());
  for (auto _ : state) {
    if (!be.MatMul(**x, **weight, y->get()).ok()) {
      state.SkipWithError("matmul failed");
      return;
    }
    benchmark::ClobberMemory();
  }
  state.counters["weight_bytes_per_second"] =
      benchmark::Counter(static_cast<double>(state.iterations() * packed.size()), benchmark::Counter::kIsRate);
  state.counters["packed"] = CpuBackend::IsPacked(**weight);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {1, 16}) {
    b->Args({4096, 256, n});
    b->Args({768, 2048, n});
  }
}

BENCHMARK_CAPTURE(BM_PackedMatMul, f32, DType::kF32)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_PackedMatMul, bf16, DType::kBF16)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_PackedMatMul, f16, DType::kF16)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_PackedMatMul, q8_0, DType::kQ8_0)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_PackedMatMul, q4_0, DType::kQ4_0)->Apply(Shapes);
BENCHMARK_CAPTURE(BM_PackedMatMul, q4_k, DType::kQ4_K)->Apply(Shapes);

}  // namespace
}  // namespace specgen

BENCHMARK_MAIN();
