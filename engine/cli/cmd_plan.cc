// `specgen plan -m TARGET [-md DRAFT] --vram-budget SIZE [-c N] [--draft-max K] [--cache-type T]
// [--acceptance A] [--json] [--moe-host M] [--calibration FILE]`, `specgen plan --calibrate [-m TARGET]`: the
// host expert path's calibration (plan_host_path.h) and the offload plan (moe/planner.h) of a target and its draft under
// a VRAM budget, computed from the models' headers alone (synth presets from their shapes): what is
// resident and what streams, the expert-cache slots, the host RAM pinned, the predicted tokens/s with
// and without the draft (moe/speed_prediction.h) and the bytes and least time of a
// verification pass of up to --draft-max + 1 positions, and which path each missed expert takes. Nothing is loaded or allocated. The text
// speaks the user's words; the JSON keeps the planner's names.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "engine/cli/command.h"
#include "engine/cli/plan_host_path.h"
#include "engine/cli/resource_check.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "engine/core/byte_size.h"
#include "engine/core/status_macros.h"
#include "moe/apply_plan.h"
#include "moe/planner.h"
#include "moe/speed_prediction.h"
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
  std::string cache_type = moe::kDefaultKvTypeName;
  std::string acceptance = "typical";
  bool json = false;
  PlanHostFlags host;  // --calibrate, --calibration, --moe-host, --host-threads
};

absl::StatusOr<int> KvElementBytes(const std::string& cache_type) {
  if (cache_type == "f16" || cache_type == "bf16") return 2;
  if (cache_type == "f32") return 4;
  return InvalidArgument("--cache-type must be f16, bf16 or f32, got '", cache_type, "'");
}

std::string Bytes(double b) { return FormatBytes(b); }

nlohmann::json SpeedJson(const moe::SpeedPrediction& s) {
  nlohmann::json rows = nlohmann::json::array();
  for (const moe::SpeedRow& r : s.rows) {
    rows.push_back({{"draft_length", r.k},
                    {"tokens_per_pass", r.tokens_per_pass},
                    {"tokens_per_second_uniform", r.tokens_per_second_uniform()},
                    {"tokens_per_second_locality", r.tokens_per_second_locality()},
                    {"hit_rate_uniform", r.hit_rate_uniform},
                    {"hit_rate_locality", r.hit_rate_locality}});
  }
  return {{"by_draft_length", rows},
          {"best_draft_length_uniform", s.best_k_uniform},
          {"best_draft_length_locality", s.best_k_locality},
          {"acceptance", {{"name", s.acceptance.name}, {"by_depth", s.acceptance.by_depth}}},
          {"rates", {{"source", s.rates.source},
                     {"link_bytes_per_second", s.rates.link_bytes_per_second},
                     {"pass_bytes_per_second", s.rates.pass_bytes_per_second},
                     {"extra_position_share", s.rates.extra_position_share},
                     {"draft_token_seconds", s.draft_token_seconds}}}};
}

// Expert-cache slots: every expert when all are resident (slots −1).
int64_t Slots(const Plan& p) { return p.expert_cache_slots < 0 ? p.total_experts : p.expert_cache_slots; }

nlohmann::json PlanJson(const Plan& p, const PlanFlags& f, const moe::SpeedPrediction& speed, const Plan* alone) {
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
          {"passes", passes},
          {"speed", SpeedJson(speed)},
          // What the draft's VRAM (its weights, KV cache and workspace) costs the target's expert cache.
          {"expert_cache_slots_without_draft", alone ? nlohmann::json(alone->expert_cache_slots) : nlohmann::json(nullptr)},
          {"slots_lost_to_draft", alone ? nlohmann::json(Slots(*alone) - Slots(p)) : nlohmann::json(nullptr)}};
}

