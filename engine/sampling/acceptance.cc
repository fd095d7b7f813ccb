#include "engine/sampling/acceptance.h"

#include <algorithm>

#include "engine/core/status_macros.h"
#include "engine/sampling/distribution.h"
#include "engine/sampling/keyed_random.h"

namespace specgen {

std::string_view AcceptModeName(AcceptMode mode) {
  return mode == AcceptMode::kCoupled ? "coupled" : "rejection";
}

absl::StatusOr<AcceptMode> ParseAcceptMode(std::string_view name) {
  if (name == "rejection") return AcceptMode::kRejection;
  if (name == "coupled") return AcceptMode::kCoupled;
  return InvalidArgument("--accept must be rejection or coupled, got '", name, "'");
}

int32_t SampleTarget(std::span<const float> p, const SamplingParams& params, int64_t position) {
  if (params.greedy()) return Argmax(p);
  return SampleGumbelMax(p, params.seed, position, RandomPurpose::kTargetSample);
}

int32_t SampleDraft(AcceptMode mode, std::span<const float> q, const SamplingParams& params,
                    int64_t position) {
  if (params.greedy()) return Argmax(q);
  return SampleGumbelMax(q, params.seed, position,
                         mode == AcceptMode::kCoupled ? RandomPurpose::kTargetSample
                                                      : RandomPurpose::kDraftSample);
}

namespace {

// Leviathan/Chen modified rejection sampling at one position; returns the accepted draft or -1.
bool RejectionTest(int32_t x, std::span<const float> q, std::span<const float> p,
                   const SamplingParams& params, int64_t position) {
  if (!(q[x] > 0.0f)) return false;  // not a draw from q: never accept what q could not produce
  if (p[x] >= q[x]) return true;     // min(1, p/q) = 1: no draw needed
  const double u = KeyedUniform(params.seed, position, RandomPurpose::kAcceptUniform);
  return u * double(q[x]) < double(p[x]);
}

// Draw from norm(max(0, p - q)). The residual is empty only when p <= q everywhere, i.e. p == q,
// where the test above accepts surely; p is then the right fallback.
int32_t SampleResidual(std::span<const float> q, std::span<const float> p,
                       const SamplingParams& params, int64_t position) {
  std::vector<float> residual(p.size());
  for (size_t i = 0; i < p.size(); ++i) residual[i] = std::max(0.0f, p[i] - q[i]);
  const int32_t t = SampleGumbelMax(residual, params.seed, position, RandomPurpose::kResidual);
  return t >= 0 ? t : SampleTarget(p, params, position);
}

}  // namespace

AcceptResult Accept(AcceptMode mode, std::span<const int32_t> drafts, std::span<const float> q,
                    std::span<const float> p, int64_t vocab, const SamplingParams& params,
                    int64_t first_position) {
  const size_t k = drafts.size();
  const size_t v = static_cast<size_t>(vocab);
  auto p_row = [&](size_t i) { return p.subspan(i * v, v); };
  auto q_row = [&](size_t i) { return q.subspan(i * v, v); };
  AcceptResult out;
  out.tokens.reserve(k + 1);
  for (size_t i = 0; i < k; ++i) {
    const int64_t pos = first_position + static_cast<int64_t>(i);
    const int32_t x = drafts[i];
    if (params.greedy()) {
      // p is the argmax's point mass: accept iff the draft is it, else emit it.
      const int32_t a = Argmax(p_row(i));
      out.tokens.push_back(a);
      if (x != a) return out;
    } else if (mode == AcceptMode::kCoupled) {
      const int32_t t = SampleTarget(p_row(i), params, pos);
      out.tokens.push_back(t);
      if (x != t) return out;
    } else {
      if (!RejectionTest(x, q_row(i), p_row(i), params, pos)) {
        out.tokens.push_back(SampleResidual(q_row(i), p_row(i), params, pos));
        return out;
      }
      out.tokens.push_back(x);
    }
    ++out.n_accepted;
  }
  out.tokens.push_back(SampleTarget(p_row(k), params, first_position + static_cast<int64_t>(k)));
  return out;
}

}  // namespace specgen
