// `specgen logits`: runs one prompt through the forward pass (CPU reference, or the GPU with --device)
// and writes the fp32 logits
// of every position ([n, V] little-endian row-major), the way to check a model against another
// implementation. The file goes through SafeFileWriter: never half a file, never over the model.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/backend/make_backend.h"
#include "engine/cli/command.h"
#include "engine/cli/generation_flags.h"
#include "engine/cli/id_list.h"
#include "engine/cli/load_report.h"
#include "engine/cli/resource_check.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "engine/io/safe_write.h"
#include "engine/model/transformer.h"

namespace specgen::cli {
namespace {

static_assert(std::endian::native == std::endian::little, "logits files are little-endian");

// FNV-1a over the bytes: equal checksums mean bit-identical logits.
uint64_t Checksum(const std::vector<float>& data) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  for (size_t i = 0; i < data.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct LogitsFlags {
  std::string model;
  std::string prompt_ids;
  std::string out;
  int64_t context = 0;
  int threads = 0;
  std::string device = "cpu";
  std::string gemv_order = "auto";  // --gemv-order (ParseGemvOrder)
  CacheTypeFlags cache_type;
  bool no_check_tensors = false;
};

absl::Status RunLogits(const LogitsFlags& flags) {
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParseIdList("--prompt-ids", flags.prompt_ids));
  SafeWriteOptions output;
  output.inputs = {flags.model};
  output.label = Cat("--out ", flags.out);
  if (!flags.out.empty()) RETURN_IF_ERROR(CheckOutputPath(flags.out, output));
  BackendOptions backend_options;
  ASSIGN_OR_RETURN(backend_options.cpu_threads, CheckThreads(flags.threads, "-t"));
  ASSIGN_OR_RETURN(backend_options.gemv_order, ParseGemvOrder(flags.gemv_order));
  ASSIGN_OR_RETURN(const ModelSpec spec, LoadModelSpec(flags.model));
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(flags.device, backend_options));
  TransformerOptions options;
  ASSIGN_OR_RETURN(options.kv_type, ParseCacheType(flags.cache_type));
  ASSIGN_OR_RETURN(options.max_context, CheckContext(flags.context, spec, nullptr, *backend, options.kv_type));
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> loaded, LoadModel(flags.model));
  if (!flags.no_check_tensors) RETURN_IF_ERROR(CheckLoadedTensors("model", flags.model, *loaded));
  std::shared_ptr<const LoadedModel> model = std::move(loaded);
  ASSIGN_OR_RETURN(std::unique_ptr<Transformer> lm, Transformer::Create(model, backend.get(), options));
  if (static_cast<int64_t>(ids.size()) > lm->max_context()) {
    return InvalidArgument("--prompt-ids: ", ids.size(), " tokens exceed the context of ",
                           lm->max_context(), " (raise it with -c)");
  }
  std::vector<float> logits;
  RETURN_IF_ERROR(lm->Forward(ids, &logits));
  const int64_t n = static_cast<int64_t>(ids.size()), v = lm->vocab_size();
  // A NaN row is no set of logits: refused before anything is written (weights the load check did
  // not see, --no-check-tensors, or activations that overflowed).
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * v;
    if (!std::all_of(row, row + v, [](float x) { return std::isfinite(x); })) {
      return absl::DataLossError(Cat("the logits of position ", i, " (token ", ids[i],
                                     ") are not finite: the weights or activations hold NaN or Inf; nothing "
                                     "written"));
    }
  }
  if (!flags.out.empty()) {
    RETURN_IF_ERROR(WriteFileSafely(
        flags.out, {reinterpret_cast<const uint8_t*>(logits.data()), logits.size() * sizeof(float)},
        output));
  }

  std::printf("model %s (%s) on %s, logits [%lld, %lld] fp32%s%s\n", model->source.c_str(),
              std::string(ArchName(model->spec.arch)).c_str(), std::string(backend->name()).c_str(), static_cast<long long>(n),
              static_cast<long long>(v), flags.out.empty() ? "" : " -> ", flags.out.c_str());
  for (int64_t i = std::max<int64_t>(0, n - 5); i < n; ++i) {
    const float* row = logits.data() + i * v;
    const int64_t arg = std::max_element(row, row + v) - row;
    std::printf("  pos %lld: token %d  argmax %lld  logit %.6g\n", static_cast<long long>(i), ids[i],
                static_cast<long long>(arg), row[arg]);
  }
  double sum = 0.0;
  for (float x : logits) sum += x;
  std::printf("checksum fnv1a64=%016llx sum=%.9g\n", static_cast<unsigned long long>(Checksum(logits)),
              sum);
  return absl::OkStatus();
}

Registrar kLogits{{"logits", "Write the fp32 logits of every prompt position (CPU reference)",
                   [](CLI::App& app) {
                     auto flags = std::make_shared<LogitsFlags>();
                     app.add_option("-m,--model", flags->model, "GGUF file, HF directory or synth:PRESET")
                         ->required();
                     app.add_option("--prompt-ids", flags->prompt_ids, "comma-separated token ids")
                         ->required();
                     app.add_option("--out", flags->out, "write [n, V] fp32 little-endian logits here");
                     app.add_option("-c,--ctx-size", flags->context,
                                    "context length (default: min(model's, 4096))");
                     app.add_option("-t,--threads", flags->threads, "CPU threads (default: all)");
                     app.add_option("--device", flags->device,
                                    "cpu (the fp32 reference; default) | cuda | auto (cuda when "
                                    "built in and a GPU is present)")
                         ->capture_default_str();
                     app.add_option("--gemv-order", flags->gemv_order,
                                    "auto|fma|tensor: how products of 1..16 tokens are summed on "
                                    "the GPU (see `specgen generate --help`)")
                         ->capture_default_str();
                     // The reference tool: an fp32 cache unless asked (generate's default is f16).
                     flags->cache_type.both = "f32";
                     AddCacheTypeFlags(app, &flags->cache_type);
                     AddNoCheckTensorsFlag(app, &flags->no_check_tensors);
                     return [flags]() { return RunLogits(*flags); };
                   }}};

}  // namespace
}  // namespace specgen::cli
