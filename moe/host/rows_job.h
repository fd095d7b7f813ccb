// The one call the ISA-specific kernels of packed_rows.h take: plain data only, so that the files
// compiled with -mavx2 / -mavx512* share no inline function with the rest of the program (a shared
// inline function emitted by such a file could be picked by the linker for a CPU without the ISA).
#pragma once

#include <cstddef>
#include <cstdint>

namespace specgen::moe_host {

struct RowsJob {
  uint32_t type = 0;                // the ggml type id (Q4_0 2, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, MXFP4 39)
  const uint8_t* w = nullptr;       // row r at w + r · row_bytes
  size_t row_bytes = 0;
  int64_t k = 0;                    // elements of a row (a multiple of 256 for the K types, 32 else)
  int64_t r0 = 0, r1 = 0;           // rows [r0, r1) are computed
  int64_t n = 0;                    // tokens
  const int8_t* q = nullptr;        // [n, k] quantized activations (packed_product::QuantizeActivations)
  const float* d = nullptr;         // [n, k / 32] their scales
  const int32_t* sum = nullptr;     // [n, k / 32] their code sums
  float* y = nullptr;               // y[t · y_stride + r]
  int64_t y_stride = 0;
  uint8_t* scratch = nullptr;       // KernelScratchBytes(k) bytes, 64-byte aligned, one thread's own
};

// Scratch one thread needs for rows of k elements.
constexpr size_t KernelScratchBytes(int64_t k) {
  // codes k bytes, then 8 arrays of nb 4-byte values (d, dmin, s0, s1, m, lo, hi, c), each rounded to
  // 64 bytes, plus a 64-byte slack for the vector tails.
  return static_cast<size_t>(k) + 8 * ((static_cast<size_t>(k / 32) * 4 + 63) / 64 * 64) + 128;
}

// One per ISA file (packed_rows_avx2.cc, packed_rows_avx512.cc, packed_rows_vnni.cc).
void PackedRowsAvx2(const RowsJob& job);
void PackedRowsAvx512(const RowsJob& job);
void PackedRowsAvx512Vnni(const RowsJob& job);

}  // namespace specgen::moe_host
