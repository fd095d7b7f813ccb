// The host CPU's packed product (docs/design.md §6.11 and §12.1): rows of a matrix kept in a GGUF block
// type times n tokens' activations, to the bits of the one definition (engine/core/packed_product.h),
// with AVX2, AVX-512 or AVX-512 VNNI where the CPU has it (chosen at run time) and the definition itself
// as the fallback. Which ISA, and which rows a call takes, never changes a bit of a row's result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/dtype.h"

namespace specgen::moe_host {

enum class Isa { kScalar, kAvx2, kAvx512, kAvx512Vnni };

std::string_view IsaName(Isa isa);                 // "scalar", "avx2", "avx512", "avx512vnni"
absl::StatusOr<Isa> ParseIsa(std::string_view name);
bool IsaSupported(Isa isa);                        // this CPU (and this build) runs it
std::vector<Isa> SupportedIsas();                  // scalar first, then each supported, ascending
Isa BestIsa();                                     // the last of SupportedIsas()

// Step 1 of the definition for n tokens of k elements (k a multiple of 32).
struct QuantizedTokens {
  int64_t n = 0, k = 0;
  std::vector<int8_t> q;     // [n, k]
  std::vector<float> d;      // [n, k / 32]
  std::vector<int32_t> sum;  // [n, k / 32]
  void Quantize(const float* x, int64_t n_tokens, int64_t k_elements);
};

// A row-major packed matrix [rows, cols] in host memory.
struct PackedMatrix {
  DType type = DType::kQ8_0;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
};

// OK when packed_product::Covers(type), cols is whole blocks and data is set; else names what is wrong.
absl::Status CheckPacked(const PackedMatrix& w, std::string_view what);
size_t PackedRowBytes(const PackedMatrix& w);

// Scratch a thread needs for rows of k elements (64-byte aligned storage of this many bytes).
size_t RowsScratchBytes(int64_t k);

// y[t · y_stride + r] = row r of w times token t of x, for r in [r0, r1) and every token of x. w is
// checked (CheckPacked) by the caller; x.k == w.cols. scratch: RowsScratchBytes(w.cols), this thread's.
void PackedRows(Isa isa, const PackedMatrix& w, int64_t r0, int64_t r1, const QuantizedTokens& x, float* y,
                int64_t y_stride, uint8_t* scratch);

}  // namespace specgen::moe_host
