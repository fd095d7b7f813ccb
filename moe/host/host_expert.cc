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
  const HostExpertJob job{&e, x, n, y};
  return RunMany({&job, 1});
}

absl::Status HostExpertRunner::RunMany(std::span<const HostExpertJob> jobs) {
  if (jobs_.size() < jobs.size()) jobs_.resize(jobs.size());
  // Row offsets of each job in the two splits: gate then up rows; down rows.
  std::vector<int64_t> gu_first(jobs.size() + 1, 0), down_first(jobs.size() + 1, 0);
  size_t scratch = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const HostExpertJob& job = jobs[j];
    if (job.expert == nullptr || job.x == nullptr || job.y == nullptr) {
      return absl::InvalidArgumentError(Cat("host expert job ", j, ": no expert, input or output"));
    }
    RETURN_IF_ERROR(CheckHostExpert(*job.expert));
    if (job.n < 1) return absl::InvalidArgumentError(Cat("host expert job ", j, ": ", job.n, " tokens (at least 1)"));
    const int64_t hidden = job.expert->hidden(), ffn = job.expert->ffn();
    PerJob& p = jobs_[j];
    p.qx.Quantize(job.x, job.n, hidden);
    p.g.resize(static_cast<size_t>(job.n * ffn));
    p.u.resize(static_cast<size_t>(job.n * ffn));
    gu_first[j + 1] = gu_first[j] + 2 * ffn;
    down_first[j + 1] = down_first[j] + hidden;
    scratch = std::max({scratch, RowsScratchBytes(hidden), RowsScratchBytes(ffn)});
  }
  // Job j's rows [gu_first[j], gu_first[j + 1]): its gate's, then its up's; a chunk may span jobs.
  pool_.ParallelFor(gu_first.back(), [&](int64_t b, int64_t end, int thread) {
    uint8_t* s = pool_.Scratch(thread, scratch);
    for (size_t j = 0; j < jobs.size(); ++j) {
      const int64_t lo = std::max(b, gu_first[j]) - gu_first[j], hi = std::min(end, gu_first[j + 1]) - gu_first[j];
      if (lo >= hi) continue;
      const HostExpert& e = *jobs[j].expert;
      PerJob& p = jobs_[j];
      const int64_t ffn = e.ffn();
      if (lo < ffn) PackedRows(isa_, e.gate, lo, std::min(hi, ffn), p.qx, p.g.data(), ffn, s);
      if (hi > ffn) PackedRows(isa_, e.up, std::max(lo, ffn) - ffn, hi - ffn, p.qx, p.u.data(), ffn, s);
    }
  });
  for (size_t j = 0; j < jobs.size(); ++j) {
    PerJob& p = jobs_[j];
    p.act.resize(p.g.size());
    for (size_t i = 0; i < p.act.size(); ++i) p.act[i] = portable::SiluMul(p.g[i], p.u[i]);
    p.qa.Quantize(p.act.data(), jobs[j].n, jobs[j].expert->ffn());
  }
  pool_.ParallelFor(down_first.back(), [&](int64_t b, int64_t end, int thread) {
    uint8_t* s = pool_.Scratch(thread, scratch);
    for (size_t j = 0; j < jobs.size(); ++j) {
      const int64_t lo = std::max(b, down_first[j]) - down_first[j], hi = std::min(end, down_first[j + 1]) - down_first[j];
      if (lo >= hi) continue;
      const HostExpert& e = *jobs[j].expert;
      PackedRows(isa_, e.down, lo, hi, jobs_[j].qa, jobs[j].y, e.hidden(), s);
    }
  });
  return absl::OkStatus();
}

}  // namespace specgen::moe_host