// What a user calls each resident kind (the JSON keeps the planner's names).
const char* ResidentLabel(ResidentKind k) {
  switch (k) {
    case ResidentKind::kDraft: return "draft model";
    case ResidentKind::kKvTarget: return "target's KV cache";
    case ResidentKind::kKvDraft: return "draft's KV cache";
    case ResidentKind::kWorkspace: return "working memory";
    case ResidentKind::kEmbedding: return "embedding";
    case ResidentKind::kHead: return "output head";
    case ResidentKind::kNorms: return "norms";
    case ResidentKind::kRouters: return "routers";
    case ResidentKind::kAttention: return "attention";
    case ResidentKind::kDenseLayers: return "dense layers";
    case ResidentKind::kDenseRing: return "dense-layer ring";
    case ResidentKind::kSharedExperts: return "shared experts";
    case ResidentKind::kExpertBiases: return "expert biases";
    case ResidentKind::kExpertsResident: return "experts (all)";
    case ResidentKind::kExpertSlots: return "expert cache";
    case ResidentKind::kSlotTable: return "cache index";
  }
  return "?";
}

std::string Rate(double tokens_per_second) {
  char b[32];
  std::snprintf(b, sizeof b, tokens_per_second >= 100 ? "%.0f" : "%.1f", tokens_per_second);
  return b;
}

// "54-153" (uniform routing, the worst case, to locality), or one figure when they agree.
std::string RateRange(double uniform, double locality) {
  const std::string a = Rate(uniform), b = Rate(locality);
  return a == b ? a : a + "-" + b;
}

void PrintSpeed(const moe::SpeedPrediction& s, bool streams) {
  const moe::SpeedRow& alone = s.rows[0];
  std::printf("how fast (predicted tokens/s%s)\n",
              streams ? "; a range from uniform routing, the worst case for the expert cache, to the "
                        "locality of a trained model"
                      : "");
  std::printf("  target alone          %s tokens/s\n",
              RateRange(alone.tokens_per_second_uniform(), alone.tokens_per_second_locality()).c_str());
  if (s.rows.size() > 1) {
    const moe::SpeedRow& u = s.rows[s.best_k_uniform];
    const moe::SpeedRow& l = s.rows[s.best_k_locality];
    std::printf("  with the draft        %s tokens/s (best draft length %s)%s\n",
                RateRange(u.tokens_per_second_uniform(), l.tokens_per_second_locality()).c_str(),
                u.k == l.k ? std::to_string(u.k).c_str()
                           : (std::to_string(u.k) + " to " + std::to_string(l.k)).c_str(),
                u.tokens_per_second_uniform() < alone.tokens_per_second_uniform() &&
                        l.tokens_per_second_locality() < alone.tokens_per_second_locality()
                    ? ": slower than the target alone at this acceptance"
                    : "");
    std::printf("  %12s %15s %16s%s\n", "draft length", "tokens a pass", "tokens/s",
                streams ? "  expert-cache hits" : "");
    for (const moe::SpeedRow& r : s.rows) {
      std::printf("  %12d %15.2f %16s", r.k, r.tokens_per_pass,
                  RateRange(r.tokens_per_second_uniform(), r.tokens_per_second_locality()).c_str());
      if (streams) std::printf("  %3.0f%%-%3.0f%%", 100 * r.hit_rate_uniform, 100 * r.hit_rate_locality);
      std::printf("\n");
    }
    std::string profile;
    for (size_t i = 0; i < s.acceptance.by_depth.size(); ++i) {
      char b[16];
      std::snprintf(b, sizeof b, "%g", s.acceptance.by_depth[i]);
      const bool last = i + 1 == s.acceptance.by_depth.size();
      profile += (i == 0 ? "" : last ? ", then " : ", ") + std::string(b);
    }
    std::printf("  assumed acceptance: %s (the chance that a drafted token is accepted, by its place in the "
                "draft: %s%s; --acceptance typical|flat:X|X,Y,...)\n",
                s.acceptance.name.c_str(), profile.c_str(), s.acceptance.by_depth.size() > 1 ? " for deeper ones" : " at every place");
  }
  std::printf("  assumed rates, %s: host-to-GPU copies %.0f GB/s; a one-token pass reads its weights at "
              "%.0f GB/s, each further token of a pass adds %.0f%% of it",
              s.rates.source.c_str(), s.rates.link_bytes_per_second / 1e9, s.rates.pass_bytes_per_second / 1e9,
              100 * s.rates.extra_position_share);
  if (s.draft_token_seconds > 0) std::printf("; a draft token %.2f ms", 1e3 * s.draft_token_seconds);
  std::printf(".\n  A slower GPU or link runs slower; `specgen_bench` measures yours (README).\n");
}

