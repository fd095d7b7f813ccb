// Progress of work that can take a while (loading, converting, uploading weights), on stderr.
//
// Nothing is shown for work that ends within `delay_s` (one second): short loads stay silent. Past
// that, on a terminal, one line is redrawn in place at most every `redraw_interval_s`:
//   loading target qwen3-1.7b [##########..........]  52%  1.66/3.20 GiB  410 MiB/s  ETA 4s  layer 15/28
// and completed with a newline when the work ends. When the stream is not a terminal (a log, a pipe)
// no bar is drawn: a run that took longer than the delay leaves one final line instead,
//   loading target qwen3-1.7b: 3.20 GiB in 7.9 s (414 MiB/s)
// so logs get a record without a flood of carriage returns.
//
// The clock and the output are injectable (Options) so tests drive the reporter without sleeping.
// Update/Add/SetDetail may be called from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace specgen {

class ProgressBar {
 public:
  enum class Unit { kBytes, kItems };
  struct Options {
    Unit unit = Unit::kBytes;
    double delay_s = 1.0;            // nothing is drawn before the work has run this long
    double redraw_interval_s = 0.1;  // at most this often on a terminal
    int bar_width = 24;
    // Where text goes; empty: stderr (flushed per write).
    std::function<void(std::string_view)> write;
    // Whether the output is a terminal; -1: isatty(stderr) when `write` is empty, else false.
    int terminal = -1;
    // Monotonic seconds; empty: std::chrono::steady_clock.
    std::function<double()> clock;
  };

  ProgressBar(std::string label, uint64_t total, Options options);
  ProgressBar(std::string label, uint64_t total) : ProgressBar(std::move(label), total, Options()) {}
  ~ProgressBar();  // Finish()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void Update(uint64_t done);  // absolute progress, in units of `total`
  void Add(uint64_t delta);
  void SetTotal(uint64_t total);
  // A short note after the figures, e.g. "layer 3/28" (replaces the previous one).
  void SetDetail(std::string detail);
  // Prints `line` (and a newline) to the bar's stream without garbling the bar: on a terminal a
  // drawn bar is blanked first and redrawn at the next update.
  void Note(std::string_view line);
  // Ends the report: on a terminal, the last state and a newline (if anything was drawn); elsewhere
  // the one summary line (if the work took longer than the delay and completed). Idempotent.
  void Finish();

  // The reporter as the `void(size_t done, size_t total)` callback that loaders and uploaders take;
  // it must not outlive the ProgressBar.
  std::function<void(size_t done, size_t total)> Callback();

  // The text of the bar line for the state at time `now` (no carriage return), for tests.
  std::string Render(double now) const;

 private:
  void MaybeDraw(bool force);  // with mu_ held
  void Emit(std::string_view text) const;
  std::string Amount(uint64_t v) const;

  const std::string label_;
  Options options_;
  bool terminal_ = false;
  mutable std::mutex mu_;
  uint64_t total_ = 0;
  uint64_t done_ = 0;
  std::string detail_;
  double start_ = 0;
  double last_draw_ = -1;
  bool drawn_ = false;
  bool finished_ = false;
  size_t last_width_ = 0;
};

}  // namespace specgen
