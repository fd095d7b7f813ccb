#include "moe/host/streamed_host_path.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "engine/core/status_macros.h"
#include "engine/core/str_cat.h"

namespace specgen::moe_host {

StreamedHostPath::StreamedHostPath(Options options)
    : options_(std::move(options)), isa_(options_.isa.value_or(BestIsa())) {
  if (options_.mode == HostMode::kOnly) options_.takes.fill(true);
  driver_ = std::thread([this] { Drive(); });
}

StreamedHostPath::~StreamedHostPath() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  driver_.join();
}

absl::Status StreamedHostPath::Bind(const StreamedExperts& experts, size_t layers, int64_t experts_per_layer) {
  if (!IsaSupported(isa_)) return absl::FailedPreconditionError(Cat("the host path's ISA ", IsaName(isa_), " does not run here"));
  std::vector<std::vector<HostExpert>> all(layers);
  std::vector<size_t> bytes(layers, 0);
  int64_t hidden = 0;
  for (size_t l = 0; l < layers; ++l) {
    all[l].reserve(static_cast<size_t>(experts_per_layer));
    for (int64_t e = 0; e < experts_per_layer; ++e) {
      ASSIGN_OR_RETURN(const ExpertHostView v, experts.HostView(l, static_cast<int>(e)));
      HostExpert h{{v.type, v.gate, v.ffn, v.hidden}, {v.type, v.up, v.ffn, v.hidden}, {v.down_type, v.down, v.hidden, v.ffn}};
      absl::Status ok = CheckHostExpert(h);
      if (!ok.ok()) {
        return absl::Status(ok.code(), Cat("streamed layer ", l, " expert ", e, ": ", ok.message()));
      }
      if (e == 0) bytes[l] = 2 * PackedRowBytes(h.gate) * h.gate.rows + PackedRowBytes(h.down) * h.down.rows;
      hidden = v.hidden;
      all[l].push_back(h);
    }
  }
  if (pool_ == nullptr) pool_ = std::make_unique<HostPool>(HostPool::Options{options_.threads, options_.pin});
  runner_ = std::make_unique<HostExpertRunner>(*pool_, isa_);
  experts_ = std::move(all);
  expert_bytes_ = std::move(bytes);
  hidden_ = hidden;
  return absl::OkStatus();
}

bool StreamedHostPath::TakesPass(int64_t n) const {
  return n >= 1 && n <= kCalibratedTokens && options_.takes[static_cast<size_t>(n - 1)];
}

std::vector<uint8_t> StreamedHostPath::HostShare(size_t layer, std::span<const int32_t> ids,
                                                 std::span<const int64_t> tokens) {
  const int64_t distinct = static_cast<int64_t>(ids.size());
  std::vector<uint8_t> host(ids.size(), 0);
  if (distinct == 0 || layer >= experts_.size()) return host;
  int64_t h = 0;
  if (options_.force_host_experts >= 0) {
    h = std::min(options_.force_host_experts, distinct);
  } else if (options_.mode == HostMode::kOnly) {
    h = distinct;
  } else if (options_.mode == HostMode::kAuto && options_.calibration) {
    const int64_t pairs = std::accumulate(tokens.begin(), tokens.end(), int64_t{0});
    const int per_expert = static_cast<int>(std::clamp<long>(
        std::lround(static_cast<double>(pairs) / static_cast<double>(distinct)), 1L, static_cast<long>(kCalibratedTokens)));
    const Calibration& cal = *options_.calibration;
    const double link = cal.link_gbps ? *cal.link_gbps * 1e9 : options_.link_bytes_per_second;
    h = ChooseSplit(HostMode::kAuto, &cal, {distinct, per_expert, expert_bytes_[layer], hidden_, link}).host;
  }
  // The h experts with the fewest tokens (ties: the higher id, so the order is fixed).
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tokens[a] != tokens[b] ? tokens[a] < tokens[b] : ids[a] > ids[b];
  });
  for (int64_t i = 0; i < h; ++i) host[order[static_cast<size_t>(i)]] = 1;
  return host;
}

absl::Status StreamedHostPath::Start(size_t layer, std::span<const HostExpertWork> work, int64_t activation_bytes) {
  if (runner_ == nullptr || layer >= experts_.size()) {
    return absl::FailedPreconditionError(Cat("host expert path: not bound to streamed layer ", layer));
  }
  std::vector<HostExpertJob> jobs;
  jobs.reserve(work.size());
  for (const HostExpertWork& w : work) {
    if (w.expert < 0 || static_cast<size_t>(w.expert) >= experts_[layer].size()) {
      return absl::InvalidArgumentError(Cat("host expert path: no expert ", w.expert, " in streamed layer ", layer));
    }
    jobs.push_back({&experts_[layer][static_cast<size_t>(w.expert)], w.x, w.rows, w.y});
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_ || running_) return absl::FailedPreconditionError("host expert path: Start before the last Finish");
    jobs_ = std::move(jobs);
    pending_ = true;
    stats_.experts += static_cast<int64_t>(work.size());
    stats_.activation_bytes += activation_bytes;
  }
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status StreamedHostPath::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !pending_ && !running_; });
  absl::Status r = std::move(result_);
  result_ = absl::OkStatus();
  return r;
}

HostExpertStats StreamedHostPath::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void StreamedHostPath::Drive() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || pending_; });
    if (stop_) return;
    pending_ = false;
    running_ = true;
    std::vector<HostExpertJob> jobs = std::move(jobs_);
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = runner_->RunMany(jobs);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    running_ = false;
    result_ = std::move(s);
    stats_.seconds += seconds;
    cv_.notify_all();
  }
}

}  // namespace specgen::moe_host
