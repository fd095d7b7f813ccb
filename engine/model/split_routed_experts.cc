#include "engine/model/split_routed_experts.h"

#include <algorithm>
#include <vector>

#include "engine/core/status_macros.h"

namespace specgen {

absl::Status RunSplitRoutedExperts(Backend& be, const Buffer& x, const Buffer& router_logits, int64_t k,
                                   RouterNorm norm, int64_t n_experts_in, size_t layer, StreamedExperts& streamed,
                                   HostExpertPath& host, const SplitRoutingScratch& scratch, Buffer* out) {
  const int64_t n = x.rows(), hidden = x.cols();
  if (n > HostExpertPath::kMaxPositions) {
    return InvalidArgument("split routed experts: a pass of ", n, " positions (at most ",
                           HostExpertPath::kMaxPositions, ")");
  }
  const int64_t pairs = n * k;
  if (scratch.pairs_z == nullptr || scratch.pairs_y == nullptr || scratch.pairs_z->capacity_rows() < pairs ||
      scratch.pairs_y->capacity_rows() < pairs) {
    return InvalidArgument("split routed experts: pair buffers for fewer than ", pairs, " pairs");
  }
  Routing routing;
  RETURN_IF_ERROR(be.RouteWith(router_logits, k, RouterParams{norm}, &routing));
  const size_t n_experts = static_cast<size_t>(n_experts_in);
  // The (token, weight) pairs grouped by expert, tokens ascending within an expert: RunRoutedExperts's.
  ASSIGN_OR_RETURN(const ExpertPairs grouped, GroupByExpert(routing, n_experts_in));
  const auto& rows = grouped.rows;
  const auto& scales = grouped.scales;
  std::vector<int32_t> ids;
  std::vector<int64_t> counts;
  for (size_t e = 0; e < n_experts; ++e) {
    if (rows[e].empty()) continue;
    ids.push_back(static_cast<int32_t>(e));
    counts.push_back(static_cast<int64_t>(rows[e].size()));
  }
  std::vector<uint8_t> on_host = host.HostShare(layer, ids, counts);
  on_host.resize(ids.size(), 0);

  // Z's rows: the host experts' first (Backend::Write fills a buffer's first rows), then the link's.
  std::vector<int64_t> z_first(ids.size());
  int64_t host_rows = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (on_host[i]) z_first[i] = host_rows, host_rows += counts[i];
  }
  int64_t next = host_rows;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!on_host[i]) z_first[i] = next, next += counts[i];
  }
  // The pairs in RunRoutedExperts's order, each with the Z row holding its expert's output.
  std::vector<int32_t> perm, tokens;
  std::vector<float> weights;
  perm.reserve(pairs), tokens.reserve(pairs), weights.reserve(pairs);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t e = ids[i];
    for (size_t t = 0; t < rows[e].size(); ++t) {
      perm.push_back(static_cast<int32_t>(z_first[i] + static_cast<int64_t>(t)));
      tokens.push_back(rows[e][t]);
      weights.push_back(scales[e][t]);
    }
  }

  // The host share: x read once, each host expert's rows gathered here, its outputs at its Z rows.
  std::vector<float> x_host, x_rows, y_rows;
  std::vector<HostExpertWork> work;
  if (host_rows > 0) {
    x_host.resize(static_cast<size_t>(n * hidden));
    RETURN_IF_ERROR(be.Read(x, x_host));
    x_rows.resize(static_cast<size_t>(host_rows * hidden));
    y_rows.resize(static_cast<size_t>(host_rows * hidden));
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!on_host[i]) continue;
      const std::vector<int32_t>& r = rows[ids[i]];
      for (size_t t = 0; t < r.size(); ++t) {
        std::copy_n(x_host.data() + r[t] * hidden, hidden, x_rows.data() + (z_first[i] + static_cast<int64_t>(t)) * hidden);
      }
      work.push_back({ids[i], x_rows.data() + z_first[i] * hidden, counts[i], y_rows.data() + z_first[i] * hidden});
    }
    const int64_t bytes = static_cast<int64_t>((x_host.size() + y_rows.size()) * sizeof(float));
    RETURN_IF_ERROR(host.Start(layer, work, bytes));
  }

  // The link share, queued while the host computes; the host's work is waited for on every return.
  Buffer* z = scratch.pairs_z;
  auto link = [&]() -> absl::Status {
    RETURN_IF_ERROR(z->set_rows(pairs));
    const HostRoutingScratch& s = scratch.expert;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (on_host[i]) continue;
      const int32_t e = ids[i];
      for (Buffer* b : {s.x_e, s.y_e, s.g_e, s.u_e}) RETURN_IF_ERROR(b->set_rows(counts[i]));
      ASSIGN_OR_RETURN(const ExpertRefs w, streamed.Stage(layer, e));
      RETURN_IF_ERROR(be.GatherRows(x, rows[e], s.x_e));
      RETURN_IF_ERROR(be.MatMul(*s.x_e, *w.gate, s.g_e));
      RETURN_IF_ERROR(be.MatMul(*s.x_e, *w.up, s.u_e));
      RETURN_IF_ERROR(be.SwiGlu(*s.g_e, *s.u_e, s.g_e));
      RETURN_IF_ERROR(be.MatMul(*s.g_e, *w.down, s.y_e));
      RETURN_IF_ERROR(be.CopyRows(*s.y_e, z_first[i], z));
    }
    return absl::OkStatus();
  };
  const absl::Status linked = link();
  const absl::Status hosted = host_rows > 0 ? host.Finish() : absl::OkStatus();
  RETURN_IF_ERROR(linked);
  RETURN_IF_ERROR(hosted);
  if (host_rows > 0) {
    RETURN_IF_ERROR(z->set_rows(host_rows));
    RETURN_IF_ERROR(be.Write(y_rows, z));
    RETURN_IF_ERROR(z->set_rows(pairs));
  }
  Buffer* y = scratch.pairs_y;
  RETURN_IF_ERROR(y->set_rows(pairs));
  RETURN_IF_ERROR(be.GatherRows(*z, perm, y));
  RETURN_IF_ERROR(be.Zero(out));
  return be.ScatterAddScaled(*y, tokens, weights, out);
}

}  // namespace specgen
