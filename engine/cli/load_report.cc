#include "engine/cli/load_report.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "engine/core/byte_size.h"
#include "engine/core/progress.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "engine/io/tensor_check.h"
#include "moe/apply_plan.h"

namespace specgen::cli {

std::string LoadSummary(std::string_view role, const Transformer& lm, std::string_view backend_name) {
  std::vector<std::pair<size_t, DType>> by_size;
  for (const auto& [dtype, bytes] : lm.resident_bytes()) by_size.push_back({bytes, dtype});
  std::sort(by_size.rbegin(), by_size.rend());
  std::string weights;
  for (const auto& [bytes, dtype] : by_size) {
    weights += Cat(weights.empty() ? "" : " + ", FormatBytes(static_cast<double>(bytes)), " ", Name(dtype));
  }
  // The cache's rows are stored in its type on the GPU; the CPU reference keeps them rounded in floats.
  size_t kv = 0;
  const KvCache& cache = lm.kv_cache();
  const DType kv_type = cache.n_layers() > 0 ? cache.k(0).dtype() : DType::kF32;
  const size_t kv_elem = backend_name == "cpu" ? sizeof(float) : static_cast<size_t>(Info(kv_type).block_bytes);
  for (int64_t l = 0; l < cache.n_layers(); ++l) {
    kv += static_cast<size_t>(cache.k(l).capacity_rows() * cache.k(l).cols() +
                              cache.v(l).capacity_rows() * cache.v(l).cols()) *
          kv_elem;
  }
  const ModelSpec& spec = lm.spec();
  std::string streamed;
  if (lm.streams_experts()) {
    absl::StatusOr<ExpertStreamStats> s = lm.expert_stream_stats();
    if (s.ok()) {
      streamed = Cat(", experts streamed from ", FormatBytes(static_cast<double>(s->host_bytes)),
                     " of pinned host RAM through ", s->slots, " VRAM slots (",
                     FormatBytes(static_cast<double>(s->slots) * static_cast<double>(s->slot_bytes)),
                     "), prompts fed in chunks of ", lm.prefill_chunk());
    }
  }
  if (lm.streams_dense_layers()) {
    absl::StatusOr<LayerStreamStats> s = lm.dense_stream_stats();
    if (s.ok()) {
      streamed += Cat(", dense FFN of ", s->layers, " layers streamed from ",
                      FormatBytes(static_cast<double>(s->host_bytes)), " of pinned host RAM through a ring of ",
                      s->ring, " layer buffers (",
                      FormatBytes(static_cast<double>(s->ring) * static_cast<double>(s->buffer_bytes)), ")");
    }
  }
  return Cat(role, " ", spec.name.empty() ? std::string("model") : spec.name, ": ", backend_name, ", ",
             spec.n_layers, " layers, ", weights.empty() ? std::string("no weights") : weights, streamed,
             ", KV cache ", FormatBytes(static_cast<double>(kv)), " ", Name(kv_type), " (", cache.max_positions(),
             " positions)");
}

absl::Status CheckLoadedTensors(std::string_view role, const std::string& path, const LoadedModel& model) {
  if (SourceKind(path) == ModelSourceKind::kSynth) return absl::OkStatus();
  ProgressBar bar(Cat("checking ", role, " ", path, " for NaN and Inf"), 0);
  TensorCheckOptions options;
  options.progress = bar.Callback();
  return CheckTensorsFinite(model.weights, path, options);
}

absl::StatusOr<std::unique_ptr<Transformer>> LoadWithReport(std::string_view role, const std::string& path,
                                                             Backend* backend, int64_t context, DType kv_type,
                                                             const moe::RunPlan& plan, bool check_tensors) {
  std::unique_ptr<LoadedModel> loaded;
  {
    ProgressBar bar(Cat("generating ", role, " ", path), 0);  // synth: only; files are mapped
    ASSIGN_OR_RETURN(loaded, LoadModel(path, bar.Callback()));
  }
  if (check_tensors) RETURN_IF_ERROR(CheckLoadedTensors(role, path, *loaded));
  std::shared_ptr<const LoadedModel> model = std::move(loaded);
  TransformerOptions options;
  options.max_context = context;
  options.kv_type = kv_type;
  moe::ApplyRunPlan(plan, &options);
  std::unique_ptr<Transformer> lm;
  {
    const std::string name = model->spec.name.empty() ? path : model->spec.name;
    ProgressBar bar(backend->name() == "cpu" ? Cat("loading ", role, " ", name, " (to f32)")
                                             : Cat("uploading ", role, " ", name, " to ", backend->name()),
                    0);
    // One bar over every part: the uploads, then (when something streams) the copies into pinned host
    // RAM of the dense layers and of the experts.
    size_t upload_done = 0, upload_total = 0, copy_done = 0, copy_total = 0, dense_done = 0, dense_total = 0;
    auto show = [&] {
      bar.SetTotal(upload_total + copy_total + dense_total);
      bar.Update(upload_done + copy_done + dense_done);
    };
    options.upload_progress = [&](size_t done, size_t total) {
      upload_done = done, upload_total = total;
      show();
    };
    options.expert_copy_progress = [&](size_t done, size_t total) {
      copy_done = done, copy_total = total;
      show();
    };
    options.dense_copy_progress = [&](size_t done, size_t total) {
      dense_done = done, dense_total = total;
      show();
    };
    ASSIGN_OR_RETURN(lm, Transformer::Create(model, backend, options));
  }
  std::fprintf(stderr, "%s\n", LoadSummary(role, *lm, backend->name()).c_str());
  return lm;
}

}  // namespace specgen::cli
