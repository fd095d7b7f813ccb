// Writing a GGUF from the CLI (convert, synth): ExportGguf with a progress line on stderr and the
// export's notes printed so that they do not garble it.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "engine/io/gguf_export.h"
#include "engine/io/weight_set.h"

namespace specgen::cli {

// One "note: LINE" on stderr.
void PrintNote(std::string_view line);

// ExportGguf of `model` to `path` under a progress bar labelled `label` (the layer and an ETA; drawn
// only for work over a second), then one for writing the file, with `options`' note, progress and
// write_progress set to go through them.
absl::Status ExportGgufWithProgress(const LoadedModel& model, const std::string& path, const std::string& label,
                                    GgufExportOptions options);

}  // namespace specgen::cli
