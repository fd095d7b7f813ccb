// One routed expert computed on the host CPU (docs/design.md §12.1): for n tokens' activations x, the
// expert's output down(silu(gate x) · up x) with the bits of the GPU's per-expert output (before the
// route weight scales it): the packed product's definition for the three products (packed_rows.h) and
// the portable silu (engine/core/portable_silu.h) between them, as kernels/routed_experts.cu computes
// them. Rows are split over a HostPool; the result does not depend on the pool's size or the ISA.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "moe/host/host_pool.h"
#include "moe/host/packed_rows.h"

namespace specgen::moe_host {

// An expert's three matrices in host memory: gate and up [ffn, hidden], down [hidden, ffn].
struct HostExpert {
  PackedMatrix gate, up, down;
  int64_t hidden() const { return gate.cols; }
  int64_t ffn() const { return gate.rows; }
};

// OK when every matrix is packed (CheckPacked) and the shapes agree; else names the matrix and shapes.
absl::Status CheckHostExpert(const HostExpert& e);

// One expert's work in RunMany: y [n, hidden] = e applied to x [n, hidden].
struct HostExpertJob {
  const HostExpert* expert = nullptr;
  const float* x = nullptr;
  int64_t n = 0;
  float* y = nullptr;
};

class HostExpertRunner {
 public:
  HostExpertRunner(HostPool& pool, Isa isa) : pool_(pool), isa_(isa) {}

  // y [n, hidden] = the expert applied to each of the n rows of x [n, hidden] (n >= 1).
  absl::Status Run(const HostExpert& e, const float* x, int64_t n, float* y);

  // Several experts (a layer's host share) in two splits of the pool, not two per expert: every job's
  // gate and up rows in one, every down row in the other. Each y has Run's bits.
  absl::Status RunMany(std::span<const HostExpertJob> jobs);

  Isa isa() const { return isa_; }

 private:
  HostPool& pool_;
  Isa isa_;
  struct PerJob {
    QuantizedTokens qx, qa;
    std::vector<float> g, u, act;
  };
  std::vector<PerJob> jobs_;
};

}  // namespace specgen::moe_host
