// Dense layers streamed through a ring of VRAM layer buffers (docs/design.md §12,
// moe/cuda/streamed_layers.h). Skips without a device.
//  - The ring itself: each layer's bytes are in its buffer between Acquire and Release, read by work
//    queued on the compute stream, pass after pass, eagerly and replayed from a CUDA graph; calls out
//    of order are errors.
//  - Streamed equals resident bit for bit: logits of a prefill, of passes of 1..16 positions and
//    greedy output, eagerly and replayed from CUDA graphs (GraphedTargetPass) several times, on a synth
//    model whose dense layers are not consecutive (rings of 1, 2 and 3 buffers for 4 streamed layers,
//    some layers resident and some streamed, bf16 and packed q8_0), with its experts streamed too, on
//    the qwen3moe-dense-layer and qwen3-dense fixtures, the bundled (dense) draft as a model, and a
//    plan made by the planner.
//  - The speculative loop with such a target: greedy output equals target-only greedy, the
//    verification replays from graphs, one host wait a step.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_graph.h"
#include "moe/cuda/streamed_layers.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "engine/io/synth.h"
#include "engine/model/transformer.h"
#include "moe/planner.h"
#include "moe/run_plan.h"
#include "engine/speculative/device_speculative_decoder.h"
#include "engine/speculative/graphed_target_pass.h"
#include "gtest/gtest.h"
#include "kernels/attention.cuh"
#include "tests/common/gpu_test_env.h"
#include "tests/common/speculative_options.h"
#include "tests/common/streamed_equality.h"

