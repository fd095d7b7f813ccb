// `specgen convert HF_DIR OUT.gguf --type T`: a Hugging Face checkpoint (or any model path) to a GGUF
// file that specgen and llama.cpp load. Llama/Mixtral Q/K rows are permuted for interleaved RoPE.
// --type picks one dtype or one of llama.cpp's mixes (engine/io/quant_mix.h); a progress line with
// the layer and an ETA follows long conversions on stderr (engine/core/progress.h).
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "engine/cli/command.h"
#include "engine/cli/export_progress.h"
#include "engine/cli/generation_flags.h"
#include "engine/cli/load_report.h"
#include "engine/cli/resource_check.h"
#include "engine/core/byte_size.h"
#include "engine/core/progress.h"
#include "engine/core/status_macros.h"
#include "engine/io/gguf_export.h"
#include "engine/io/model_loader.h"
#include "engine/tokenizer/tokenizer_loader.h"

namespace specgen::cli {
namespace {

struct ConvertFlags {
  std::string in;
  std::string out;
  std::string type = "f16";
  int threads = 0;
  bool no_check_tensors = false;
};

absl::Status RunConvert(const ConvertFlags& f) {
  ASSIGN_OR_RETURN(const ExportType type, ParseExportType(f.type));
  ASSIGN_OR_RETURN(const int threads, CheckThreads(f.threads, "--threads"));
  GgufExportOptions opt;
  opt.output.inputs = {f.in};
  opt.output.label = Cat("OUT ", f.out);
  RETURN_IF_ERROR(CheckOutputPath(f.out, opt.output));  // before the model is read
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<LoadedModel> model;
  {
    ProgressBar bar(Cat("reading ", f.in), 0);
    ASSIGN_OR_RETURN(model, LoadModel(f.in, bar.Callback()));
  }
  // A NaN read would be written on, requantized, into a file that looks sound.
  if (!f.no_check_tensors) RETURN_IF_ERROR(CheckLoadedTensors("input", f.in, *model));
  opt.type = type;
  opt.threads = threads;
  // The tokenizer travels with the weights, so the GGUF is self-contained.
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadTokenizerIfPresent(f.in));
  if (tokenizer) {
    opt.add_metadata = [&tokenizer](GgufWriter* w) { return AddTokenizerToGguf(*tokenizer, w); };
  } else {
    PrintNote("the model has no tokenizer: none written");
  }
  RETURN_IF_ERROR(ExportGgufWithProgress(*model, f.out, Cat("converting to ", type.name), opt));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::error_code ec;
  const auto size = std::filesystem::file_size(f.out, ec);
  std::printf("wrote %s: %s (%s) as %s, %s in %.2f s\n", f.out.c_str(), model->spec.name.c_str(),
              std::string(ArchName(model->spec.arch)).c_str(), type.name.c_str(),
              ec ? "?" : FormatBytes(static_cast<double>(size)).c_str(), s);
  return absl::OkStatus();
}

Registrar kConvert{{"convert", "Convert a Hugging Face checkpoint to GGUF",
                    [](CLI::App& app) {
                      auto f = std::make_shared<ConvertFlags>();
                      app.add_option("HF_DIR", f->in,
                                     "Hugging Face directory (config.json + model.safetensors or a sharded "
                                     "set with model.safetensors.index.json); a GGUF file or synth:PRESET "
                                     "also works, to re-type a model")
                          ->required();
                      app.add_option("OUT", f->out,
                                     "Output .gguf path; written to a temporary file and renamed, so it is "
                                     "never left half-written")
                          ->required();
                      app.add_option("--type", f->type,
                                     Cat("Weight type: ", kExportTypes, ". q8_0, q6_k, q5_k_m and q4_k_m are "
                                         "llama.cpp's file types, tensor for tensor (the head in q6_k; _m: "
                                         "some attn_v and ffn_down layers in q6_k); f32..q4_0 put every "
                                         "matrix in that type. Norms and routers stay f32"))
                          ->capture_default_str();
                      app.add_option("--threads", f->threads, "Conversion threads; 0 = every hardware thread")
                          ->capture_default_str();
                      AddNoCheckTensorsFlag(app, &f->no_check_tensors);
                      return [f]() { return RunConvert(*f); };
                    }}};

}  // namespace
}  // namespace specgen::cli
