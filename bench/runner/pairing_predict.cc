#include "bench/runner/pairing_predict.h"

#include <algorithm>
#include <memory>

#include "engine/core/status_macros.h"
#include "moe/apply_plan.h"
#include "moe/planner.h"

namespace specgen::bench {
namespace {

// A budget above any model: the plan keeps every weight resident.
constexpr size_t kResidentBudget = size_t{1} << 50;

struct Inputs {
  moe::ModelBytes target;
  std::unique_ptr<moe::ModelBytes> draft;
  moe::PlanOptions options;
};

absl::StatusOr<Inputs> ReadInputs(const RunSpec& spec, size_t vram_budget) {
  const moe::RunRequest request = RunRequestFor(spec);
  Inputs in;
  ASSIGN_OR_RETURN(in.target, moe::ReadModelBytes(request.target));
  if (!request.draft.empty()) {
    ASSIGN_OR_RETURN(moe::ModelBytes d, moe::ReadModelBytes(request.draft));
    in.draft = std::make_unique<moe::ModelBytes>(std::move(d));
  }
  in.options.context = request.context;
  in.options.draft_max = in.draft ? request.draft_max : 0;
  in.options.kv_element_bytes = static_cast<int>(Info(request.kv_type).block_bytes);
  in.options.vram_budget = vram_budget > 0 ? vram_budget : kResidentBudget;
  if (in.options.draft_max + 1 > moe::kMaxPredictedPositions) {
    return InvalidArgument("pairing '", spec.pairing->name, "': draft length ", in.options.draft_max,
                           " is past what the speed prediction covers (", moe::kMaxPredictedPositions - 1, ")");
  }
  return in;
}

}  // namespace

absl::StatusOr<RunPrediction> PredictRun(const RunSpec& spec, size_t vram_budget,
                                         const moe::AcceptanceProfile& profile) {
  ASSIGN_OR_RETURN(Inputs in, ReadInputs(spec, vram_budget));
  ASSIGN_OR_RETURN(const moe::Plan plan, moe::MakePlan(in.target, in.draft.get(), in.options));
  moe::PlanOptions alone_options = in.options;
  alone_options.draft_max = 0;
  ASSIGN_OR_RETURN(const moe::Plan alone, moe::MakePlan(in.target, nullptr, alone_options));
  ASSIGN_OR_RETURN(const moe::SpeedPrediction s,
                   moe::PredictSpeed(plan, in.target, in.draft.get(), in.options.draft_max, profile, {}, &alone));
  RunPrediction out;
  const int k = std::min<int>(spec.length.k, static_cast<int>(s.rows.size()) - 1);
  out.k_uniform = out.k_locality = k;
  if (spec.length.adaptive) {
    // The controller may choose any length up to its bound, k = 0 included: the best row, ties to the
    // shorter.
    out.k_uniform = out.k_locality = 0;
    for (const moe::SpeedRow& r : s.rows) {
      if (r.k > k) break;
      if (r.tokens_per_second_uniform() > s.rows[out.k_uniform].tokens_per_second_uniform()) out.k_uniform = r.k;
      if (r.tokens_per_second_locality() > s.rows[out.k_locality].tokens_per_second_locality()) out.k_locality = r.k;
    }
  }
  const moe::SpeedRow& u = s.rows[static_cast<size_t>(out.k_uniform)];
  const moe::SpeedRow& l = s.rows[static_cast<size_t>(out.k_locality)];
  out.tokens_per_second_uniform = u.tokens_per_second_uniform();
  out.tokens_per_second_locality = l.tokens_per_second_locality();
  out.speedup_uniform = out.tokens_per_second_uniform / s.rows[0].tokens_per_second_uniform();
  out.speedup_locality = out.tokens_per_second_locality / s.rows[0].tokens_per_second_locality();
  return out;
}

absl::StatusOr<moe::StepCostModel> ModelledStepCosts(const RunSpec& spec, size_t vram_budget) {
  ASSIGN_OR_RETURN(Inputs in, ReadInputs(spec, vram_budget));
  if (in.draft == nullptr) return InvalidArgument("pairing '", spec.pairing->name, "': a modelled run needs a draft");
  ASSIGN_OR_RETURN(const moe::Plan plan, moe::MakePlan(in.target, in.draft.get(), in.options));
  // The costs do not depend on the profile; the controller learns acceptance itself.
  ASSIGN_OR_RETURN(const moe::SpeedPrediction s, moe::PredictSpeed(plan, in.target, in.draft.get(),
                                                                   in.options.draft_max, moe::TypicalAcceptance()));
  return moe::StepCostModel(s, moe::RoutingModel::kLocality);
}

moe::AcceptanceProfile MeasuredAcceptance(const SpeculativeStats& stats) {
  moe::AcceptanceProfile out;
  out.name = "measured";
  for (size_t i = 0; i < stats.drafted_at.size() && i < stats.accepted_at.size(); ++i) {
    const int64_t tested = i == 0 ? stats.drafted_at[0] : std::min(stats.drafted_at[i], stats.accepted_at[i - 1]);
    if (tested <= 0) break;
    const double rate = static_cast<double>(stats.accepted_at[i]) / static_cast<double>(tested);
    out.by_depth.push_back(std::clamp(rate, 0.0, 1.0));
  }
  if (out.by_depth.empty()) out.by_depth.push_back(0.0);
  return out;
}

}  // namespace specgen::bench
