#include "engine/cli/export_progress.h"

#include <cstdio>
#include <optional>

#include "engine/core/progress.h"
#include "engine/core/str_cat.h"

namespace specgen::cli {

void PrintNote(std::string_view line) { std::fprintf(stderr, "note: %s\n", std::string(line).c_str()); }

absl::Status ExportGgufWithProgress(const LoadedModel& model, const std::string& path, const std::string& label,
                                    GgufExportOptions options) {
  ProgressBar bar(label, 0);
  std::optional<ProgressBar> writing;  // the second bar, once the file is being written
  options.note = [&](std::string_view line) { (writing ? *writing : bar).Note(Cat("note: ", line)); };
  const int64_t n_layers = model.spec.n_layers;
  options.progress = [&bar, n_layers](int64_t layer, size_t done, size_t total) {
    bar.SetTotal(total);
    bar.SetDetail(layer < 0 ? std::string("embeddings") : Cat("layer ", layer + 1, "/", n_layers));
    bar.Update(done);
  };
  // Writing a large model's file takes seconds of its own: a bar of its own, after the conversion's.
  options.write_progress = [&](size_t done, size_t total) {
    if (!writing) {
      bar.Finish();
      writing.emplace(Cat("writing ", path), total);
    }
    writing->Update(done);
  };
  return ExportGguf(model.spec, model.weights, path, options);
}

}  // namespace specgen::cli
