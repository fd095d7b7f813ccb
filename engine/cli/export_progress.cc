#include "engine/cli/export_progress.h"

#include <cstdio>

#include "engine/core/progress.h"
#include "engine/core/str_cat.h"

namespace specgen::cli {

void PrintNote(std::string_view line) { std::fprintf(stderr, "note: %s\n", std::string(line).c_str()); }

absl::Status ExportGgufWithProgress(const LoadedModel& model, const std::string& path, const std::string& label,
                                    GgufExportOptions options) {
  ProgressBar bar(label, 0);
  options.note = [&bar](std::string_view line) { bar.Note(Cat("note: ", line)); };
  const int64_t n_layers = model.spec.n_layers;
  options.progress = [&bar, n_layers](int64_t layer, size_t done, size_t total) {
    bar.SetTotal(total);
    bar.SetDetail(layer < 0 ? std::string("embeddings") : Cat("layer ", layer + 1, "/", n_layers));
    bar.Update(done);
  };
  return ExportGguf(model.spec, model.weights, path, options);
}

}  // namespace specgen::cli
