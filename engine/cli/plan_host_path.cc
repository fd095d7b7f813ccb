#include "engine/cli/plan_host_path.h"

#include <cmath>
#include <cstdio>

#include "engine/core/byte_size.h"
#include "engine/core/status_macros.h"
#include "engine/core/str_cat.h"
#include "moe/host/calibration.h"
#include "moe/host/host_path.h"
#include "moe/host/streamed_decision.h"
#include "nlohmann/json.hpp"
#if defined(SPECGEN_WITH_CUDA)
#include "moe/cuda/link_rate.h"
#endif

namespace specgen::cli {
namespace {

// The packed type whose bytes an element are nearest a model's experts' (a Q4_K_M expert mixes Q4_K
// gate/up with a Q6_K down; the calibration's time is scaled by bytes, so the nearest type suffices).
absl::StatusOr<DType> ExpertType(const moe::ModelBytes& m) {
  const ModelSpec& s = m.spec;
  if (!s.is_moe() || m.largest_expert() == 0) {
    return absl::InvalidArgumentError(Cat("--calibrate -m ", m.source, ": the model has no routed experts"));
  }
  const double per_element = static_cast<double>(m.largest_expert()) / (3.0 * s.hidden * s.expert_ffn_dim);
  DType best = DType::kQ4_K;
  double gap = 1e30;
  for (DType t : {DType::kMXFP4, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0}) {
    const double b = static_cast<double>(Info(t).block_bytes) / static_cast<double>(Info(t).block_elems);
    if (std::fabs(b - per_element) < gap) gap = std::fabs(b - per_element), best = t;
  }
  if (per_element > 1.2) {
    return absl::InvalidArgumentError(Cat("--calibrate -m ", m.source, ": its experts take ", per_element,
                                          " bytes an element; the host path computes packed experts only "
                                          "(q8_0, q4_0, q4_k, q5_k, q6_k, mxfp4)"));
  }
  return best;
}

absl::StatusOr<moe_host::HostPath> Resolve(const PlanHostFlags& f) {
  ASSIGN_OR_RETURN(moe_host::HostPath p, moe_host::ResolveHostPath(f.moe_host, f.calibration));
  if (!p.note.empty()) std::fprintf(stderr, "note: %s\n", p.note.c_str());
  return p;
}

std::vector<moe_host::HostPathRow> Rows(const moe_host::HostPath& path, const moe::Plan& plan,
                                        const moe::ModelBytes& target, int shown) {
  std::vector<moe_host::PassMisses> passes;
  for (const moe::PassPrediction& x : plan.passes) {
    if (x.n <= shown) passes.push_back({x.n, x.distinct_experts, x.missed_experts});
  }
  return moe_host::HostPathRows(path, passes, target.largest_expert(), target.spec.hidden,
                                target.spec.n_experts_used, moe::kPcieBytesPerSecond);
}

// Which pass sizes a run would send through the host-routed split path (the decision PlanFor makes
// for generate and chat: moe/host/streamed_decision.h).
moe_host::StreamedHostDecision Decision(const moe_host::HostPath& path, const moe::Plan& plan,
                                        const moe::ModelBytes& target) {
  moe_host::StreamedDecisionInput in;
  for (const moe::PassPrediction& x : plan.passes) in.passes.push_back({x.n, x.distinct_experts, x.missed_experts});
  in.expert_bytes = target.largest_expert();
  in.hidden = target.spec.hidden;
  in.top_k = target.spec.n_experts_used;
  in.n_experts = target.spec.n_experts;
  in.cache_slots = plan.expert_cache_slots;
  in.default_link_bytes_per_second = moe::kPcieBytesPerSecond;
  return moe_host::DecideStreamedHostPath(path, in);
}

}  // namespace

void AddPlanHostFlags(CLI::App& app, PlanHostFlags* f) {
  app.add_flag("--calibrate", f->calibrate,
               "measure this machine for the host expert path (the host's expert throughput for 1..16 tokens, "
               "of -m's expert shape or Qwen3-30B-A3B's; the GPU link's rate where a GPU is present) and store "
               "it (--calibration); with --vram-budget the plan follows");
  app.add_option("--calibration", f->calibration,
                 "calibration FILE to write (--calibrate) or read (default: $XDG_CACHE_HOME/specgen/"
                 "calibration.json)");
  app.add_option("--moe-host", f->moe_host,
                 "where missed experts are computed: auto (the host takes a share where the calibration says "
                 "it is faster), off (all cross the link), only (all on the host); default: auto with a "
                 "calibration, else off");
  app.add_option("--host-threads", f->host_threads, "threads the calibration measures with (default: one per "
                 "physical core)");
}

absl::Status RunCalibrate(const PlanHostFlags& f, const std::string& model) {
  if (f.host_threads < 0) return absl::InvalidArgumentError(Cat("--host-threads ", f.host_threads, ": must be >= 0"));
  DType type = DType::kQ4_K;
  int64_t hidden = moe_host::kDefaultCalibrationHidden, ffn = moe_host::kDefaultCalibrationFfn;
  if (!model.empty()) {
    ASSIGN_OR_RETURN(const moe::ModelBytes m, moe::ReadModelBytes(model));
    ASSIGN_OR_RETURN(type, ExpertType(m));
    hidden = m.spec.hidden, ffn = m.spec.expert_ffn_dim;
  }
  const std::string path = f.calibration.empty() ? moe_host::DefaultCalibrationPath() : f.calibration;
  moe_host::HostPool pool({.threads = f.host_threads});
  const moe_host::Isa isa = moe_host::BestIsa();
  std::fprintf(stderr, "calibrating the host path: %s experts [%lld x %lld], %s, %d threads\n",
               std::string(Name(type)).c_str(), static_cast<long long>(hidden), static_cast<long long>(ffn),
               std::string(moe_host::IsaName(isa)).c_str(), pool.threads());
  ASSIGN_OR_RETURN(moe_host::Calibration c,
                   moe_host::MeasureHost(pool, isa, type, hidden, ffn, [](int n) {
                     std::fprintf(stderr, "\r  tokens an expert: %2d of %d", n, moe_host::kCalibratedTokens);
                     std::fflush(stderr);
                   }));
  std::fprintf(stderr, "\n");
#if defined(SPECGEN_WITH_CUDA)
  if (moe::CudaDevicePresent()) {
    std::fprintf(stderr, "  the link: pinned host-to-device copies of 256 MiB ...\n");
    ASSIGN_OR_RETURN(c.link_gbps, moe::MeasurePinnedH2DGbps());
  } else {
    std::fprintf(stderr, "  no GPU: the link's rate is not measured (the plan assumes %.0f GB/s)\n",
                 moe::kPcieBytesPerSecond / 1e9);
  }
#else
  std::fprintf(stderr, "  a CPU build: the link's rate is not measured (the plan assumes %.0f GB/s)\n",
               moe::kPcieBytesPerSecond / 1e9);
#endif
  RETURN_IF_ERROR(moe_host::WriteCalibration(c, path));
  std::printf("calibration written to %s\n", path.c_str());
  std::printf("  host: %s, %d threads; experts %s [%lld x %lld], %s each\n", c.isa.c_str(), c.threads,
              std::string(Name(c.expert_type)).c_str(), static_cast<long long>(c.hidden),
              static_cast<long long>(c.ffn), FormatBytes(static_cast<double>(c.expert_bytes)).c_str());
  std::printf("  %3s %14s %14s %12s\n", "n", "experts/s", "tokens' exp/s", "weight GB/s");
  for (int n = 1; n <= moe_host::kCalibratedTokens; ++n) {
    const double r = c.experts_per_second[n - 1];
    std::printf("  %3d %14.1f %14.1f %12.2f\n", n, r, r * n, r * static_cast<double>(c.expert_bytes) / 1e9);
  }
  if (c.link_gbps) std::printf("  link: %.2f GB/s pinned host to device\n", *c.link_gbps);
  return absl::OkStatus();
}

absl::Status PrintHostPath(const PlanHostFlags& f, const moe::Plan& plan, const moe::ModelBytes& target, int shown) {
  if (plan.expert_cache_slots < 0 || plan.total_experts == 0) return absl::OkStatus();  // nothing missed
  ASSIGN_OR_RETURN(const moe_host::HostPath path, Resolve(f));
  const auto& cal = path.calibration;
  std::printf("missed experts' path (--moe-host %s; %s)\n", std::string(moe_host::HostModeName(path.mode)).c_str(),
              cal ? Cat("calibration ", path.calibration_path, ": ", cal->isa, ", ", cal->threads, " threads",
                        cal->link_gbps ? Cat(", link ", *cal->link_gbps, " GB/s") : std::string(", link not measured"))
                        .c_str()
                  : Cat("no calibration at ", path.calibration_path, "; `specgen plan --calibrate` makes one").c_str());
  std::printf("  %3s %7s %6s %6s %12s %12s %10s %10s\n", "n", "missed", "host", "link", "host reads", "link bytes",
              "layer ms", "all link");
  for (const moe_host::HostPathRow& r : Rows(path, plan, target, shown)) {
    std::printf("  %3d %7lld %6lld %6lld %12s %12s %10.3f %10.3f\n", r.n,
                static_cast<long long>(r.split.host + r.split.link), static_cast<long long>(r.split.host),
                static_cast<long long>(r.split.link), FormatBytes(static_cast<double>(r.host_weight_bytes)).c_str(),
                FormatBytes(static_cast<double>(r.split.link_bytes)).c_str(), 1e3 * r.split.seconds(),
                1e3 * r.all_link_seconds);
  }
  std::printf("  (a MoE layer of a pass of n tokens: its missed experts computed on the host, reading their weights "
              "in host RAM, or fetched over the link; link bytes count the host experts' activations both ways)\n");
  std::printf("  the run: %s\n", Decision(path, plan, target).note.c_str());
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> HostPathJson(const PlanHostFlags& f, const moe::Plan& plan,
                                            const moe::ModelBytes& target, int shown) {
  ASSIGN_OR_RETURN(const moe_host::HostPath path, Resolve(f));
  nlohmann::json j = {{"mode", moe_host::HostModeName(path.mode)},
                      {"calibration", path.calibration ? nlohmann::json(path.calibration_path) : nlohmann::json(nullptr)}};
  nlohmann::json rows = nlohmann::json::array();
  if (plan.expert_cache_slots >= 0 && plan.total_experts > 0) {
    for (const moe_host::HostPathRow& r : Rows(path, plan, target, shown)) {
      rows.push_back({{"n", r.n}, {"tokens_per_expert", r.tokens_per_expert}, {"host_experts", r.split.host},
                      {"link_experts", r.split.link}, {"host_weight_bytes", r.host_weight_bytes},
                      {"link_bytes", r.split.link_bytes}, {"layer_seconds", r.split.seconds()},
                      {"all_link_seconds", r.all_link_seconds}});
    }
  }
  j["passes"] = rows;
  if (plan.expert_cache_slots >= 0 && plan.total_experts > 0) {
    const moe_host::StreamedHostDecision d = Decision(path, plan, target);
    nlohmann::json takes = nlohmann::json::array();
    for (int n = 1; n <= moe_host::kCalibratedTokens; ++n) {
      if (d.takes[n - 1]) takes.push_back(n);
    }
    j["split_path_passes"] = takes;
    j["split_path_note"] = d.note;
  }
  return j;
}

}  // namespace specgen::cli