void PrintText(const Plan& p, const PlanFlags& f, const moe::SpeedPrediction& speed, const Plan* alone) {
  std::printf("plan for %s%s\n", f.model.c_str(), f.draft.empty() ? "" : (" drafted by " + f.draft).c_str());
  std::printf("  GPU memory budget %s (the least this pair can run in: %s), context %lld tokens, draft length "
              "up to %d, KV cache as %s\n",
              Bytes(double(p.vram_budget)).c_str(), Bytes(double(p.minimum_budget)).c_str(),
              static_cast<long long>(p.context), f.draft.empty() ? 0 : f.draft_max, f.cache_type.c_str());
  std::printf("in GPU memory\n");
  for (int k = 0; k < moe::kResidentKinds; ++k) {
    if (p.resident_bytes[k] == 0) continue;
    std::printf("  %-18s %12s\n", ResidentLabel(static_cast<ResidentKind>(k)), Bytes(double(p.resident_bytes[k])).c_str());
  }
  std::printf("  %-18s %12s\n", "total", Bytes(double(p.resident_total)).c_str());
  std::printf("streamed from pinned host RAM\n");
  if (p.host_bytes == 0) {
    std::printf("  nothing: every weight fits in GPU memory; no host RAM is pinned\n");
  } else {
    if (p.streamed_experts > 0) std::printf("  %-18s %12s\n", "experts", Bytes(double(p.streamed_experts)).c_str());
    if (p.streamed_dense > 0) {
      std::string layers;
      for (int l : p.streamed_dense_layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
      std::printf("  %-18s %12s (layers %s, through %d layer buffers in GPU memory)\n", "dense layers",
                  Bytes(double(p.streamed_dense)).c_str(), layers.c_str(), p.dense_ring_layers);
    }
    std::printf("  %-18s %12s of host RAM, pinned at start (--host-ram: plan for another machine's RAM)\n",
                "pins", Bytes(double(p.host_bytes)).c_str());
  }
  if (p.total_experts > 0) {
    if (p.expert_cache_slots < 0) {
      std::printf("experts: all %lld fit in GPU memory; nothing streams\n", static_cast<long long>(p.total_experts));
    } else {
      std::printf("expert cache: room for %lld of the %lld experts (%.1f%%), %s each; prompts are read in "
                  "chunks of %lld tokens\n",
                  static_cast<long long>(p.expert_cache_slots), static_cast<long long>(p.total_experts),
                  100.0 * p.slot_share, Bytes(double(p.slot_bytes)).c_str(), static_cast<long long>(p.prefill_chunk));
    }
  }
  if (alone != nullptr && p.total_experts > 0) {
    const int64_t lost = Slots(*alone) - Slots(p);
    const size_t draft_bytes = p.resident_bytes[static_cast<int>(ResidentKind::kDraft)] +
                               p.resident_bytes[static_cast<int>(ResidentKind::kKvDraft)];
    if (lost > 0) {
      std::printf("the draft (%s with its KV cache) takes %lld expert-cache slots from the target: %lld without it\n",
                  Bytes(double(draft_bytes)).c_str(), static_cast<long long>(lost),
                  static_cast<long long>(Slots(*alone)));
    } else {
      std::printf("the draft (%s with its KV cache) takes no expert-cache slot from the target\n",
                  Bytes(double(draft_bytes)).c_str());
    }
  }
  PrintSpeed(speed, p.expert_cache_slots >= 0 && p.total_experts > 0);
  const int shown = 1 + (f.draft.empty() ? 0 : f.draft_max);
  std::printf("a verification pass of n tokens, uniform routing (least time the links allow: streamed bytes / %.0f "
              "GB/s + GPU memory read / %.1f TB/s)\n", moe::kPcieBytesPerSecond / 1e9,
              moe::kHbmBytesPerSecond / 1e12);
  std::printf("  %3s %9s %9s %12s %12s %10s\n", "n", "experts", "fetched", "streamed", "GPU read", "least ms");
  for (const moe::PassPrediction& x : p.passes) {
    if (x.n > shown) break;
    std::printf("  %3d %9.2f %9.2f %12s %12s %10.3f\n", x.n, x.distinct_experts, x.missed_experts,
                Bytes(x.streamed_bytes).c_str(), Bytes(x.hbm_bytes).c_str(), 1e3 * x.floor_seconds);
  }
  if (p.total_experts > 0) std::printf("  (experts: distinct experts a layer uses; fetched: of them, not in the cache)\n");
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
  if (f.host.calibrate) {
    RETURN_IF_ERROR(RunCalibrate(f.host, f.model));
    if (f.vram_budget.empty()) return absl::OkStatus();  // --calibrate alone
  }
  if (f.model.empty()) return InvalidArgument("-m: a target model is required");
  if (f.vram_budget.empty()) return InvalidArgument("--vram-budget: required (or --calibrate alone)");
  ASSIGN_OR_RETURN(const size_t budget, ParseByteSize(f.vram_budget));
  if (budget == 0) return InvalidArgument("--vram-budget ", f.vram_budget, ": must be more than 0 bytes");
  ASSIGN_OR_RETURN(const int kv_bytes, KvElementBytes(f.cache_type));
  ASSIGN_OR_RETURN(const moe::AcceptanceProfile acceptance, moe::ParseAcceptance(f.acceptance));
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
    std::string message(made.status().message());
    if (!f.host_ram.empty()) absl::StrReplaceAll({{"(MemAvailable)", "(--host-ram)"}}, &message);
    return absl::ResourceExhaustedError(
        Cat(message, "; to plan for a machine with more RAM, give its RAM with --host-ram SIZE",
            untyped.empty() ? "" : Cat("; ", untyped, " was planned as f32 weights: a quantized type needs less")));
  }
  ASSIGN_OR_RETURN(const Plan plan, std::move(made));
  // The target alone runs without the draft in VRAM, so with more room for the expert cache.
  std::optional<Plan> alone_plan;
  if (draft != nullptr) {
    moe::PlanOptions alone = o;
    alone.draft_max = 0;
    ASSIGN_OR_RETURN(alone_plan, moe::MakePlan(target, nullptr, alone));
  }
  ASSIGN_OR_RETURN(const moe::SpeedPrediction speed,
                   moe::PredictSpeed(plan, target, draft.get(), f.draft_max, acceptance, {},
                                     alone_plan ? &*alone_plan : nullptr));
  const int shown = 1 + (f.draft.empty() ? 0 : f.draft_max);
  if (f.json) {
    nlohmann::json j = PlanJson(plan, f, speed, alone_plan ? &*alone_plan : nullptr);
    ASSIGN_OR_RETURN(j["host_path"], HostPathJson(f.host, plan, target, shown));
    std::printf("%s\n", j.dump().c_str());
  } else {
    PrintText(plan, f, speed, alone_plan ? &*alone_plan : nullptr);
    RETURN_IF_ERROR(PrintHostPath(f.host, plan, target, shown));
  }
  return absl::OkStatus();
}

