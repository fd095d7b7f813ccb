// GGUF export → load round trips: f32 bit for bit, q8_0 within its quantization bound, metadata that
// reproduces the spec, and the llama Q/K permutation into interleaved RoPE order.
#include "engine/io/gguf_export.h"

#include <cmath>
#include <cstring>
#include <string>

#include "engine/core/quant.h"
#include "engine/io/gguf.h"
#include "engine/io/model_loader.h"
#include "engine/core/str_cat.h"
#include "engine/io/hf_config.h"
#include "engine/io/synth.h"
#include "gtest/gtest.h"
#include "tests/io/model_test_util.h"

namespace specgen {
namespace {

using specgen::testing::TempDir;

std::unique_ptr<LoadedModel> Synth(const ModelSpec& spec, DType t = DType::kF32, uint64_t seed = 5) {
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = SynthWeights(spec, t, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

std::unique_ptr<LoadedModel> ExportAndLoad(const LoadedModel& src, const std::string& path, DType t,
                                           std::vector<std::string>* notes = nullptr) {
  GgufExportOptions opt;
  opt.dtype = t;
  opt.note = [&](std::string_view s) {
    if (notes) notes->emplace_back(s);
  };
  absl::Status s = ExportGguf(src.spec, src.weights, path, opt);
  EXPECT_TRUE(s.ok()) << s;
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = LoadModel(path);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

void ExpectSameSpec(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.n_experts, b.n_experts);
  EXPECT_EQ(a.n_experts_used, b.n_experts_used);
  EXPECT_EQ(a.expert_ffn_dim, b.expert_ffn_dim);
  EXPECT_EQ(a.layer_is_moe, b.layer_is_moe);
  EXPECT_EQ(a.router_norm, b.router_norm);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.context_length, b.context_length);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_id, b.eos_token_id);
}

TEST(GgufExport, F32RoundTripIsBitExact) {
  TempDir dir;
  for (const char* preset : {"tiny-moe", "tiny-dense"}) {
    auto src = Synth(*SynthSpec(preset));
    auto back = ExportAndLoad(*src, dir.Path(Cat(preset, ".gguf")), DType::kF32);
    ASSERT_NE(back, nullptr);
    ExpectSameSpec(src->spec, back->spec);
    EXPECT_EQ(back->spec.rope_style, RopeStyle::kRotateHalf);
    ASSERT_EQ(src->weights.tensors().size(), back->weights.tensors().size());
    for (const auto& [key, v] : src->weights.tensors()) {
      const TensorView w = *back->weights.Get(key);
      ASSERT_EQ(w.dtype, DType::kF32) << KeyString(key);
      ASSERT_EQ(v.bytes, w.bytes) << KeyString(key);
      EXPECT_EQ(std::memcmp(v.data, w.data, v.bytes), 0) << KeyString(key);
    }
  }
}

// Q8_0 (as ggml's reference) rounds q = round(x / d) with the exact d = amax/127 and stores d as f16,
// so |x − q·d_f16| ≤ d/2 + 127·|d − d_f16| ≤ d·(1/2 + 127·2^-11); 2^-10 more for fp32 rounding.
TEST(GgufExport, Q8RoundTripWithinQuantizationBound) {
  TempDir dir;
  auto src = Synth(*SynthSpec("tiny-moe"));
  auto back = ExportAndLoad(*src, dir.Path("q8.gguf"), DType::kQ8_0);
  ASSERT_NE(back, nullptr);
  ExpectSameSpec(src->spec, back->spec);
  for (const auto& [key, v] : src->weights.tensors()) {
    const TensorView w = *back->weights.Get(key);
    const bool stays_f32 = v.ndim == 1 || key.role == Role::kRouter;
    ASSERT_EQ(w.dtype, stays_f32 ? DType::kF32 : DType::kQ8_0) << KeyString(key);
    std::vector<float> got(w.numel());
    ASSERT_TRUE(DequantizeRows(w.dtype, w.data, w.rows(), w.cols(), got.data()).ok());
    const auto* want = static_cast<const float*>(v.data);
    for (int64_t b = 0; b < v.numel(); b += 32) {
      float amax = 0;
      for (int64_t i = b; i < b + 32 && i < v.numel(); ++i) amax = std::max(amax, std::abs(want[i]));
      const float bound = stays_f32 ? 0.0f : amax / 127.0f * (0.5f + 127.0f / 2048 + 1.0f / 1024);
      for (int64_t i = b; i < b + 32 && i < v.numel(); ++i) {
        ASSERT_LE(std::abs(got[i] - want[i]), bound) << KeyString(key) << " element " << i;
      }
    }
  }
}

TEST(GgufExport, Q4KFallsBackToF16WithANote) {
  TempDir dir;
  auto src = Synth(*SynthSpec("tiny-moe"));
  std::vector<std::string> notes;
  auto back = ExportAndLoad(*src, dir.Path("q4k.gguf"), DType::kQ4_K, &notes);
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->weights.Get({Role::kAttnQ, 0})->dtype, DType::kF16);  // D = 64 < 256
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("f16"), std::string::npos);
}

