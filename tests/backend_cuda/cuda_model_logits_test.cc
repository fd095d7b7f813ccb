// Whole-model logits on the GPU against the CPU reference for every fixture in tests/data/models (and
// so against transformers, which golden_test checks the CPU against), from the Hugging Face directory
// (f32 weights, kept f32 on the GPU) and from a GGUF written by our exporter in bf16 (bf16 on the GPU).
// The 40-token prompt runs twice: in passes of <= 16 tokens (the decode/verify GEMV path) and in one
// pass (for bf16 weights: the cuBLAS prefill path). Plus a greedy continuation through the KV cache.
//
// Tolerance: both backends compute with the very same weight values (bf16 is exact in fp32), so they
// differ only in fp32 summation order, exactly golden_test's fp32-vs-fp32 case: each dot of length
// K ≤ 256 errs by ≤ K·u·Σ|terms| (u = 2^-24), ≈ 4 chained reductions per layer × ≤ 3 layers plus the
// head: ≲ 15·256·6e-8 ≈ 2.3e-4 relative worst case. |gpu − cpu| ≤ 1e-4·S + 1e-4·|cpu| with S the
// largest |logit| of the fixture (the same bound golden_test derives). A routing flip would need two
// router logits within that error: the test reports and fails on any element beyond the bound.
// The one-pass cuBLAS prefill also rounds each matmul's activations to bf16 (relative RMS error
// 2^-9/√3 ≈ 1.1e-3 = act_eps per term), which, as golden_test derives for rounded f16 weights, puts
// each matmul output off by ≈ act_eps of its scale, compounding over the ≈ 3 matmuls per layer plus
// the head in quadrature: RMS ≤ 2·chain·act_eps·S and each position's worst logit ≤ 16·chain·act_eps·S,
// chain = √(3L + 1). (A routing flip there could exceed it; the fixtures keep the router margins.)
// The bf16 fixtures also run with the tensor-core order (CudaBackendOptions::gemv_order; their 64-wide
// products take it): per dot it adds at most 2^-18 Σ|terms| (x entering as bf16 hi + lo) and may
// truncate instead of round its fp32 sums (K·2u·Σ|terms|): ≈ 1.1e-5 of Σ|terms| a dot at K = 64, within
// the same 1e-4 bound over the chain.
// With a 16-bit KV cache (--cache-type f16 / bf16) both backends round the same K/V values to it, but
// those values already differ in their last fp32 bits, so where one lies next to a rounding boundary
// the two backends round it to neighbouring 16-bit values: a flip moves that element by one unit in
// the type's last place, at most twice the half unit the rounding itself moves any element by. To
// first order the flips' effect on the logits is therefore at most twice the rounding's own effect,
// measured on the CPU as max |logits(cache type) − logits(f32 cache)|, which is added to the bound.
// The gpt-oss and GLM-4.5 fixtures (issue 45: biases, sinks, sliding windows, YaRN, partial RoPE, sigmoid
// routing with groups and a routed scale, a shared expert, clamped SwiGLU) take the same bounds: their
// extra ops are element-wise (an expf of a few ulps apart, far below a dot product's K·u) or reductions
// of the lengths above; their attention runs the simple kernel, whose sums are of the same lengths.
// Beside the fixtures, the synthetic tiny-gptoss (window 4, a clamp limit of 1 that the random
// activations reach) and tiny-glm4moe (8 experts in 2 groups) run the 16-token and one-pass checks and
// the greedy continuation with f32 weights.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/io/gguf_export.h"
#include "engine/io/synth.h"
#include "engine/io/model_loader.h"
#include "engine/model/transformer.h"
#include "gtest/gtest.h"
#include "kernels/routed_experts.cuh"
#include "tests/common/compare.h"
#include "tests/common/gpu_test_env.h"
#include "tests/common/golden_fixture.h"
#include "tests/common/greedy.h"

namespace specgen {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string fixture;
  bool gguf_bf16;
  kernels::GemvOrder order = kernels::GemvOrder::kFma;
  DType kv_type = DType::kF32;
};

class CudaModelLogits : public ::testing::TestWithParam<Case> {};

