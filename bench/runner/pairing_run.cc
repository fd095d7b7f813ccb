#include "bench/runner/pairing_run.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "bench/acceptance/acceptance_script.h"
#include "bench/routing/routing_trace.h"
#include "bench/runner/pairing_predict.h"
#include "engine/core/status_macros.h"
#include "engine/speculative/make_loop.h"

namespace specgen::bench {

void RunTotals::Add(const RunTotals& o) {
  prompts += o.prompts;
  stats += o.stats;
  ttft_seconds += o.ttft_seconds;
  expert_cache_slots = o.expert_cache_slots;
  prefill_chunk = o.prefill_chunk;
}

std::string BenchmarkName(const RunSpec& spec) {
  std::string name = Cat(spec.pairing->name, "/k:", spec.length.Name());
  if (!spec.backend.budget.empty()) name += Cat("/budget:", spec.backend.budget);
  if (!spec.routing.empty()) name += Cat("/routing:", spec.routing);
  if (!spec.acceptance.empty()) name += Cat("/accept:", spec.acceptance);
  if (spec.parallel > 0) name += Cat("/parallel:", spec.parallel);
  return name;
}

RunSpec WithoutDraft(const RunSpec& spec) {
  RunSpec plain = spec;
  plain.length = DraftLength{0, false};
  plain.acceptance.clear();
  plain.parallel = 0;
  return plain;
}

std::string BaselineKey(const RunSpec& spec) {
  const Pairing& p = *spec.pairing;
  const SamplingParams& s = p.sampling;
  return Cat(p.target, "|", spec.backend.device, "|", spec.backend.budget, "|",
                      spec.backend.threads, "|", p.context, "|", p.max_new_tokens, "|", p.ignore_eos,
                      "|", AcceptModeName(p.accept), "|", s.temperature, "|", s.top_k, "|", s.top_p,
                      "|", s.min_p, "|", s.seed, "|", p.prompt_set, "|", spec.routing);
}

namespace {

absl::StatusOr<std::vector<int32_t>> PromptIds(const Prompt& prompt, const CachedLm& target,
                                               const std::string& set) {
  if (!prompt.ids.empty()) {
    for (int32_t id : prompt.ids) {
      if (id >= target.lm->vocab_size()) {
        return InvalidArgument("prompt set '", set, "': token id ", id, " is outside the target's vocabulary of ",
                               target.lm->vocab_size());
      }
    }
    return prompt.ids;
  }
  if (target.tokenizer == nullptr) {
    return InvalidArgument("prompt set '", set, "' has text, and the target has no tokenizer: give ids");
  }
  return target.tokenizer->Encode(prompt.text);
}

}  // namespace

absl::Status UseRouting(const RunSpec& spec, Transformer& target, size_t prompt) {
  if (spec.routing.empty()) return target.SetRoutingOverride(nullptr);
  ASSIGN_OR_RETURN(const RoutingRegime regime, ParseRoutingRegime(spec.routing));
  const Pairing& p = *spec.pairing;
  ASSIGN_OR_RETURN(std::shared_ptr<const RoutingTable> trace,
                   TraceForModel(regime, target.spec(), p.context, p.sampling.seed * 1000003 + prompt));
  return target.SetRoutingOverride(std::move(trace));
}

moe::RunRequest RunRequestFor(const RunSpec& spec) {
  const Pairing& p = *spec.pairing;
  moe::RunRequest request;
  request.target = p.target;
  request.draft = p.draft;
  for (const DraftLength& l : p.draft_lengths) request.draft_max = std::max(request.draft_max, l.k);
  if (request.draft_max == 0) request.draft.clear();
  request.context = p.context;
  return request;
}

absl::StatusOr<PreparedRun> PrepareRun(ModelCache& cache, const RunSpec& spec) {
  const Pairing& p = *spec.pairing;
  PreparedRun run;
  RETURN_IF_ERROR(cache.UseBackend(spec.backend));
  moe::RunRequest request = RunRequestFor(spec);
  const absl::StatusOr<moe_host::HostPath> host_path = moe_host::ResolveHostPath(p.moe_host, "");
  if (!host_path.ok()) return InvalidArgument("pairing '", p.name, "': ", host_path.status().message());
  request.host_path = *host_path;
  const absl::StatusOr<moe::RunPlan> planned = moe::PlanFor(request, cache.vram_budget());
  if (!planned.ok()) return InvalidArgument("pairing '", p.name, "': ", planned.status().message());
  const moe::RunPlan& placement = *planned;
  run.expert_cache_slots = placement.expert_cache_slots;
  if (cache.cuda() != nullptr) {
    std::vector<LmKey> keep = {LmKey::Of(p.target, p.context, placement)};
    if (spec.length.k > 0) keep.push_back(LmKey::Of(p.draft, p.context));
    cache.KeepOnly(keep);
  }
  ASSIGN_OR_RETURN(CachedLm * target, cache.Get(spec.backend, p.target, p.context, placement));
  CachedLm* draft = nullptr;
  if (spec.length.k > 0) {
    ASSIGN_OR_RETURN(draft, cache.Get(spec.backend, p.draft, p.context));
  }
  run.target = target;
  run.draft = draft;
  SpeculativeOptions& options = run.options;
  options.max_new_tokens = p.max_new_tokens;
  options.draft_max = spec.length.k;
  options.adaptive = spec.length.adaptive;
  if (spec.length.modelled) {
    const absl::StatusOr<moe::StepCostModel> costs = ModelledStepCosts(spec, cache.vram_budget());
    if (!costs.ok()) return InvalidArgument("pairing '", p.name, "': ", costs.status().message());
    options.modelled_step_seconds = [model = *costs](int k) { return model.Seconds(k); };
  }
  options.accept = p.accept;
  options.sampling = p.sampling;
  if (!p.ignore_eos) {
    if (target->tokenizer != nullptr) {
      options.end_ids = target->tokenizer->eog_ids();
      if (target->tokenizer->eos_id() >= 0) options.end_ids.push_back(target->tokenizer->eos_id());
    } else if (target->lm->spec().eos_token_id >= 0) {
      options.end_ids.push_back(static_cast<int32_t>(target->lm->spec().eos_token_id));
    }
  }

  const std::vector<Prompt>& prompts = spec.prompts->prompts;
  run.ids.resize(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSIGN_OR_RETURN(run.ids[i], PromptIds(prompts[i], *target, spec.prompts->name));
  }
  return run;
}

absl::StatusOr<RunTotals> RunPairing(ModelCache& cache, const RunSpec& spec) {
  const Pairing& p = *spec.pairing;
  ASSIGN_OR_RETURN(PreparedRun run, PrepareRun(cache, spec));
  CachedLm* target = run.target;
  CachedLm* draft = run.draft;
  const SpeculativeOptions& options = run.options;
  const std::vector<std::vector<int32_t>>& ids = run.ids;
  // Under an acceptance regime the draft's tokens follow the profile's script (greedy only; the
  // config checks it), against the target's greedy continuation of each prompt: computed first, by
  // the loop without a draft on the same backend, which is gone before the regime's loop is made (on
  // the GPU the two would hold their buffers in the arena at once).
  std::unique_ptr<AcceptanceScript> script;
  std::vector<std::vector<int32_t>> continuations;
  const bool scripted = !spec.acceptance.empty() && spec.length.k > 0;
  auto use_routing = [&](size_t i) -> absl::Status {
    const absl::Status st = UseRouting(spec, *target->lm, i);
    if (!st.ok()) return InvalidArgument("pairing '", p.name, "', routing ", spec.routing, ": ", st.message());
    return absl::OkStatus();
  };
  if (scripted) {
    for (size_t i = 0; i < ids.size(); ++i) {
      RETURN_IF_ERROR(use_routing(i));
      absl::StatusOr<std::vector<int32_t>> c =
          GreedyContinuation(cache.cuda(), target->lm.get(), ids[i], p.max_new_tokens);
      if (!c.ok()) return InvalidArgument("pairing '", p.name, "', prompt ", i, ": ", c.status().message());
      continuations.push_back(*std::move(c));
    }
  }
  // One loop for every prompt: the GPU loop captures its CUDA graphs as it meets each pass size, so a
  // loop per prompt would time captures. On the GPU an untimed generation from the first prompt
  // captures them before the measured ones.
  std::unique_ptr<SpeculativeLoop> loop;
  if (scripted) {
    ASSIGN_OR_RETURN(const moe::AcceptanceProfile profile, moe::ParseAcceptance(spec.acceptance, "acceptance"));
    script = std::make_unique<AcceptanceScript>(profile, p.sampling.seed,
                                                static_cast<int32_t>(target->lm->vocab_size()));
    absl::StatusOr<std::unique_ptr<SpeculativeLoop>> made =
        MakeScriptedLoop(cache.cuda(), target->lm.get(), draft->lm.get(), options, script.get());
    if (!made.ok()) return InvalidArgument("pairing '", p.name, "': ", made.status().message());
    loop = *std::move(made);
  } else {
    ASSIGN_OR_RETURN(loop, MakeSpeculativeLoop(cache.cuda(), target->lm.get(), draft ? draft->lm.get() : nullptr,
                                               options));
  }
  RETURN_IF_ERROR(use_routing(0));  // the own router switches a cached model's override off
  if (cache.cuda() != nullptr) {
    if (script != nullptr) {
      const absl::Status set = script->SetContinuation(static_cast<int64_t>(ids[0].size()), continuations[0], 0);
      if (!set.ok()) return InvalidArgument("pairing '", p.name, "', warm-up: ", set.message());
    }
    auto warm = loop->Generate(ids[0]);
    if (!warm.ok()) return InvalidArgument("pairing '", p.name, "', warm-up: ", warm.status().message());
  }
  RunTotals totals;
  totals.expert_cache_slots = run.expert_cache_slots;
  totals.prefill_chunk = target->lm->prefill_chunk();
  for (size_t i = 0; i < ids.size(); ++i) {
    using Clock = std::chrono::steady_clock;
    RETURN_IF_ERROR(use_routing(i));  // outside the timed part, as the script's continuation
    if (script != nullptr) {
      // Outside the timed part.
      const absl::Status set = script->SetContinuation(static_cast<int64_t>(ids[i].size()), continuations[i], i);
      if (!set.ok()) return InvalidArgument("pairing '", p.name, "', prompt ", i, ": ", set.message());
    }
    const Clock::time_point start = Clock::now();
    double ttft = -1;
    auto sink = [&](std::span<const int32_t> tokens) {
      if (ttft < 0 && !tokens.empty()) ttft = std::chrono::duration<double>(Clock::now() - start).count();
    };
    auto out = loop->Generate(ids[i], sink);
    if (!out.ok()) {
      return InvalidArgument("pairing '", p.name, "', prompt ", i, ": ", out.status().message());
    }
    const SpeculativeStats& s = loop->stats();
    // A prompt whose tokens and max_new_tokens overflow the context stops early; timed as it is, it
    // would be an ordinary-looking result of fewer tokens.
    if (s.stop_reason == StopReason::kContextFull) {
      return InvalidArgument("pairing '", p.name, "', prompt ", i, ": the context of ", p.context,
                             " filled after ", s.tokens, " of max_new_tokens ", p.max_new_tokens, " (the prompt has ",
                             ids[i].size(), " tokens); raise context or lower max_new_tokens");
    }
    totals.prompts += 1;
    totals.stats += s;
    totals.ttft_seconds += std::max(ttft, 0.0);
  }
  return totals;
}

}  // namespace specgen::bench
