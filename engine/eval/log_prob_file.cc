#include "engine/eval/log_prob_file.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "engine/core/status_macros.h"

namespace specgen {
namespace {

static_assert(std::endian::native == std::endian::little, "log-prob files are little-endian");

constexpr uint64_t kHeaderBytes = 4 + 4 + 4 + 4 + 8 + 8;  // magic, version, vocab, window, n_tokens, n_positions
constexpr uint64_t kRecordFixedBytes = 4 * 4;              // nll, min_log_prob, scale, top

uint64_t RecordBytes(uint32_t vocab) { return kRecordFixedBytes + 2 * static_cast<uint64_t>(vocab); }

template <typename T>
void Put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

template <typename T>
T Get(const uint8_t*& p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  p += sizeof(T);
  return v;
}

}  // namespace

absl::StatusOr<LogProbFileWriter> LogProbFileWriter::Create(const std::string& path, const LogProbHeader& header,
                                                            SafeWriteOptions options) {
  if (header.vocab_size == 0) return InvalidArgument(path, ": a log-prob file needs a vocabulary");
  ASSIGN_OR_RETURN(SafeFileWriter file, SafeFileWriter::Create(path, std::move(options)));
  std::vector<uint8_t> head;
  head.insert(head.end(), kLogProbMagic, kLogProbMagic + 4);
  Put<uint32_t>(head, kLogProbVersion);
  Put<uint32_t>(head, header.vocab_size);
  Put<uint32_t>(head, header.window);
  Put<uint64_t>(head, header.tokens.size());
  Put<uint64_t>(head, header.n_positions);
  for (int32_t t : header.tokens) Put<int32_t>(head, t);
  RETURN_IF_ERROR(file.Write(head.data(), head.size()));
  LogProbFileWriter w(std::move(file));
  w.vocab_size_ = header.vocab_size;
  w.n_positions_ = header.n_positions;
  w.path_ = path;
  return w;
}

absl::Status LogProbFileWriter::Append(const LogProbRecord& r) {
  if (r.log_probs.q.size() != vocab_size_) {
    return InvalidArgument(path_, ": a distribution of ", r.log_probs.q.size(), " entries for a vocabulary of ",
                           vocab_size_);
  }
  if (appended_ >= n_positions_) return InvalidArgument(path_, ": more than the ", n_positions_, " positions declared");
  std::vector<uint8_t> rec;
  rec.reserve(RecordBytes(vocab_size_));
  Put<float>(rec, r.nll);
  Put<float>(rec, r.log_probs.min_log_prob);
  Put<float>(rec, r.log_probs.scale);
  Put<int32_t>(rec, r.top);
  const size_t at = rec.size();
  rec.resize(at + 2 * r.log_probs.q.size());
  std::memcpy(rec.data() + at, r.log_probs.q.data(), 2 * r.log_probs.q.size());
  RETURN_IF_ERROR(file_->Write(rec.data(), rec.size()));
  ++appended_;
  return absl::OkStatus();
}

absl::Status LogProbFileWriter::Commit() {
  if (appended_ != n_positions_) {
    return absl::InternalError(Cat(path_, ": ", appended_, " of ", n_positions_, " positions written"));
  }
  return file_->Commit();
}

absl::StatusOr<std::unique_ptr<LogProbFileReader>> LogProbFileReader::Open(const std::string& path) {
  std::unique_ptr<LogProbFileReader> r(new LogProbFileReader());
  r->path_ = path;
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return NotFound(path, ": cannot read (", ec.message(), ")");
  r->in_.open(path, std::ios::binary);
  if (!r->in_) return NotFound(path, ": cannot open");
  uint8_t head[kHeaderBytes];
  if (size < kHeaderBytes || !r->in_.read(reinterpret_cast<char*>(head), kHeaderBytes)) {
    return DataLoss(path, ": not a specgen log-prob file (", size, " bytes, shorter than its header)");
  }
  if (std::memcmp(head, kLogProbMagic, 4) != 0) {
    return DataLoss(path, ": not a specgen log-prob file (no SGLP magic; write one with "
                    "`specgen perplexity --save-logits`)");
  }
  const uint8_t* p = head + 4;
  const uint32_t version = Get<uint32_t>(p);
  if (version != kLogProbVersion) {
    return DataLoss(path, ": log-prob file version ", version, "; this specgen reads version ", kLogProbVersion);
  }
  LogProbHeader& h = r->header_;
  h.vocab_size = Get<uint32_t>(p);
  h.window = Get<uint32_t>(p);
  const uint64_t n_tokens = Get<uint64_t>(p);
  h.n_positions = Get<uint64_t>(p);
  if (h.vocab_size == 0) return DataLoss(path, ": vocabulary size 0");
  // Every count against the bytes that are there, before anything is allocated.
  const uint64_t body = size - kHeaderBytes;
  const uint64_t record = RecordBytes(h.vocab_size);
  if (n_tokens > body / 4 || h.n_positions > (body - 4 * n_tokens) / record ||
      4 * n_tokens + h.n_positions * record != body) {
    return DataLoss(path, ": ", n_tokens, " tokens and ", h.n_positions, " positions of a vocabulary of ",
                    h.vocab_size, " need ", kHeaderBytes, " + 4·", n_tokens, " + ", record, "·", h.n_positions,
                    " bytes, but the file has ", size, " (truncated or corrupt)");
  }
  h.tokens.resize(n_tokens);
  if (!r->in_.read(reinterpret_cast<char*>(h.tokens.data()), static_cast<std::streamsize>(4 * n_tokens))) {
    return DataLoss(path, ": cannot read its tokens");
  }
  for (uint64_t i = 0; i < n_tokens; ++i) {
    if (h.tokens[i] < 0 || static_cast<uint32_t>(h.tokens[i]) >= h.vocab_size) {
      return DataLoss(path, ": token ", i, " is ", h.tokens[i], ", outside the vocabulary of ", h.vocab_size);
    }
  }
  r->buffer_.resize(record);
  return r;
}

absl::Status LogProbFileReader::Next(LogProbRecord* out) {
  if (read_ >= header_.n_positions) {
    return absl::OutOfRangeError(Cat(path_, ": all ", header_.n_positions, " positions were read"));
  }
  if (!in_.read(reinterpret_cast<char*>(buffer_.data()), static_cast<std::streamsize>(buffer_.size()))) {
    return DataLoss(path_, ": cannot read position ", read_);
  }
  const uint8_t* p = buffer_.data();
  out->nll = Get<float>(p);
  out->log_probs.min_log_prob = Get<float>(p);
  out->log_probs.scale = Get<float>(p);
  out->top = Get<int32_t>(p);
  // A NaN or infinite field would turn every statistic it enters into nan (or, through a sort, into a
  // wrong median): a corrupt reference is refused at the position that holds it.
  using Field = std::pair<const char*, float>;
  for (const auto& [field, value] : {Field{"nll", out->nll}, Field{"min_log_prob", out->log_probs.min_log_prob},
                                      Field{"scale", out->log_probs.scale}}) {
    if (!std::isfinite(value)) {
      return DataLoss(path_, ": position ", read_, " has ", field, " = ", value, " (not finite: corrupt file)");
    }
  }
  if (out->log_probs.scale < 0) {
    return DataLoss(path_, ": position ", read_, " has a negative scale ", out->log_probs.scale, " (corrupt file)");
  }
  if (out->top < 0 || static_cast<uint32_t>(out->top) >= header_.vocab_size) {
    return DataLoss(path_, ": position ", read_, " has top token ", out->top, ", outside the vocabulary");
  }
  out->log_probs.q.resize(header_.vocab_size);
  std::memcpy(out->log_probs.q.data(), p, 2 * static_cast<size_t>(header_.vocab_size));
  ++read_;
  return absl::OkStatus();
}

}  // namespace specgen
