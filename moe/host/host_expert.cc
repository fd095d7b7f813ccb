#include "moe/host/host_expert.h"

#include <algorithm>

#include "engine/core/portable_silu.h"
#include "engine/core/str_cat.h"
#include "engine/core/status_macros.h"

// Compiled with -ffp-contract=off (moe/host/CMakeLists.txt): silu's products round on their own.

namespace specgen::moe_host {

absl::Status CheckHostExpert(const HostExpert& e) {
  RETURN_IF_ERROR(CheckPacked(e.gate, "expert gate"));
  RETURN_IF_ERROR(CheckPacked(e.up, "expert up"));
  RETURN_IF_ERROR(CheckPacked(e.down, "expert down"));
  if (e.up.rows != e.gate.rows || e.up.cols != e.gate.cols || e.down.rows != e.gate.cols ||
      e.down.cols != e.gate.rows) {
    return absl::InvalidArgumentError(Cat("expert shapes: gate [", e.gate.rows, ", ", e.gate.cols, "], up [",
                                          e.up.rows, ", ", e.up.cols, "], down [", e.down.rows, ", ", e.down.cols,
                                          "] (gate and up [ffn, hidden], down [hidden, ffn])"));
  }
  return absl::OkStatus();
}

absl::Status HostExpertRunner::Run(const HostExpert& e, const float* x, int64_t n, float* y) {
  RETURN_IF_ERROR(CheckHostExpert(e));
  if (n < 1) return absl::InvalidArgumentError(Cat("host expert: ", n, " tokens (at least 1)"));
  const int64_t hidden = e.hidden(), ffn = e.ffn();
  qx_.Quantize(x, n, hidden);
  g_.resize(static_cast<size_t>(n * ffn));
  u_.resize(static_cast<size_t>(n * ffn));
  const size_t scratch_in = RowsScratchBytes(hidden), scratch_ffn = RowsScratchBytes(ffn);
  // Gate and up in one split: rows [0, ffn) are the gate's, [ffn, 2 ffn) the up's.
  pool_.ParallelFor(2 * ffn, [&](int64_t b, int64_t end, int thread) {
    uint8_t* scratch = pool_.Scratch(thread, std::max(scratch_in, scratch_ffn));
    if (b < ffn) PackedRows(isa_, e.gate, b, std::min(end, ffn), qx_, g_.data(), ffn, scratch);
    if (end > ffn) PackedRows(isa_, e.up, std::max(b, ffn) - ffn, end - ffn, qx_, u_.data(), ffn, scratch);
  });
  act_.resize(g_.size());
  for (size_t i = 0; i < act_.size(); ++i) act_[i] = portable::SiluMul(g_[i], u_[i]);
  qa_.Quantize(act_.data(), n, ffn);
  pool_.ParallelFor(hidden, [&](int64_t b, int64_t end, int thread) {
    PackedRows(isa_, e.down, b, end, qa_, y, hidden, pool_.Scratch(thread, std::max(scratch_in, scratch_ffn)));
  });
  return absl::OkStatus();
}

}  // namespace specgen::moe_host
