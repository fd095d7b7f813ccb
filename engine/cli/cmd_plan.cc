// `specgen plan -m TARGET [-md DRAFT] --vram-budget SIZE [-c N] [--draft-max K] [--cache-type T]
// [--json]`: the offload plan (moe/planner.h) of a target and its draft under a VRAM budget,
// computed from the models' headers alone (synth presets from their shapes): what is resident and what
// streams, the expert-cache slots, and the predicted bytes and floor time of a verification pass of
// n = 1..16 positions under uniform routing. Nothing is loaded or allocated.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "engine/cli/command.h"
#include "engine/cli/resource_check.h"
#include "engine/core/byte_size.h"
#include "engine/core/status_macros.h"
#include "moe/planner.h"
#include "nlohmann/json.hpp"

namespace specgen::cli {
namespace {

using moe::Plan;
using moe::ResidentKind;

struct PlanFlags {
  std::string model;
  std::string draft;
  std::string vram_budget;
  std::string host_ram;
  int64_t context = 0;
  int draft_max = 4;
  std::string cache_type = "f16";
  bool json = false;
};

absl::StatusOr<int> KvElementBytes(const std::string& cache_type) {
  if (cache_type == "f16" || cache_type == "bf16") return 2;
  if (cache_type == "f32") return 4;
  return InvalidArgument("--cache-type must be f16, bf16 or f32, got '", cache_type, "'");
}

std::string Bytes(double b) { return FormatBytes(b); }

nlohmann::json PlanJson(const Plan& p, const PlanFlags& f) {
  nlohmann::json resident = nlohmann::json::object();
  for (int k = 0; k < moe::kResidentKinds; ++k) {
    resident[std::string(moe::ResidentKindName(static_cast<ResidentKind>(k)))] = p.resident_bytes[k];
  }
  nlohmann::json passes = nlohmann::json::array();
  for (const moe::PassPrediction& x : p.passes) {
    passes.push_back({{"n", x.n},
                      {"distinct_experts_per_layer", x.distinct_experts},
                      {"missed_experts_per_layer", x.missed_experts},
                      {"streamed_bytes", x.streamed_bytes},
                      {"hbm_bytes", x.hbm_bytes},
                      {"pcie_seconds", x.pcie_seconds},
                      {"hbm_seconds", x.hbm_seconds},
                      {"floor_seconds", x.floor_seconds}});
  }
  return {{"target", f.model},
          {"draft", f.draft.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.draft)},
          {"vram_budget", p.vram_budget},
          {"minimum_budget", p.minimum_budget},
          {"context", p.context},
          {"draft_max", f.draft.empty() ? 0 : f.draft_max},
          {"cache_type", f.cache_type},
          {"resident", resident},
          {"resident_total", p.resident_total},
          {"streamed", {{"experts", p.streamed_experts}, {"dense", p.streamed_dense},
                        {"dense_layers", p.streamed_dense_layers}, {"dense_ring_layers", p.dense_ring_layers}}},
          {"host_bytes", p.host_bytes},
          {"expert_cache_slots", p.expert_cache_slots},
          {"prefill_chunk", p.prefill_chunk},
          {"total_experts", p.total_experts},
          {"slot_bytes", p.slot_bytes},
          {"slot_share", p.slot_share},
          {"passes", passes}};
}

void PrintText(const Plan& p, const PlanFlags& f) {
  std::printf("plan for %s%s\n", f.model.c_str(), f.draft.empty() ? "" : (" drafted by " + f.draft).c_str());
  std::printf("  VRAM budget %s (minimum %s), context %lld, draft length bound %d, KV cache %s\n",
              Bytes(double(p.vram_budget)).c_str(), Bytes(double(p.minimum_budget)).c_str(),
              static_cast<long long>(p.context), f.draft.empty() ? 0 : f.draft_max, f.cache_type.c_str());
  std::printf("resident in VRAM\n");
  for (int k = 0; k < moe::kResidentKinds; ++k) {
    if (p.resident_bytes[k] == 0) continue;
    std::printf("  %-16s %12s\n", std::string(moe::ResidentKindName(static_cast<ResidentKind>(k))).c_str(),
                Bytes(double(p.resident_bytes[k])).c_str());
  }
  std::printf("  %-16s %12s\n", "total", Bytes(double(p.resident_total)).c_str());
  std::printf("streamed from pinned host RAM\n");
  if (p.host_bytes == 0) {
    std::printf("  nothing: every weight is resident\n");
  } else {
    if (p.streamed_experts > 0) std::printf("  %-16s %12s\n", "experts", Bytes(double(p.streamed_experts)).c_str());
    if (p.streamed_dense > 0) {
      std::string layers;
      for (int l : p.streamed_dense_layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
      std::printf("  %-16s %12s (layers %s, through a ring of %d layer buffers)\n", "dense layers",
                  Bytes(double(p.streamed_dense)).c_str(), layers.c_str(), p.dense_ring_layers);
    }
    std::printf("  %-16s %12s\n", "host RAM", Bytes(double(p.host_bytes)).c_str());
  }
  if (p.total_experts > 0) {
    if (p.expert_cache_slots < 0) {
      std::printf("expert cache: every one of the %lld experts resident (expert_cache_slots -1)\n",
                  static_cast<long long>(p.total_experts));
    } else {
      std::printf("expert cache: %lld slots of %s for %lld experts (%.1f%%); prompts fed in chunks of %lld\n",
                  static_cast<long long>(p.expert_cache_slots), Bytes(double(p.slot_bytes)).c_str(),
                  static_cast<long long>(p.total_experts), 100.0 * p.slot_share,
                  static_cast<long long>(p.prefill_chunk));
    }
  }
  std::printf("verification pass of n positions, uniform routing (floor = streamed / %.0f GB/s + VRAM read / "
              "%.1f TB/s)\n", moe::kPcieBytesPerSecond / 1e9, moe::kHbmBytesPerSecond / 1e12);
  std::printf("  %3s %9s %9s %12s %12s %10s\n", "n", "distinct", "missed", "streamed", "VRAM read", "floor ms");
  for (const moe::PassPrediction& x : p.passes) {
    std::printf("  %3d %9.2f %9.2f %12s %12s %10.3f\n", x.n, x.distinct_experts, x.missed_experts,
                Bytes(x.streamed_bytes).c_str(), Bytes(x.hbm_bytes).c_str(), 1e3 * x.floor_seconds);
  }
  if (p.total_experts > 0) std::printf("  (distinct and missed: experts per MoE layer)\n");
}

// "synth:PRESET" with no ":TYPE": ModelBytes assumes f32 weights for it.
bool UntypedSynth(const std::string& path) {
  return path.rfind("synth:", 0) == 0 && path.find(':', 6) == std::string::npos;
}

// The sizes the plan derives from -c, in doubles, before the planner computes them in 64-bit
// integers: a context that would overflow them (-c near 2^62) is refused here with its number, and
// a context past the target's trained length is warned of, as generate warns.
absl::Status CheckPlanSizes(const PlanFlags& f, const moe::ModelBytes& target,
                            const moe::ModelBytes* draft, int kv_element_bytes) {
  const int64_t context = f.context > 0 ? f.context : std::min<int64_t>(target.spec.context_length, 4096);
  auto kv = [&](const ModelSpec& s) {
    // K and V of every layer, and the attention scores of a pass (heads x 16 rows x context floats).
    return 2.0 * static_cast<double>(s.n_layers) * static_cast<double>(context) * static_cast<double>(s.kv_dim()) *
               kv_element_bytes +
           16.0 * static_cast<double>(s.n_heads) * static_cast<double>(context) * sizeof(float);
  };
  const double bytes = kv(target.spec) + (draft != nullptr ? kv(draft->spec) : 0.0);
  // 2^60 B (1 EiB): far above any budget, and far enough below 2^64 that sums of it cannot wrap.
  constexpr double kMostBytes = 1152921504606846976.0;
  if (!(bytes < kMostBytes)) {
    return InvalidArgument("-c ", f.context, ": the KV caches at this context would need ", FormatBytes(bytes),
                           ", more than any budget can hold (the target was trained on ",
                           target.spec.context_length, " positions)");
  }
  if (f.context > target.spec.context_length) {
    std::fprintf(stderr,
                 "warning: -c %lld exceeds the context length the model was trained on (%lld); "
                 "positions past it may give degraded output\n",
                 static_cast<long long>(f.context), static_cast<long long>(target.spec.context_length));
  }
  return absl::OkStatus();
}

absl::Status RunPlan(const PlanFlags& f) {
  if (f.model.empty()) return InvalidArgument("-m: a target model is required");
  ASSIGN_OR_RETURN(const size_t budget, ParseByteSize(f.vram_budget));
  if (budget == 0) return InvalidArgument("--vram-budget ", f.vram_budget, ": must be more than 0 bytes");
  ASSIGN_OR_RETURN(const int kv_bytes, KvElementBytes(f.cache_type));
  if (f.draft_max < 0 || f.draft_max > moe::kMaxPredictedPositions - 1) {
    return InvalidArgument("--draft-max ", f.draft_max, ": must be in [0, ", moe::kMaxPredictedPositions - 1,
                           "]");
  }
  if (f.context < 0) return InvalidArgument("-c ", f.context, ": the context must be >= 1 (0 = the default)");
  moe::PlanOptions o;
  o.vram_budget = budget;
  o.context = f.context;
  o.kv_element_bytes = kv_bytes;
  // Without a draft every pass is one position: plain decoding.
  o.draft_max = f.draft.empty() ? 0 : f.draft_max;
  if (!f.host_ram.empty()) {
    ASSIGN_OR_RETURN(const size_t host, ParseByteSize(f.host_ram));
    o.host_available = static_cast<double>(host);
    if (host == 0) return InvalidArgument("--host-ram ", f.host_ram, ": must be more than 0 bytes");
  } else {
    o.host_available = HostMemoryAvailable();
  }
  ASSIGN_OR_RETURN(const moe::ModelBytes target, moe::ReadModelBytes(f.model));
  std::unique_ptr<moe::ModelBytes> draft;
  if (!f.draft.empty()) {
    ASSIGN_OR_RETURN(moe::ModelBytes d, moe::ReadModelBytes(f.draft));
    if (d.spec.vocab_size != target.spec.vocab_size) {
      return InvalidArgument("-md ", f.draft, " cannot draft for -m ", f.model, ": vocabulary sizes differ (",
                             d.spec.vocab_size, " and ", target.spec.vocab_size, ")");
    }
    draft = std::make_unique<moe::ModelBytes>(std::move(d));
  }
  RETURN_IF_ERROR(CheckPlanSizes(f, target, draft.get(), kv_bytes));
  // A synth preset without a type is planned as f32 weights, which a quantized run would not use.
  const std::string untyped = UntypedSynth(f.model) ? f.model : UntypedSynth(f.draft) ? f.draft : "";
  if (!untyped.empty()) {
    std::fprintf(stderr, "note: %s names no weight type: planned as f32 weights (%s:q4_k_m, :q8_0 or :bf16 "
                 "plans a quantized one)\n", untyped.c_str(), untyped.c_str());
  }
  absl::StatusOr<Plan> made = moe::MakePlan(target, draft.get(), o);
  // The planner's host RAM error names this machine's MemAvailable: --host-ram plans for another.
  if (!made.ok() && made.status().code() == absl::StatusCode::kResourceExhausted &&
      absl::StrContains(made.status().message(), "host RAM")) {
    return absl::ResourceExhaustedError(
        Cat(made.status().message(), f.host_ram.empty() ? "; --host-ram SIZE plans for a machine with more" : "",
            untyped.empty() ? "" : Cat("; ", untyped, " was planned as f32 weights: a quantized type needs less")));
  }
  ASSIGN_OR_RETURN(const Plan plan, std::move(made));
  if (f.json) {
    std::printf("%s\n", PlanJson(plan, f).dump().c_str());
  } else {
    PrintText(plan, f);
  }
  return absl::OkStatus();
}

Registrar kPlan{{"plan", "Show what a VRAM budget holds of a target and its draft, and what streams",
                 [](CLI::App& app) {
                   auto f = std::make_shared<PlanFlags>();
                   app.add_option("-m,--model", f->model,
                                  "target MODEL: GGUF file, HF directory or synth:PRESET[:TYPE] (read from "
                                  "headers or the preset's shape; no weight is read)")
                       ->required();
                   app.add_option("--model-draft", f->draft,
                                  "draft MODEL (also -md): placed whole in VRAM first, with its KV cache");
                   app.add_option("--vram-budget", f->vram_budget,
                                  "GPU memory the plan may use, e.g. 8GiB or 512MiB: weights, KV caches, "
                                  "expert-cache slots and workspaces (the CUDA context and graphs come on top)")
                       ->required();
                   app.add_option("-c,--ctx-size", f->context,
                                  "positions both KV caches hold (default: min(target's trained context, 4096))");
                   app.add_option("--draft-max", f->draft_max,
                                  "draft length bound: verification passes have up to K + 1 positions, whose "
                                  "expert union must fit the cache at once (ignored without -md)")
                       ->capture_default_str();
                   app.add_option("--cache-type", f->cache_type, "KV cache element type: f16, bf16 or f32")
                       ->capture_default_str();
                   app.add_option("--host-ram", f->host_ram,
                                  "host RAM to plan for instead of this machine's MemAvailable, e.g. 64GiB "
                                  "(to plan for another machine); the streamed part must fit in it");
                   app.add_flag("--json", f->json, "print the plan as one JSON object (bytes as integers)");
                   return [f]() { return RunPlan(*f); };
                 }}};

}  // namespace
}  // namespace specgen::cli
