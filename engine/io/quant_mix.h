// The weight types `specgen convert` and `specgen synth` write, and for each tensor the dtype it is
// stored in. Plain types (f32, f16, bf16, q4_0, q4_k) put every matrix in that type. The llama.cpp
// file types (q8_0, q6_k, q5_k_m, q4_k_m) choose per tensor as llama-quantize does without an
// importance matrix (llama-quant.cpp, llama_tensor_get_type), so a file specgen writes has the mix of
// the file llama.cpp would write:
//  - the output head (and the token embedding when it doubles as the head) in Q6_K (Q8_0 stays Q8_0);
//  - q4_k_m and q5_k_m: attn_v and ffn_down (ffn_down_exps too) in Q6_K on the layers use_more_bits
//    picks: the first and last eighth of the layers and every third layer between;
//  - eight-expert models (Mixtral): attn_v and attn_k in Q8_0, and for q4_k_m attn_output in Q5_K;
//  - rows the chosen type's block does not divide: Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, and f16
//    where even that block does not divide (llama-quantize refuses such a Q8_0 file).
// The plain types store such rows in f16.
// Norms and routers stay f32 whatever the type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/io/weight_set.h"
#include "engine/model/model_spec.h"

namespace specgen {

enum class QuantMix { kPure, kQ8_0, kQ6_K, kQ5_K_M, kQ4_K_M };

struct ExportType {
  std::string name;     // as --type spells it: "q4_k_m"
  DType base;           // the type of most matrices
  QuantMix mix = QuantMix::kPure;
  int llama_ftype = -1; // general.file_type as llama.cpp numbers it (llama_ftype), -1: none fits
};

// The --type values, for help texts and errors.
inline constexpr std::string_view kExportTypes = "f32, f16, bf16, q8_0, q6_k, q5_k_m, q4_k_m, q4_k or q4_0";
// One of kExportTypes (case-insensitive), else an error listing them.
absl::StatusOr<ExportType> ParseExportType(std::string_view name);
// The plain type of a DType the quantizers can write (the llama.cpp mix where one has its name).
absl::StatusOr<ExportType> ExportTypeOf(DType dtype);

// llama.cpp's use_more_bits(i_layer, n_layers): the layers its _M mixes give more bits.
bool UseMoreBits(int64_t layer, int64_t n_layers);

struct TensorTypeChoice {
  DType dtype;
  bool fell_back = false;  // the row length forced a smaller-block type than the rule chose
  DType wanted = DType::kF32;  // what the rule chose before any fallback
};
// The dtype tensor `key` (rows of `row_len` elements) of a model `spec` is stored in under `type`.
TensorTypeChoice ChooseTensorType(const ExportType& type, const ModelSpec& spec, const WeightKey& key,
                                  int64_t row_len);

}  // namespace specgen
