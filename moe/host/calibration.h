// What `specgen plan --calibrate` measures of this machine for the host expert path (docs/design.md
// §12.1), kept in a versioned JSON file: the host's expert throughput for n = 1..16 tokens an expert
// (one expert shape and type), and where a GPU was present the link's pinned host-to-device rate.
// The split (host_split.h) reads it; a file that is not exactly this shape is refused, naming the field.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "moe/host/host_pool.h"
#include "moe/host/packed_rows.h"

namespace specgen::moe_host {

inline constexpr int kCalibrationVersion = 1;
inline constexpr int kCalibratedTokens = 16;  // n = 1..16: a verification pass's positions

struct Calibration {
  std::string isa;              // the kernels measured (IsaName)
  int threads = 0;              // the pool's workers
  DType expert_type = DType::kQ4_K;
  int64_t hidden = 0, ffn = 0;  // the expert shape measured
  size_t expert_bytes = 0;      // its gate + up + down bytes
  // experts_per_second[n - 1]: experts a second the host completes, each applied to n tokens.
  std::array<double, kCalibratedTokens> experts_per_second{};
  // Pinned host-to-device GB/s (1e9 bytes a second), when measured on a GPU.
  std::optional<double> link_gbps;

  // Seconds for `experts` experts of `bytes` each at n tokens (scaled from the measured shape by bytes:
  // the products stream their weights once, so time follows bytes).
  double HostSeconds(int64_t experts, size_t bytes, int n) const;
};

// The default shape when no model is given: Qwen3-30B-A3B's experts (hidden 2048, ffn 768) in Q4_K.
inline constexpr int64_t kDefaultCalibrationHidden = 2048;
inline constexpr int64_t kDefaultCalibrationFfn = 768;

// $XDG_CACHE_HOME/specgen/calibration.json, else $HOME/.cache/specgen/calibration.json.
std::string DefaultCalibrationPath();

std::string CalibrationJson(const Calibration& c);
// `source` names the text in errors (the file's path).
absl::StatusOr<Calibration> ParseCalibration(std::string_view text, std::string_view source);
// Written whole or not at all (a temporary file renamed), its folders created.
absl::Status WriteCalibration(const Calibration& c, const std::string& path);
absl::StatusOr<Calibration> ReadCalibration(const std::string& path);

// Times the host path on `pool` with `isa` for an expert of `type` [hidden, ffn] (random weights, a few
// distinct experts in turn so that they come from memory, not cache), n = 1..16, each for at least 3 runs
// and min_seconds; progress(n) after each.
absl::StatusOr<Calibration> MeasureHost(HostPool& pool, Isa isa, DType type, int64_t hidden, int64_t ffn,
                                        const std::function<void(int n)>& progress, double min_seconds = 0.1);

}  // namespace specgen::moe_host
