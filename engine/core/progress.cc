#include "engine/core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "engine/core/byte_size.h"
#include "engine/core/str_cat.h"

namespace specgen {
namespace {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "4s", "1m05s", "2h03m".
std::string Duration(double s) {
  if (!(s >= 0) || s > 360000) return "?";
  const auto t = static_cast<int64_t>(std::lround(s));
  char buf[32];
  if (t < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(t));
  } else if (t < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60));
  }
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(std::string label, uint64_t total, Options options)
    : label_(std::move(label)), options_(std::move(options)), total_(total) {
  if (!options_.clock) options_.clock = SteadySeconds;
  terminal_ = options_.terminal >= 0 ? options_.terminal != 0 : (!options_.write && isatty(STDERR_FILENO) == 1);
  start_ = options_.clock();
}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Emit(std::string_view text) const {
  if (options_.write) {
    options_.write(text);
    return;
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

std::string ProgressBar::Amount(uint64_t v) const {
  return options_.unit == Unit::kBytes ? FormatBytes(static_cast<double>(v)) : Cat(v);
}

std::string ProgressBar::Render(double now) const {
  const double elapsed = std::max(0.0, now - start_);
  const double fraction = total_ > 0 ? std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_)) : 0.0;
  const int width = std::max(1, options_.bar_width);
  const int filled = static_cast<int>(fraction * width);
  std::string line = Cat(label_, " [", std::string(filled, '#'), std::string(width - filled, '.'), "] ");
  char pct[8];
  std::snprintf(pct, sizeof(pct), "%3d%%", static_cast<int>(fraction * 100));
  line += pct;
  if (options_.unit == Unit::kBytes) {
    line += Cat("  ", FormatBytes(static_cast<double>(done_)), " / ", FormatBytes(static_cast<double>(total_)));
  } else {
    line += Cat("  ", done_, "/", total_);
  }
  const double rate = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  if (rate > 0) {
    line += options_.unit == Unit::kBytes ? Cat("  ", FormatBytes(rate), "/s") : Cat("  ", Cat(std::lround(rate)), "/s");
    if (done_ < total_) line += Cat("  ETA ", Duration(static_cast<double>(total_ - done_) / rate));
  }
  if (!detail_.empty()) line += Cat("  ", detail_);
  return line;
}

void ProgressBar::MaybeDraw(bool force) {
  if (finished_ || !terminal_) return;
  const double now = options_.clock();
  if (now - start_ < options_.delay_s) return;
  if (!force && drawn_ && now - last_draw_ < options_.redraw_interval_s) return;
  std::string line = Render(now);
  const size_t width = line.size();
  // Blank what a longer previous line left behind (no terminal escape codes needed).
  if (width < last_width_) line += std::string(last_width_ - width, ' ');
  last_width_ = width;
  Emit(Cat("\r", line));
  drawn_ = true;
  last_draw_ = now;
}

void ProgressBar::Update(uint64_t done) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = done;
  MaybeDraw(false);
}

void ProgressBar::Add(uint64_t delta) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ += delta;
  MaybeDraw(false);
}

void ProgressBar::SetTotal(uint64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  total_ = total;
}

void ProgressBar::SetDetail(std::string detail) {
  std::lock_guard<std::mutex> lock(mu_);
  detail_ = std::move(detail);
  MaybeDraw(false);
}

void ProgressBar::Note(std::string_view line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (terminal_ && drawn_ && !finished_) {
    Emit(Cat("\r", std::string(last_width_, ' '), "\r", line, "\n"));
    last_width_ = 0;
    last_draw_ = -1e300;  // the next update redraws at once
    return;
  }
  Emit(Cat(line, "\n"));
}

void ProgressBar::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  const double now = options_.clock();
  const double elapsed = now - start_;
  if (terminal_) {
    if (drawn_ || (elapsed >= options_.delay_s && done_ >= total_)) {
      MaybeDraw(true);
      Emit("\n");
    }
  } else if (elapsed >= options_.delay_s && done_ >= total_ && total_ > 0) {
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%.1f s", elapsed);
    std::string line = Cat(label_, ": ", Amount(total_), " in ", secs);
    if (elapsed > 0) {
      line += options_.unit == Unit::kBytes ? Cat(" (", FormatBytes(static_cast<double>(total_) / elapsed), "/s)")
                                            : Cat(" (", std::lround(static_cast<double>(total_) / elapsed), "/s)");
    }
    Emit(Cat(line, "\n"));
  }
  finished_ = true;
}

std::function<void(size_t, size_t)> ProgressBar::Callback() {
  return [this](size_t done, size_t total) {
    std::lock_guard<std::mutex> lock(mu_);
    total_ = total;
    done_ = done;
    MaybeDraw(false);
  };
}

}  // namespace specgen