Registrar kPlan{{"plan", "Show what a GPU memory budget holds of a target and its draft, what streams, and how fast it "
                 "should run",
                 [](CLI::App& app) {
                   auto f = std::make_shared<PlanFlags>();
                   app.add_option("-m,--model", f->model,
                                  "target MODEL: GGUF file, HF directory or synth:PRESET[:TYPE] (read from "
                                  "headers or the preset's shape; no weight is read)");
                   app.add_option("--model-draft", f->draft,
                                  "draft MODEL (also -md): placed whole in VRAM first, with its KV cache");
                   app.add_option("--vram-budget", f->vram_budget,
                                  "GPU memory the plan may use, e.g. 8GiB or 512MiB: weights, KV caches, "
                                  "expert-cache slots and workspaces (the CUDA context and graphs come on top); "
                                  "required but with --calibrate alone");
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
                   app.add_option("--acceptance", f->acceptance,
                                  "acceptance assumed for the predicted speed with the draft: 'typical' (0.8, "
                                  "0.75, 0.7, 0.65, 0.6, then 0.55 by the token's place in the draft), "
                                  "'flat:X' or X for the chance that any drafted token is accepted (e.g. 0.6 "
                                  "or 0.9), or a list by place such as 0.9,0.8,0.7 (the last for the rest)")
                       ->capture_default_str();
                   app.add_flag("--json", f->json, "print the plan as one JSON object (bytes as integers)");
                   AddPlanHostFlags(app, &f->host);
                   return [f]() { return RunPlan(*f); };
                 }}};

}  // namespace
}  // namespace specgen::cli
