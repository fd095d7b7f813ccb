#include "moe/host/packed_rows.h"

#include "engine/core/packed_product.h"
#include "engine/core/str_cat.h"
#include "moe/host/rows_job.h"

namespace specgen::moe_host {

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Vnni: return "avx512vnni";
  }
  return "?";
}

absl::StatusOr<Isa> ParseIsa(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    if (IsaName(isa) == name) return isa;
  }
  return absl::InvalidArgumentError(Cat("unknown ISA '", name, "' (scalar, avx2, avx512, avx512vnni)"));
}

bool IsaSupported(Isa isa) {
  if (isa == Isa::kScalar) return true;
#if defined(SPECGEN_HOST_X86)
  // __builtin_cpu_supports also checks that the OS saves the registers (XCR0).
  const bool avx2 = __builtin_cpu_supports("avx2");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl");
  switch (isa) {
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512: return avx512;
    case Isa::kAvx512Vnni: return avx512 && __builtin_cpu_supports("avx512vnni");
    default: return false;
  }
#else
  return false;
#endif
}

std::vector<Isa> SupportedIsas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni}) {
    if (IsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

Isa BestIsa() {
  static const Isa best = SupportedIsas().back();
  return best;
}

void QuantizedTokens::Quantize(const float* x, int64_t n_tokens, int64_t k_elements) {
  n = n_tokens, k = k_elements;
  const int64_t nb = k / packed_product::kBlock;
  q.resize(static_cast<size_t>(n * k));
  d.resize(static_cast<size_t>(n * nb));
  sum.resize(static_cast<size_t>(n * nb));
  for (int64_t t = 0; t < n; ++t) {
    packed_product::QuantizeActivations(x + t * k, k, q.data() + t * k, d.data() + t * nb, sum.data() + t * nb);
  }
}

absl::Status CheckPacked(const PackedMatrix& w, std::string_view what) {
  if (!packed_product::Covers(w.type)) {
    return absl::InvalidArgumentError(Cat(what, ": type ", Name(w.type), " is not one the packed product covers ",
                                          "(q8_0, q4_0, q4_k, q5_k, q6_k, mxfp4)"));
  }
  const int64_t block = Info(w.type).block_elems;
  if (w.rows <= 0 || w.cols <= 0 || w.cols % block != 0) {
    return absl::InvalidArgumentError(Cat(what, ": shape [", w.rows, ", ", w.cols, "] is not whole ", Name(w.type),
                                          " blocks of ", block));
  }
  if (w.data == nullptr) return absl::InvalidArgumentError(Cat(what, ": no data"));
  return absl::OkStatus();
}

size_t PackedRowBytes(const PackedMatrix& w) {
  const DTypeInfo& info = Info(w.type);
  return static_cast<size_t>(w.cols / info.block_elems) * info.block_bytes;
}

size_t RowsScratchBytes(int64_t k) { return KernelScratchBytes(k); }

void PackedRows(Isa isa, const PackedMatrix& w, int64_t r0, int64_t r1, const QuantizedTokens& x, float* y,
                int64_t y_stride, uint8_t* scratch) {
  const size_t row_bytes = PackedRowBytes(w);
  if (isa == Isa::kScalar) {
    const int64_t nb = x.k / packed_product::kBlock;
    packed_product::UnpackedRow row;
    for (int64_t r = r0; r < r1; ++r) {
      row.Unpack(w.type, w.data + static_cast<size_t>(r) * row_bytes, w.cols);
      for (int64_t t = 0; t < x.n; ++t) {
        y[t * y_stride + r] = row.Product(x.q.data() + t * x.k, x.d.data() + t * nb, x.sum.data() + t * nb);
      }
    }
    return;
  }
  RowsJob job;
  job.type = static_cast<uint32_t>(w.type);
  job.w = w.data, job.row_bytes = row_bytes, job.k = w.cols, job.r0 = r0, job.r1 = r1;
  job.n = x.n, job.q = x.q.data(), job.d = x.d.data(), job.sum = x.sum.data();
  job.y = y, job.y_stride = y_stride, job.scratch = scratch;
#if defined(SPECGEN_HOST_X86)
  switch (isa) {
    case Isa::kAvx2: return PackedRowsAvx2(job);
    case Isa::kAvx512: return PackedRowsAvx512(job);
    case Isa::kAvx512Vnni: return PackedRowsAvx512Vnni(job);
    default: return;
  }
#endif
}

}  // namespace specgen::moe_host
