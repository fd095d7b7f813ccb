// Writes a model (ModelSpec + WeightSet, from any source) as a GGUF v3 file that our reader and
// llama.cpp load: metadata keys of formats.md §1.4, tensor names of §1.5, experts stacked as
// [D, F, E]-ne tensors. Weights are converted to a chosen type (quant_mix.h: one dtype, or a
// llama.cpp mix such as q4_k_m); norms and routers stay f32. Llama/Mixtral weights in rotate-half order
// (Hugging Face, synthetic) get their Q/K rows permuted into llama.cpp's interleaved order.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/core/dtype.h"
#include "engine/io/gguf.h"
#include "engine/io/quant_mix.h"
#include "engine/io/weight_set.h"
#include "engine/model/model_spec.h"

namespace specgen {

struct GgufExportOptions {
  DType dtype = DType::kF32;  // one type for every matrix (ExportTypeOf), unless `type` is set
  std::optional<ExportType> type;  // a --type (ParseExportType), e.g. the q4_k_m mix
  // Extra metadata written after ours (e.g. tokenizer.ggml.* from the tokenizer module).
  std::vector<std::pair<std::string, GgufValue>> extra_metadata;
  // Called with the writer after the metadata above, before tensors: lets a module that io/ does not
  // depend on (the tokenizer) write its keys. May be empty.
  std::function<absl::Status(GgufWriter*)> add_metadata;
  // Receives one line per noteworthy decision (f16 fallbacks, LlamaCppDifferences); may be empty.
  std::function<void(std::string_view)> note;
  int threads = 0;  // <= 0: every hardware thread
  // Called as tensors are converted: the layer (-1 for the global tensors, which come first), and
  // output bytes done of the total, which only grows. Within a large tensor too (block by block of
  // rows, each time another 1/500 of the total is done) and at every tensor's end; calls are
  // serialized but may come from the conversion's threads. May be empty.
  std::function<void(int64_t layer, size_t done, size_t total)> progress;
  // Called as the converted tensors are written to the file (GgufWriter::Write's progress: bytes
  // written of their total, every 64 MiB and every tensor). May be empty.
  std::function<void(size_t done, size_t total)> write_progress;
  // How the file is written (safe_write.h): the run's inputs, which it must not replace.
  SafeWriteOptions output;
};


// Writes through a SafeFileWriter: no partial file on error, no input or non-regular file replaced.
absl::Status ExportGguf(const ModelSpec& spec, const WeightSet& weights, const std::string& path,
                        const GgufExportOptions& options);

// What llama.cpp would compute differently from specgen on the file a spec is written as, one line
// each (empty: nothing): MoE files with dense layers (llama.cpp's MoE architectures need a router in
// every layer) and qwen3moe without renormalized top-k weights (llama.cpp always renormalizes).
// ExportGguf passes each line to options.note.
std::vector<std::string> LlamaCppDifferences(const ModelSpec& spec);

// The GGUF `general.architecture` a spec is written as ("llama" for Mixtral).
std::string_view GgufArchName(Arch arch);

// Row r of a [n_head * head_dim, in] Q or K matrix in llama.cpp's interleaved order comes from row
// InterleavedSourceRow(r, head_dim) of the rotate-half matrix (convert_hf_to_gguf.py `permute`).
int64_t InterleavedSourceRow(int64_t r, int64_t head_dim);

}  // namespace specgen