TEST(GgufExport, DenseLayersAndUnnormalizedRouterSurvive) {
  TempDir dir;
  ModelSpec spec = *SynthSpec("tiny-moe");
  spec.layer_is_moe[1] = false;
  spec.router_norm = RouterNorm::kSoftmaxThenTopK;  // OLMoE-style
  std::vector<std::string> notes;
  auto back = ExportAndLoad(*Synth(spec), dir.Path("mixed.gguf"), DType::kF32, &notes);
  ASSERT_NE(back, nullptr);
  ExpectSameSpec(spec, back->spec);
  // llama.cpp would run this file differently on both counts, and the writer says so.
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("1 of 3 layers are dense (1)"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("qwen3moe needs a router and experts in every layer"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("qwen3moe.expert_weights_norm = false"), std::string::npos) << notes[1];
}

TEST(GgufExport, NoLlamaCppNoteForFilesItRunsTheSame) {
  ModelSpec moe = *SynthSpec("tiny-moe");
  moe.router_norm = RouterNorm::kSoftmaxTopKRenormalize;
  EXPECT_TRUE(LlamaCppDifferences(moe).empty());
  EXPECT_TRUE(LlamaCppDifferences(*SynthSpec("tiny-dense")).empty());
  ModelSpec mixtral = moe;  // llama with experts: the renormalization is Mixtral's own
  mixtral.arch = Arch::kMixtral;
  mixtral.router_norm = RouterNorm::kTopKThenSoftmax;
  EXPECT_TRUE(LlamaCppDifferences(mixtral).empty());
  mixtral.layer_is_moe[0] = false;
  ASSERT_EQ(LlamaCppDifferences(mixtral).size(), 1u);
  EXPECT_NE(LlamaCppDifferences(mixtral)[0].find("llama.cpp's llama needs a router"), std::string::npos);
}

// llama.cpp refuses a file without tokenizer.ggml.model: a weights-only export says "none", and a
// tokenizer written through add_metadata replaces it.
TEST(GgufExport, TokenizerModelIsNoneWithoutATokenizer) {
  TempDir dir;
  auto src = Synth(*SynthSpec("tiny-dense"));
  GgufExportOptions opt;
  ASSERT_TRUE(ExportGguf(src->spec, src->weights, dir.Path("bare.gguf"), opt).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> bare = GgufFile::Open(dir.Path("bare.gguf"));
  ASSERT_TRUE(bare.ok()) << bare.status();
  const GgufValue* model = (*bare)->Find("tokenizer.ggml.model");
  ASSERT_NE(model, nullptr);
  ASSERT_NE(model->AsString(), nullptr);
  EXPECT_EQ(*model->AsString(), "none");

  opt.add_metadata = [](GgufWriter* w) {
    w->SetString("tokenizer.ggml.model", "gpt2");
    return absl::OkStatus();
  };
  ASSERT_TRUE(ExportGguf(src->spec, src->weights, dir.Path("tok.gguf"), opt).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> tok = GgufFile::Open(dir.Path("tok.gguf"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(*(*tok)->Find("tokenizer.ggml.model")->AsString(), "gpt2");
}

// Progress comes within a tensor, block by block of rows, not only at tensor ends (a 150k-row
// embedding must move the bar): more calls than tensors, `done` never shrinking, ending at the total.
TEST(GgufExport, ProgressMovesWithinATensor) {
  TempDir dir;
  auto src = Synth(*SynthSpec("tiny-dense"));
  GgufExportOptions opt;
  opt.dtype = DType::kQ8_0;  // converted row by row (f32 in), not copied whole
  opt.threads = 2;
  std::vector<std::pair<size_t, size_t>> calls;  // (done, total); serialized by ExportGguf
  opt.progress = [&](int64_t, size_t done, size_t total) { calls.emplace_back(done, total); };
  ASSERT_TRUE(ExportGguf(src->spec, src->weights, dir.Path("p.gguf"), opt).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(dir.Path("p.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_FALSE(calls.empty());
  // One call per tensor end: any more came from inside a tensor.
  EXPECT_GT(calls.size(), (*f)->tensors().size());
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GE(calls[i].first, calls[i - 1].first) << i;
  EXPECT_EQ(calls.back().first, calls.back().second);
  // Throttled: at most one call per 1/500 of the total, plus one per tensor end.
  EXPECT_LE(calls.size(), 500 + (*f)->tensors().size());
}

// Writing the file reports too: a call per tensor (each under the writer's 64 MiB step), growing to
// the total of the tensors' bytes, which is what the file holds past its header.
TEST(GgufExport, WritingTheFileReportsItsProgress) {
  TempDir dir;
  auto src = Synth(*SynthSpec("tiny-dense"));
  GgufExportOptions opt;
  opt.dtype = DType::kQ8_0;
  std::vector<std::pair<size_t, size_t>> calls;
  opt.write_progress = [&](size_t done, size_t total) { calls.emplace_back(done, total); };
  ASSERT_TRUE(ExportGguf(src->spec, src->weights, dir.Path("w.gguf"), opt).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(dir.Path("w.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(calls.size(), (*f)->tensors().size());
  size_t bytes = 0;
  for (const GgufTensorInfo& t : (*f)->tensors()) bytes += t.bytes;
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].first, calls[i - 1].first) << i;
  EXPECT_EQ(calls.back().first, bytes);
  EXPECT_EQ(calls.back().second, bytes);
}

TEST(GgufExport, RejectsUnwritableType) {
  TempDir dir;
  auto src = Synth(*SynthSpec("tiny-dense"));
  GgufExportOptions opt;
  opt.dtype = DType::kQ3_K;  // read, never written
  absl::Status s = ExportGguf(src->spec, src->weights, dir.Path("x.gguf"), opt);
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(std::filesystem::exists(dir.Path("x.gguf")));
}

TEST(LlamaPermutation, KnownRowMapping) {
  // head_dim 8: interleaved rows (0..7) come from rotate-half rows 0,4,1,5,2,6,3,7; next head +8.
  const int64_t want[] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13};
  for (int64_t r = 0; r < 12; ++r) EXPECT_EQ(InterleavedSourceRow(r, 8), want[r]) << r;
}

ModelSpec TinyMixtral() {
  ModelSpec s = *SynthSpec("tiny-moe");
  s.arch = Arch::kMixtral;
  s.qk_norm = false;
  s.router_norm = RouterNorm::kTopKThenSoftmax;
  s.ffn_dim = s.expert_ffn_dim;
  return s;
}

TEST(LlamaPermutation, ExportPermutesQkAndLoadsInterleaved) {
  TempDir dir;
  auto src = Synth(TinyMixtral());
  auto back = ExportAndLoad(*src, dir.Path("mixtral.gguf"), DType::kF32);
  ASSERT_NE(back, nullptr);
  ExpectSameSpec(src->spec, back->spec);
  EXPECT_EQ(back->spec.rope_style, RopeStyle::kInterleaved);
  const int64_t d = src->spec.head_dim, D = src->spec.hidden;
  for (Role role : {Role::kAttnQ, Role::kAttnK, Role::kAttnV}) {
    const TensorView a = *src->weights.Get({role, 1});
    const TensorView b = *back->weights.Get({role, 1});
    const auto* fa = static_cast<const float*>(a.data);
    const auto* fb = static_cast<const float*>(b.data);
    for (int64_t r = 0; r < a.rows(); ++r) {
      const int64_t from = role == Role::kAttnV ? r : InterleavedSourceRow(r, d);
      ASSERT_EQ(std::memcmp(fb + r * D, fa + from * D, D * sizeof(float)), 0)
          << RoleName(role) << " row " << r;
    }
  }
  // Row 1 of head 1 of K came from row d/2 of that head: a concrete check of the mapping.
  const TensorView k0 = *src->weights.Get({Role::kAttnK, 0});
  const TensorView k1 = *back->weights.Get({Role::kAttnK, 0});
  EXPECT_EQ(static_cast<const float*>(k1.data)[(d + 1) * D], static_cast<const float*>(k0.data)[(d + d / 2) * D]);

  // Re-exporting an interleaved model must not permute again.
  auto again = ExportAndLoad(*back, dir.Path("again.gguf"), DType::kF32);
  ASSERT_NE(again, nullptr);
  const TensorView q1 = *back->weights.Get({Role::kAttnQ, 0});
  const TensorView q2 = *again->weights.Get({Role::kAttnQ, 0});
  EXPECT_EQ(std::memcmp(q1.data, q2.data, q1.bytes), 0);
}

TEST(LoadGguf, MissingTensorIsNamed) {
  TempDir dir;
  auto src = Synth(*SynthSpec("tiny-dense"));
  // Export a spec that claims 3 layers' worth of metadata but only has the tensors of 2.
  GgufWriter w;
  w.SetString("general.architecture", "qwen3");
  w.SetU32("qwen3.embedding_length", 64);
  w.SetU32("qwen3.block_count", 2);
  w.SetU32("qwen3.feed_forward_length", 128);
  w.SetU32("qwen3.attention.head_count", 4);
  w.SetU32("qwen3.attention.head_count_kv", 2);
  w.SetU32("qwen3.attention.key_length", 16);
  w.SetU32("qwen3.vocab_size", 300);
  for (const auto& [key, v] : src->weights.tensors()) {
    if (key.layer == 1 && key.role == Role::kFfnUp) continue;
    std::vector<int64_t> ne(v.shape.rend() - v.ndim, v.shape.rend());
    ASSERT_TRUE(w.AddTensor(GgufTensorName(key), ne, v.dtype, v.data, v.bytes).ok());
  }
  ASSERT_TRUE(w.Write(dir.Path("broken.gguf")).ok());
  absl::StatusOr<std::unique_ptr<LoadedModel>> m = LoadModel(dir.Path("broken.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.1.ffn_up.weight"), absl::string_view::npos) << m.status();
  EXPECT_NE(m.status().message().find("broken.gguf"), absl::string_view::npos) << m.status();
}

}  // namespace
}  // namespace specgen