namespace specgen {
namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// ---------------------------------------------------------------- the ring on its own

float PatternValue(int layer, int weight, int64_t i) {
  return static_cast<float>(layer * 1000 + weight * 100) + static_cast<float>(i % 997) * 0.5f;
}

// Each pass, for every streamed layer in order, copies the layer's weights from the ring (work on the
// compute stream between Acquire and Release) into a check area; the area must then hold every layer's
// host bytes. Layers of a few MiB so that a missing wait would read a buffer mid-copy.
void RunRingPasses(int ring) {
  SCOPED_TRACE("ring " + std::to_string(ring));
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  const int layers = 5;
  const std::vector<int64_t> rows = {512, 64, 1024};  // three weights a layer, [rows, 1024] f32
  constexpr int64_t kCols = 1024;
  std::vector<std::vector<std::vector<float>>> data(layers);
  std::vector<LayerViews> views(layers);
  size_t check_bytes = 0;
  for (int l = 0; l < layers; ++l) {
    views[l].name = "layer " + std::to_string(l);
    for (int w = 0; w < 3; ++w) {
      const int64_t r = rows[w] + 64 * l;  // layers of different sizes
      data[l].emplace_back(static_cast<size_t>(r * kCols));
      for (int64_t i = 0; i < r * kCols; ++i) data[l][w][i] = PatternValue(l, w, i);
      TensorView t;
      t.dtype = DType::kF32;
      t.ndim = 2;
      t.shape = {r, kCols, 0, 0};
      t.data = data[l][w].data();
      t.bytes = data[l][w].size() * sizeof(float);
      views[l].weights.push_back(t);
      check_bytes += t.bytes;
    }
  }
  LayerStreamingOptions o;
  o.ring_layers = ring;
  auto made = CudaStreamedLayers::Create(be.get(), views, o);
  ASSERT_TRUE(made.ok()) << made.status();
  CudaStreamedLayers& s = **made;
  EXPECT_EQ(s.layout().ring, std::min(ring, layers));
  // Views have fixed addresses in buffer i mod ring.
  for (int l = 0; l < layers; ++l) {
    EXPECT_EQ(CudaBackend::Data(s.weight(l, 0)), s.buffer(l % s.layout().ring)) << "layer " << l;
  }
  char* check = nullptr;
  CUDA_OK(cudaMalloc(&check, check_bytes));
  cudaStream_t stream = be->stream();
  auto pass = [&]() -> absl::Status {
    RETURN_IF_ERROR(s.BeginPass());
    size_t at = 0;
    for (int l = 0; l < layers; ++l) {
      RETURN_IF_ERROR(s.Acquire(l));
      for (int w = 0; w < 3; ++w) {
        const Weight& wt = s.weight(l, w);
        const size_t bytes = static_cast<size_t>(wt.rows() * wt.cols()) * sizeof(float);
        if (cudaMemcpyAsync(check + at, CudaBackend::Data(wt), bytes, cudaMemcpyDeviceToDevice, stream) != cudaSuccess) {
          return absl::InternalError("copy");
        }
        at += bytes;
      }
      RETURN_IF_ERROR(s.Release(l));
    }
    return s.EndPass();
  };
  auto verify = [&](const std::string& what) {
    std::vector<float> got(check_bytes / sizeof(float));
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(got.data(), check, check_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t at = 0;
    for (int l = 0; l < layers; ++l) {
      for (int w = 0; w < 3; ++w) {
        ASSERT_EQ(std::memcmp(got.data() + at, data[l][w].data(), data[l][w].size() * sizeof(float)), 0)
            << what << ": layer " << l << " weight " << w << " did not hold its bytes when its ops ran";
        at += data[l][w].size();
      }
    }
  };
  for (int p = 0; p < 3; ++p) {
    CUDA_OK(cudaMemsetAsync(check, 0, check_bytes, stream));
    ASSERT_TRUE(pass().ok());
    verify("eager pass " + std::to_string(p));
    if (::testing::Test::HasFatalFailure()) return;
  }
  // The same pass captured once and replayed: each replay copies every layer again.
  auto graph = CudaGraph::Capture(stream, pass);
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (int r = 0; r < 4; ++r) {
    CUDA_OK(cudaMemsetAsync(check, 0, check_bytes, stream));
    ASSERT_TRUE(graph->Launch(stream).ok());
    verify("replay " + std::to_string(r));
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Eager again after the replays.
  CUDA_OK(cudaMemsetAsync(check, 0, check_bytes, stream));
  ASSERT_TRUE(pass().ok());
  verify("eager pass after the replays");
  const LayerStreamStats st = s.Stats();
  EXPECT_EQ(st.layers, layers);
  EXPECT_EQ(st.pass_bytes, check_bytes) << "a pass copies each layer's weights once (no padding between "
                                           "weights of these sizes)";
  EXPECT_EQ(st.passes, 4) << "the eager passes; the capture ran none (the replays are the model's to count)";
  cudaFree(check);
}

TEST(StreamedLayers, EachLayerHoldsItsBytesWhileItsOpsRun) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  for (int ring : {1, 2, 3, 8}) {
    RunRingPasses(ring);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(StreamedLayers, CallsOutOfOrderAreErrors) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto be = testing::TestCudaBackend(size_t{1} << 28);
  ASSERT_NE(be, nullptr);
  std::vector<float> d(256 * 64, 1.0f);
  std::vector<LayerViews> views(3);
  for (auto& v : views) {
    TensorView t;
    t.dtype = DType::kF32;
    t.ndim = 2;
    t.shape = {256, 64, 0, 0};
    t.data = d.data();
    t.bytes = d.size() * sizeof(float);
    v.weights = {t};
    v.name = "layer";
  }
  auto made = CudaStreamedLayers::Create(be.get(), views, {});
  ASSERT_TRUE(made.ok()) << made.status();
  CudaStreamedLayers& s = **made;
  EXPECT_EQ(s.Acquire(0).code(), absl::StatusCode::kFailedPrecondition) << "outside a pass";
  EXPECT_EQ(s.EndPass().code(), absl::StatusCode::kFailedPrecondition) << "no pass began";
  ASSERT_TRUE(s.BeginPass().ok());
  EXPECT_EQ(s.BeginPass().code(), absl::StatusCode::kFailedPrecondition) << "a pass is running";
  EXPECT_EQ(s.Acquire(1).code(), absl::StatusCode::kFailedPrecondition) << "layer 0 comes first";
  EXPECT_EQ(s.Release(0).code(), absl::StatusCode::kFailedPrecondition) << "not acquired";
  ASSERT_TRUE(s.Acquire(0).ok());
  EXPECT_EQ(s.Acquire(0).code(), absl::StatusCode::kFailedPrecondition) << "held";
  ASSERT_TRUE(s.Release(0).ok());
  // A pass cut short still ends (and joins the copy stream), and the next one starts from layer 0.
  ASSERT_TRUE(s.EndPass().ok());
  ASSERT_TRUE(s.BeginPass().ok());
  ASSERT_TRUE(s.Acquire(0).ok());
  ASSERT_TRUE(s.EndPass().ok());
  EXPECT_EQ(cudaStreamSynchronize(be->stream()), cudaSuccess);
  // Bad input: no layers; a ring of 0.
  EXPECT_FALSE(CudaStreamedLayers::Create(be.get(), {}, {}).ok());
  LayerStreamingOptions zero;
  zero.ring_layers = 0;
  EXPECT_FALSE(CudaStreamedLayers::Create(be.get(), views, zero).ok());
}

// ---------------------------------------------------------------- streamed == resident

using testing::Argmax;
using testing::FirstDifference;
using testing::PassIds;

std::shared_ptr<const LoadedModel> Load(const std::string& path) { return testing::LoadShared(path); }

// tiny-moe's shape with six layers, four of them dense (0, 2, 3, 5): streamed layers that are not
// consecutive, beside MoE layers. Heads of 32 (the test presets' 16 has no decode attention kernel,
// so its passes could not be captured).
std::shared_ptr<const LoadedModel> MixedModel(DType dtype) {
  auto spec = SynthSpec("tiny-moe");
  EXPECT_TRUE(spec.ok());
  if (!spec.ok()) return nullptr;
  spec->head_dim = 32;
  spec->n_layers = 6;
  spec->layer_is_moe = {false, true, false, false, true, false};
  auto w = SynthWeights(*spec, dtype, 7);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::shared_ptr<const LoadedModel>(std::move(w).value()) : nullptr;
}

std::vector<int> DenseLayers(const ModelSpec& spec) {
  std::vector<int> out;
  for (int l = 0; l < spec.n_layers; ++l) {
    if (!spec.layer_is_moe[l]) out.push_back(l);
  }
  return out;
}

struct DenseCase {
  std::vector<int> layers;     // streamed dense layers
  int ring = 2;
  int64_t expert_slots = -1;   // >= 0: the experts stream too
};

std::string Describe(const DenseCase& c) {
  std::string s = "dense layers {";
  for (int l : c.layers) s += (s.back() == '{' ? "" : ",") + std::to_string(l);
  return s + "}, ring " + std::to_string(c.ring) +
         (c.expert_slots >= 0 ? ", experts through " + std::to_string(c.expert_slots) + " slots" : "");
}

void CheckDenseStreamedEqualsResident(const char* what, std::shared_ptr<const LoadedModel> model, const DenseCase& c) {
  SCOPED_TRACE(std::string(what) + ", " + Describe(c));
  ASSERT_NE(model, nullptr);
  const ModelSpec& spec = model->spec;
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  TransformerOptions ro;
  ro.max_context = 160;
  auto resident = Transformer::Create(model, be.get(), ro);
  ASSERT_TRUE(resident.ok()) << resident.status();
  TransformerOptions so = ro;
  so.streamed_dense_layers = c.layers;
  so.dense_ring_layers = c.ring;
  so.expert_cache_slots = c.expert_slots;
  size_t progress_total = 0, progress_last = 0;
  so.dense_copy_progress = [&](size_t done, size_t total) {
    EXPECT_GE(done, progress_last);
    progress_last = done;
    progress_total = total;
  };
  auto streamed = Transformer::Create(model, be.get(), so);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  Transformer* r = resident->get();
  Transformer* s = streamed->get();
  ASSERT_TRUE(s->streams_dense_layers());
  EXPECT_EQ(s->streams_experts(), c.expert_slots >= 0);
  EXPECT_GT(progress_total, 0u);
  EXPECT_EQ(progress_last, progress_total) << "the progress callback ends at the total";
  for (int l : c.layers) EXPECT_EQ(s->layer_refs(l).gate, nullptr) << "layer " << l << "'s FFN is not resident";
  const int64_t vocab = spec.vocab_size;

  // Eager: a prefill longer than 16 (cuBLAS), then verify-sized passes (the GEMV), then greedy.
  const std::vector<int> passes = {37, 1, 4, 16, 2, 1, 8, 3};
  testing::ExpectSamePasses(*r, *s, passes);
  if (::testing::Test::HasFatalFailure()) return;
  testing::ExpectSameGreedy(*r, *s, 10);

  // Replayed from CUDA graphs: passes of 1 and 4 positions, each size captured once and replayed
  // several times, against the resident model's eager passes at the same positions. A model whose
  // attention has no decode kernel (head_dim 16) cannot be captured: its capture fails midway, with the
  // copy stream forked, and every pass runs eagerly, still equal.
  const bool capturable = kernels::DecodeAttentionTakes(static_cast<int>(spec.head_dim));
  int32_t* d_tokens = nullptr;
  CUDA_OK(cudaMalloc(&d_tokens, 16 * sizeof(int32_t)));
  auto graphed = GraphedTargetPass::Create(be.get(), s, d_tokens, 16);
  ASSERT_TRUE(graphed.ok()) << graphed.status();
  for (int step = 0; step < 8; ++step) {
    const int n = step % 2 == 0 ? 1 : 4;
    const auto ids = PassIds(r->n_past() + 1000, n, vocab);
    CUDA_OK(cudaMemcpy(d_tokens, ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
    std::vector<float> lr, ls(static_cast<size_t>(n * vocab));
    ASSERT_TRUE(r->Forward(ids, &lr).ok());
    auto out = (*graphed)->Forward(n);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(be->Read(**out, ls).ok());
    ASSERT_EQ(FirstDifference(lr, ls), "") << "graphed step " << step << " of " << n << " positions";
  }
  if (capturable) {
    EXPECT_TRUE((*graphed)->fallback_reason().empty()) << (*graphed)->fallback_reason();
    EXPECT_GE((*graphed)->replays(), 6) << "the streamed passes should replay from graphs";
  } else {
    EXPECT_FALSE((*graphed)->fallback_reason().empty()) << "head_dim " << spec.head_dim << " was captured";
  }
  ASSERT_EQ(s->n_past(), r->n_past());

  auto stats = s->dense_stream_stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->layers, static_cast<int64_t>(c.layers.size()));
  EXPECT_EQ(stats->ring, std::min<int>(c.ring, static_cast<int>(c.layers.size())));
  EXPECT_GE(stats->passes, static_cast<int64_t>(passes.size()) + 10 + 8) << "every pass counted, replays too";
  EXPECT_EQ(stats->copied_bytes, stats->passes * static_cast<int64_t>(stats->pass_bytes));
  std::printf("%s, %s: %lld passes, %zu bytes a pass, ring %d x %zu bytes, host copy %zu bytes, %lld replays\n",
              what, Describe(c).c_str(), static_cast<long long>(stats->passes), stats->pass_bytes, stats->ring,
              stats->buffer_bytes, stats->host_bytes, static_cast<long long>((*graphed)->replays()));
  graphed->reset();
  cudaFree(d_tokens);
}

TEST(StreamedLayers, EqualResidentOnSynthWithDenseAndMoeLayers) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  for (DType t : {DType::kBF16, DType::kQ8_0}) {
    auto model = MixedModel(t);
    ASSERT_NE(model, nullptr);
    const std::string what = std::string("synth tiny-moe with dense layers 0,2,3,5, ") + std::string(Name(t));
    const int64_t k = model->spec.n_experts_used;
    // Four streamed layers through 2 buffers (each buffer reused twice a pass), through 1 and 3; two
    // streamed beside two resident; and (b) the experts streamed too, through slots that evict but hold
    // a 4-position pass's union (so that pass replays from a graph).
    for (const DenseCase& c : {DenseCase{{0, 2, 3, 5}, 2}, DenseCase{{0, 2, 3, 5}, 1}, DenseCase{{0, 2, 3, 5}, 3},
                               DenseCase{{2, 5}, 2}, DenseCase{{0, 2, 3, 5}, 2, 4 * k}}) {
      CheckDenseStreamedEqualsResident(what.c_str(), model, c);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(StreamedLayers, EqualResidentOnFixtures) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const auto dir = testing::SourceDir() / "tests" / "data" / "models";
  for (const char* name : {"qwen3moe-dense-layer", "qwen3-dense", "llama-gqa"}) {
    if (!std::filesystem::exists(dir / name)) GTEST_SKIP() << "no " << dir / name;
    auto model = Load((dir / name).string());
    ASSERT_NE(model, nullptr);
    const std::vector<int> dense = DenseLayers(model->spec);
    ASSERT_FALSE(dense.empty()) << name;
    CheckDenseStreamedEqualsResident(name, model, {dense, 2});
    if (::testing::Test::HasFatalFailure()) return;
    if (model->spec.is_moe()) {  // experts and dense layers both streamed: one layer's experts of slots
      CheckDenseStreamedEqualsResident(name, model, {dense, 2, model->spec.n_experts});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// The bundled target's layers are all MoE (no dense FFN to stream; its experts are covered by
// streamed_experts_test); the bundled draft is a trained dense model, streamed here as a model of its own.
TEST(StreamedLayers, EqualResidentOnTheBundledDenseModel) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const auto path = testing::SourceDir() / "models" / "tiny-draft";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto model = Load(path.string());
  ASSERT_NE(model, nullptr);
  CheckDenseStreamedEqualsResident("tiny-draft", model, {DenseLayers(model->spec), 2});
}

// The planner's answer, as the CLI applies it: at the fixture's minimum budget every dense layer streams
// through the planned ring.
TEST(StreamedLayers, ThePlannersDenseLayersEqualResident) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  const auto path = testing::SourceDir() / "tests" / "data" / "models" / "qwen3-dense";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  moe::OffloadRequest request;
  request.target = path.string();
  request.context = 160;
  request.kv_element_bytes = 4;
  request.vram_budget = size_t{1} << 40;
  auto bytes = moe::ReadModelBytes(request.target);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  moe::PlanOptions po;
  po.context = request.context;
  po.kv_element_bytes = request.kv_element_bytes;
  po.vram_budget = request.vram_budget;
  auto probe = moe::MakePlan(*bytes, nullptr, po);
  ASSERT_TRUE(probe.ok()) << probe.status();
  request.vram_budget = probe->minimum_budget;
  auto run = moe::PlanRun(request);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_FALSE(run->streamed_dense_layers.empty()) << "the minimum budget should stream dense layers";
  auto model = Load(request.target);
  ASSERT_NE(model, nullptr);
  CheckDenseStreamedEqualsResident("qwen3-dense as planned", model,
                                   {run->streamed_dense_layers, run->dense_ring_layers, run->expert_cache_slots});
}

// ---------------------------------------------------------------- the speculative loop

TEST(StreamedLayers, SpeculativeGreedyEqualsTargetOnlyWithOneWaitAStep) {
  SPECGEN_SKIP_WITHOUT_CUDA();
  auto be = testing::TestCudaBackend(size_t{1} << 30);
  ASSERT_NE(be, nullptr);
  auto target_model = MixedModel(DType::kBF16);
  auto dspec = SynthSpec("tiny-dense");
  ASSERT_TRUE(target_model != nullptr && dspec.ok());
  dspec->head_dim = 32;  // as the target's: capturable attention
  auto dw = SynthWeights(*dspec, DType::kBF16, 2);
  ASSERT_TRUE(dw.ok()) << dw.status();
  std::shared_ptr<const LoadedModel> draft_model(std::move(dw).value());
  ASSERT_EQ(draft_model->spec.vocab_size, target_model->spec.vocab_size);
  TransformerOptions o;
  o.max_context = 256;
  auto resident = Transformer::Create(target_model, be.get(), o);
  auto draft = Transformer::Create(draft_model, be.get(), o);
  ASSERT_TRUE(resident.ok() && draft.ok());
  o.streamed_dense_layers = DenseLayers(target_model->spec);
  o.dense_ring_layers = 2;
  auto streamed = Transformer::Create(target_model, be.get(), o);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  const std::vector<std::vector<int32_t>> prompts = {{1, 17, 42, 99, 5, 250, 31}, {1, 200, 3, 3, 77}};
  auto run = [&](Transformer* target, int k, StepSyncStats* syncs, VerifyPassStats* vstats) {
    return testing::DeviceGreedyTokens(be.get(), target, draft->get(), k, prompts, syncs, vstats);
  };
  const auto plain = run(resident->get(), 0, nullptr, nullptr);
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(run(streamed->get(), 0, nullptr, nullptr), plain) << "streamed target-only greedy";
  StepSyncStats ss;
  VerifyPassStats sv;
  EXPECT_EQ(run(streamed->get(), 3, &ss, &sv), plain) << "streamed speculative greedy";
  std::printf("dense-streamed target: %lld steps, %lld result waits, %lld other; %lld replays, %lld eager%s%s\n",
              static_cast<long long>(ss.steps), static_cast<long long>(ss.step_result),
              static_cast<long long>(ss.other), static_cast<long long>(sv.graph_replays),
              static_cast<long long>(sv.eager_passes), sv.why_not_graph.empty() ? "" : "; why: ",
              sv.why_not_graph.c_str());
  EXPECT_EQ(ss.step_result, ss.steps);
  EXPECT_EQ(ss.other, 0);
  EXPECT_TRUE(sv.why_not_graph.empty()) << sv.why_not_graph;
  EXPECT_GT(sv.graph_replays, 0) << "the verification should replay from graphs";
}

}  // namespace
}  // namespace specgen
