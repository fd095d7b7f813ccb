// `specgen synth --preset NAME --type T --seed S --out FILE.gguf`: random weights in the exact shape
// of a published model, written as GGUF (for benchmarks at real scale without downloading weights).
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "engine/cli/command.h"
#include "engine/cli/export_progress.h"
#include "engine/cli/resource_check.h"
#include "engine/core/byte_size.h"
#include "engine/core/progress.h"
#include "engine/core/status_macros.h"
#include "engine/io/gguf_export.h"
#include "engine/io/synth.h"

namespace specgen::cli {
namespace {

struct SynthFlags {
  std::string preset;
  std::string type = "bf16";
  uint64_t seed = 0;
  std::string out;
  int threads = 0;
};

absl::Status RunSynth(const SynthFlags& f) {
  ASSIGN_OR_RETURN(ModelSpec spec, SynthSpec(f.preset));
  ASSIGN_OR_RETURN(const ExportType type, ParseExportType(f.type));
  ASSIGN_OR_RETURN(const int threads, CheckThreads(f.threads, "--threads"));
  GgufExportOptions opt;
  opt.output.label = Cat("--out ", f.out);
  RETURN_IF_ERROR(CheckOutputPath(f.out, opt.output));  // before the weights are generated
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<LoadedModel>> synth;
  {
    ProgressBar bar(Cat("generating ", spec.name, " as ", type.name), 0);
    synth = SynthWeights(spec, type, f.seed, threads, bar.Callback());
  }
  if (absl::IsResourceExhausted(synth.status())) {
    return absl::ResourceExhaustedError(Cat(synth.status().message(), "; pick a smaller --type or preset"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> model, std::move(synth));
  const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  opt.type = type;
  opt.threads = threads;
  RETURN_IF_ERROR(ExportGgufWithProgress(*model, f.out, Cat("writing ", f.out), opt));
  const double all_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::error_code ec;
  const auto size = std::filesystem::file_size(f.out, ec);
  std::printf("wrote %s: %s as %s, seed %llu, %s (generated in %.2f s, %.2f s in all)\n", f.out.c_str(),
              spec.name.c_str(), type.name.c_str(), static_cast<unsigned long long>(f.seed),
              ec ? "?" : FormatBytes(static_cast<double>(size)).c_str(), gen_s, all_s);
  return absl::OkStatus();
}

std::string PresetHelp() {
  std::string s = "Model shape to generate:";
  for (const SynthPresetInfo& p : SynthPresets()) s += Cat("\n  ", p.name, ": ", p.description);
  return s;
}

Registrar kSynth{{"synth", "Write a GGUF of random weights in the exact shape of a published model",
                  [](CLI::App& app) {
                    auto f = std::make_shared<SynthFlags>();
                    app.add_option("--preset", f->preset, PresetHelp())->required();
                    app.add_option("--type", f->type,
                                   Cat("Weight type: ", kExportTypes, ", as for convert (the _m types are "
                                       "llama.cpp's mixes). Norms and routers stay f32"))
                        ->capture_default_str();
                    app.add_option("--seed", f->seed,
                                   "Seed of the counter-based generator: the same seed gives the same bytes "
                                   "whatever the thread count")
                        ->capture_default_str();
                    app.add_option("--out", f->out,
                                   "Output GGUF path; written to a temporary file and renamed, so it is never "
                                   "left half-written")
                        ->required();
                    app.add_option("--threads", f->threads, "Generator threads; 0 = every hardware thread")
                        ->capture_default_str();
                    return [f]() { return RunSynth(*f); };
                  }}};

}  // namespace
}  // namespace specgen::cli