TEST_P(CudaModelLogits, GpuEqualsCpuReference) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  const fs::path dir = testing::SourceDir() / "tests" / "data" / "models" / c.fixture;
  if (!fs::exists(dir / "golden.json")) GTEST_SKIP() << "fixture not present: " << dir;
  const std::vector<int32_t> ids = testing::ReadGoldenFixture(dir).input_ids;

  auto hf = LoadModel(dir.string());
  ASSERT_TRUE(hf.ok()) << hf.status();
  std::shared_ptr<const LoadedModel> model = std::move(hf).value();
  if (c.gguf_bf16) {
    GgufExportOptions opt;
    opt.dtype = DType::kBF16;
    const std::string path = ::testing::TempDir() + "/cuda_" + c.fixture + "_bf16.gguf";
    ASSERT_TRUE(ExportGguf(model->spec, model->weights, path, opt).ok());
    auto g = LoadModel(path);
    ASSERT_TRUE(g.ok()) << g.status();
    model = std::move(g).value();
  }
  CpuBackend cpu(1);
  auto gpu = testing::TestCudaBackend(size_t{512} << 20, c.order);
  ASSERT_NE(gpu, nullptr);
  TransformerOptions topt;
  topt.max_context = 256;
  topt.kv_type = c.kv_type;
  auto cpu_lm = Transformer::Create(model, &cpu, topt);
  auto gpu_lm = Transformer::Create(model, gpu.get(), topt);
  ASSERT_TRUE(cpu_lm.ok()) << cpu_lm.status();
  ASSERT_TRUE(gpu_lm.ok()) << gpu_lm.status();

  std::vector<float> ref, got, chunk;
  ASSERT_TRUE((*cpu_lm)->Forward(ids, &ref).ok());
  // A 16-bit cache: twice the rounding's own effect on the CPU's logits (see the header).
  double rounding_effect = 0;
  if (c.kv_type != DType::kF32) {
    TransformerOptions f32_opt = topt;
    f32_opt.kv_type = DType::kF32;
    auto cpu_f32 = Transformer::Create(model, &cpu, f32_opt);
    ASSERT_TRUE(cpu_f32.ok()) << cpu_f32.status();
    std::vector<float> ref_f32;
    ASSERT_TRUE((*cpu_f32)->Forward(ids, &ref_f32).ok());
    for (size_t i = 0; i < ref.size(); ++i) {
      rounding_effect = std::max(rounding_effect, std::fabs(double(ref[i]) - ref_f32[i]));
    }
    EXPECT_GT(rounding_effect, 0.0) << c.fixture << ": the " << Name(c.kv_type) << " cache rounded nothing";
    std::printf("%s %s cache: max |logit change| from rounding K/V = %.3g\n", c.fixture.c_str(),
                std::string(Name(c.kv_type)).c_str(), rounding_effect);
  }
  const double cache_tol = 2 * rounding_effect;
  for (size_t b = 0; b < ids.size(); b += 16) {  // passes of <= 16 tokens: the GEMV path
    const auto part = std::span<const int32_t>(ids).subspan(b, std::min<size_t>(16, ids.size() - b));
    ASSERT_TRUE((*gpu_lm)->Forward(part, &chunk).ok());
    got.insert(got.end(), chunk.begin(), chunk.end());
  }
  ASSERT_EQ(ref.size(), got.size());
  const int64_t v = model->spec.vocab_size;
  const double scale = testing::MaxAbs(ref);
  auto check_tight = [&](const std::vector<float>& out, const char* how) {
    testing::ExpectAllClose(out, ref, 1e-4 * scale + cache_tol, 1e-4,
                            c.fixture + (c.gguf_bf16 ? " gguf-bf16 " : " hf-f32 ") + std::string(Name(c.kv_type)) + " cache " +
                                kernels::GemvOrderName(c.order) + " " + how + " (element = position * " +
                                std::to_string(v) + " + id)");
  };
  check_tight(got, "16-token passes");

  // One pass over the whole prompt (cuBLAS for bf16 weights).
  ASSERT_TRUE((*gpu_lm)->Truncate(0).ok());
  ASSERT_TRUE((*gpu_lm)->Forward(ids, &got).ok());
  if (!c.gguf_bf16) {
    check_tight(got, "one pass");
  } else {
    const double chain = std::sqrt(3.0 * model->spec.n_layers + 1.0), act_eps = 0x1p-9 / std::sqrt(3.0);
    double sq = 0;
    for (size_t pos = 0; pos < ids.size(); ++pos) {
      double row_max = 0;
      for (int64_t j = 0; j < v; ++j) {
        const double err = std::fabs(double(got[pos * v + j]) - ref[pos * v + j]);
        sq += err * err;
        row_max = std::isnan(err) ? INFINITY : std::max(row_max, err);
      }
      EXPECT_LE(row_max, 16 * chain * act_eps * scale + cache_tol) << c.fixture << " one pass, position " << pos;
    }
    const double rms = std::sqrt(sq / ref.size());
    EXPECT_LE(rms, 2 * chain * act_eps * scale + cache_tol) << c.fixture << " one pass";
    std::printf("%s gguf-bf16 one pass (cuBLAS): rms |gpu - cpu| = %.3g of the logit scale\n",
                c.fixture.c_str(), rms / scale);
  }

  // Greedy through the KV cache, one token per pass (the GEMV decode path).
  ASSERT_TRUE((*cpu_lm)->Truncate(0).ok());
  ASSERT_TRUE((*gpu_lm)->Truncate(0).ok());
  // Prefill in passes of <= 16 tokens: on the GPU, the GEMV path decoding uses.
  EXPECT_EQ(testing::GreedyContinuation(**gpu_lm, ids, 12, 16), testing::GreedyContinuation(**cpu_lm, ids, 12, 16))
      << c.fixture;
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, CudaModelLogits,
    ::testing::Values(Case{"llama-gqa", false}, Case{"llama-gqa", true}, Case{"mixtral", false},
                      Case{"mixtral", true}, Case{"qwen3-dense", false}, Case{"qwen3-dense", true},
                      Case{"qwen3moe-dense-layer", false}, Case{"qwen3moe-dense-layer", true},
                      Case{"qwen3moe-norm", false}, Case{"qwen3moe-norm", true},
                      Case{"llama-gqa", true, kernels::GemvOrder::kTensorCores},
                      Case{"mixtral", true, kernels::GemvOrder::kTensorCores},
                      Case{"qwen3-dense", true, kernels::GemvOrder::kTensorCores},
                      Case{"qwen3moe-dense-layer", true, kernels::GemvOrder::kTensorCores},
                      Case{"qwen3moe-norm", true, kernels::GemvOrder::kTensorCores},
                      Case{"llama-gqa", false, kernels::GemvOrder::kFma, DType::kF16},
                      Case{"qwen3-dense", true, kernels::GemvOrder::kTensorCores, DType::kF16},
                      Case{"qwen3moe-norm", true, kernels::GemvOrder::kTensorCores, DType::kF16},
                      Case{"mixtral", false, kernels::GemvOrder::kFma, DType::kBF16},
                      Case{"qwen3-dense", true, kernels::GemvOrder::kTensorCores, DType::kBF16},
                      Case{"gptoss-tiny", false}, Case{"gptoss-tiny", true}, Case{"glm4moe-tiny", false},
                      Case{"glm4moe-tiny", true},
                      Case{"gptoss-tiny", true, kernels::GemvOrder::kTensorCores},
                      Case{"glm4moe-tiny", true, kernels::GemvOrder::kTensorCores},
                      Case{"gptoss-tiny", false, kernels::GemvOrder::kFma, DType::kF16},
                      Case{"glm4moe-tiny", false, kernels::GemvOrder::kFma, DType::kBF16}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = info.param.fixture + (info.param.gguf_bf16 ? "_gguf_bf16" : "_hf") +
                         (info.param.order == kernels::GemvOrder::kTensorCores ? "_tensor" : "") +
                         (info.param.kv_type != DType::kF32 ? "_cache_" + std::string(Name(info.param.kv_type)) : "");
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// The synthetic gpt-oss and GLM-4.5 presets (engine/io/synth.h) in f32: the GEMV path and the one pass
// under the tight bound of the header, and the greedy continuation token for token.
class CudaSynthArchLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaSynthArchLogits, GpuEqualsCpuReference) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto spec = SynthSpec(GetParam());
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto synth = SynthWeights(*spec, DType::kF32, 11, 1);
  ASSERT_TRUE(synth.ok()) << synth.status();
  std::shared_ptr<LoadedModel> loaded = std::move(synth).value();
  loaded->source = "synth:" + GetParam();
  const std::shared_ptr<const LoadedModel> model = loaded;
  ASSERT_FALSE(RequiredFeatures(model->spec).empty());
  std::vector<int32_t> ids(40);
  for (int i = 0; i < 40; ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % model->spec.vocab_size);
  CpuBackend cpu(1);
  auto gpu = testing::TestCudaBackend(size_t{512} << 20, kernels::GemvOrder::kFma);
  ASSERT_NE(gpu, nullptr);
  TransformerOptions topt;
  topt.max_context = 256;
  auto cpu_lm = Transformer::Create(model, &cpu, topt);
  auto gpu_lm = Transformer::Create(model, gpu.get(), topt);
  ASSERT_TRUE(cpu_lm.ok()) << cpu_lm.status();
  ASSERT_TRUE(gpu_lm.ok()) << gpu_lm.status();
  // The GPU keeps every position of a sliding layer (it has no ring; Backend::SupportsKvRing).
  for (int64_t l = 0; l < model->spec.n_layers; ++l) EXPECT_EQ((*gpu_lm)->kv_cache().ring_rows(l), 0) << l;
  std::vector<float> ref, got, chunk;
  ASSERT_TRUE((*cpu_lm)->Forward(ids, &ref).ok());
  for (size_t b = 0; b < ids.size(); b += 16) {
    const auto part = std::span<const int32_t>(ids).subspan(b, std::min<size_t>(16, ids.size() - b));
    const absl::Status st = (*gpu_lm)->Forward(part, &chunk);
    ASSERT_TRUE(st.ok()) << st;
    got.insert(got.end(), chunk.begin(), chunk.end());
  }
  const double scale = testing::MaxAbs(ref);
  testing::ExpectAllClose(got, ref, 1e-4 * scale, 1e-4, GetParam() + " 16-token passes");
  ASSERT_TRUE((*gpu_lm)->Truncate(0).ok());
  ASSERT_TRUE((*gpu_lm)->Forward(ids, &got).ok());
  testing::ExpectAllClose(got, ref, 1e-4 * scale, 1e-4, GetParam() + " one pass");
  ASSERT_TRUE((*cpu_lm)->Truncate(0).ok());
  ASSERT_TRUE((*gpu_lm)->Truncate(0).ok());
  EXPECT_EQ(testing::GreedyContinuation(**gpu_lm, ids, 12, 16), testing::GreedyContinuation(**cpu_lm, ids, 12, 16))
      << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaSynthArchLogits, ::testing::Values("tiny-gptoss", "tiny-glm4moe"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The general MoE models route their experts on the device (Backend::RouteAndRunExperts: sigmoid routing,
// expert biases and the clamped SwiGLU in the experts' epilogues; GLM's shared expert as ops after it,
// added in the host path's order) with the host-routed path's bits (TransformerOptions::
// device_routed_experts = false) on the same GPU: the logits of passes of 1..16 positions and of a
// 37-position one (host-routed in both), bit for bit, each in turn through the KV cache. The device
// path must be the one taken: a pass of <= 16 positions reads no expert union, where the host path
// reads one a MoE layer. Fixtures from their HF directories (f32) and through a bf16 GGUF, under both
// reduction orders; the synth presets in f32 and q8_0 (gpt-oss's experts MXFP4 there, as published).
void ExpectDeviceRoutingEqualsHostRouting(std::shared_ptr<const LoadedModel> model, const std::string& what,
                                          kernels::GemvOrder order) {
  SCOPED_TRACE(what + " " + kernels::GemvOrderName(order));
  auto gpu = testing::TestCudaBackend(size_t{512} << 20, order);
  ASSERT_NE(gpu, nullptr);
  TransformerOptions on_device;
  on_device.max_context = 256;
  TransformerOptions on_host = on_device;
  on_host.device_routed_experts = false;
  auto dev = Transformer::Create(model, gpu.get(), on_device);
  auto host = Transformer::Create(model, gpu.get(), on_host);
  ASSERT_TRUE(dev.ok()) << dev.status();
  ASSERT_TRUE(host.ok()) << host.status();
  const ModelSpec& spec = model->spec;
  const int64_t moe_layers = std::count(spec.layer_is_moe.begin(), spec.layer_is_moe.end(), true);
  ASSERT_GT(moe_layers, 0);
  int64_t pos = 0;
  for (const int n : {16, 1, 4, 16, 2, 7, 1, 9, 37, 3, 13, 1}) {
    std::vector<int32_t> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((131 * (pos + i) + 17) % spec.vocab_size);
    pos += n;
    std::vector<float> ld, lh;
    const int64_t before = gpu->syncs().expert_union;
    ASSERT_TRUE((*dev)->Forward(ids, &ld).ok());
    const int64_t mid = gpu->syncs().expert_union;
    ASSERT_TRUE((*host)->Forward(ids, &lh).ok());
    const int64_t after = gpu->syncs().expert_union;
    if (n <= kernels::kRoutedExpertsMaxTokens) {
      EXPECT_EQ(mid - before, 0) << n << " positions: the device path must route every MoE layer";
    }
    EXPECT_GE(after - mid, moe_layers) << n << " positions: the host path reads each MoE layer's routing";
    ASSERT_EQ(ld.size(), lh.size());
    for (size_t i = 0; i < ld.size(); ++i) {
      ASSERT_TRUE(std::isfinite(ld[i])) << n << " positions, logit " << i;
      ASSERT_EQ(std::memcmp(&ld[i], &lh[i], sizeof(float)), 0)
          << n << " positions, logit " << i << ": device-routed " << ld[i] << ", host-routed " << lh[i];
    }
  }
}

TEST(CudaGeneralMoeLogits, DeviceRoutingEqualsHostRoutingOnFixtures) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  for (const char* fixture : {"gptoss-tiny", "glm4moe-tiny"}) {
    const fs::path dir = testing::SourceDir() / "tests" / "data" / "models" / fixture;
    if (!fs::exists(dir / "config.json")) GTEST_SKIP() << "fixture not present: " << dir;
    auto hf = LoadModel(dir.string());
    ASSERT_TRUE(hf.ok()) << hf.status();
    std::shared_ptr<const LoadedModel> model = std::move(hf).value();
    ASSERT_FALSE(RequiredFeatures(model->spec).empty()) << fixture;
    for (const kernels::GemvOrder order : kernels::kGemvOrders) {
      ExpectDeviceRoutingEqualsHostRouting(model, std::string(fixture) + " hf", order);
    }
    GgufExportOptions opt;
    opt.dtype = DType::kBF16;
    const std::string path = ::testing::TempDir() + "/cuda_routing_" + fixture + "_bf16.gguf";
    ASSERT_TRUE(ExportGguf(model->spec, model->weights, path, opt).ok());
    auto g = LoadModel(path);
    ASSERT_TRUE(g.ok()) << g.status();
    const std::shared_ptr<const LoadedModel> bf16 = std::move(g).value();
    for (const kernels::GemvOrder order : kernels::kGemvOrders) {
      ExpectDeviceRoutingEqualsHostRouting(bf16, std::string(fixture) + " gguf bf16", order);
    }
  }
}

TEST(CudaGeneralMoeLogits, DeviceRoutingEqualsHostRoutingOnSynthPresets) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  for (const char* preset : {"tiny-gptoss", "tiny-glm4moe"}) {
    for (const DType t : {DType::kF32, DType::kQ8_0}) {
      auto spec = SynthSpec(preset);
      ASSERT_TRUE(spec.ok()) << spec.status();
      auto synth = SynthWeights(*spec, t, 7, 1);
      ASSERT_TRUE(synth.ok()) << synth.status();
      std::shared_ptr<LoadedModel> loaded = std::move(synth).value();
      loaded->source = std::string("synth:") + preset;
      ExpectDeviceRoutingEqualsHostRouting(loaded, std::string(preset) + " " + std::string(Name(t)),
                                           kernels::GemvOrder::kFma);
    }
  }
}

}  // namespace
}  // namespace specgen
