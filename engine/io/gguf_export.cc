#include "engine/io/gguf_export.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/core/quant.h"
#include "engine/core/status_macros.h"
#include "engine/io/model_loader.h"
#include "engine/io/row_convert.h"

namespace specgen {
namespace {

bool IsExpertRole(Role r) { return IsPerExpertRole(r); }

// Runs fn(i) for i in [0, n) on `threads` threads; the first error wins.
absl::Status ParallelFor(int64_t n, int threads, const std::function<absl::Status(int64_t)>& fn) {
  int t = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(t, n)));
  std::atomic<int64_t> next{0};
  std::mutex mu;
  absl::Status error;
  auto worker = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n;) {
      absl::Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (error.ok()) error = s;
        next.store(n);
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < t; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& th : pool) th.join();
  return error;
}

// Converts a [rows, cols] tensor to `dst_type` into `dst`, taking row r from source row
// source_row(r) (identity unless permuting Q/K).
// `rows_done(bytes)`: output bytes of a block of rows just converted (from the conversion's threads;
// may be empty), so that a large tensor shows progress while it converts, not only once it is done.
absl::Status ConvertTensor(const TensorView& src, DType dst_type, uint8_t* dst, int threads,
                           const std::function<int64_t(int64_t)>& source_row,
                           const std::function<void(size_t bytes)>& rows_done) {
  const int64_t rows = src.rows(), cols = src.cols();
  ASSIGN_OR_RETURN(size_t src_row_bytes, RowBytes(src.dtype, cols));
  ASSIGN_OR_RETURN(size_t dst_row_bytes, RowBytes(dst_type, cols));
  const auto* in = static_cast<const uint8_t*>(src.data);
  constexpr int64_t kRowsPerTask = 64;
  return ParallelFor((rows + kRowsPerTask - 1) / kRowsPerTask, threads, [&](int64_t task) {
    std::vector<float> row(cols);
    const int64_t end = std::min(rows, (task + 1) * kRowsPerTask);
    for (int64_t r = task * kRowsPerTask; r < end; ++r) {
      const int64_t from = source_row ? source_row(r) : r;
      RETURN_IF_ERROR(RowToF32(src.dtype, in + from * src_row_bytes, cols, row.data()));
      RETURN_IF_ERROR(RowFromF32(dst_type, row.data(), cols, dst + r * dst_row_bytes));
    }
    if (rows_done) rows_done(static_cast<size_t>(end - task * kRowsPerTask) * dst_row_bytes);
    return absl::OkStatus();
  });
}

std::vector<int64_t> Reversed(const TensorView& v) {
  std::vector<int64_t> ne;
  for (int i = v.ndim - 1; i >= 0; --i) ne.push_back(v.shape[i]);
  return ne;
}

// glm4moe / gpt-oss metadata as llama.cpp's converter writes it. What llama.cpp has no key for and
// specgen can run differently (gpt-oss's swiglu limit, a sliding pattern other than every even layer,
// shared experts not a multiple of the expert width) is refused or written under specgen's own key.
absl::Status SetGlmOrGptOssKeys(const ModelSpec& spec, const std::string& path, GgufWriter& w) {
  if (spec.arch != Arch::kGlm4Moe && spec.arch != Arch::kGptOss) return absl::OkStatus();
  const std::string arch(GgufArchName(spec.arch));
  auto key = [&](std::string_view suffix) { return Cat(arch, ".", suffix); };
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.SetU32(key("expert_feed_forward_length"), u32(spec.expert_ffn_dim));
  if (spec.arch == Arch::kGptOss) {
    if (spec.swiglu_limit != 7.0f) w.SetF32(key("swiglu_limit"), spec.swiglu_limit);
    w.SetU32(key("attention.sliding_window"), u32(spec.sliding_window));
    for (int64_t l = 0; l < spec.n_layers; ++l) {
      if (spec.sliding_window > 0 && spec.is_swa(l) != (l % 2 == 0)) {
        return InvalidArgument(path, ": gpt-oss GGUF files slide every even layer; layer ", l, " of this model ",
                               spec.is_swa(l) ? "slides" : "does not");
      }
    }
    return absl::OkStatus();
  }
  int64_t dense = 0;
  while (dense < spec.n_layers && !spec.layer_is_moe[dense]) ++dense;
  for (int64_t l = dense; l < spec.n_layers; ++l) {
    if (!spec.layer_is_moe[l]) return InvalidArgument(path, ": glm4moe GGUF files hold dense layers first only");
  }
  if (spec.expert_ffn_dim <= 0 || spec.shared_expert_ffn_dim % spec.expert_ffn_dim != 0 || spec.shared_expert_gate) {
    return InvalidArgument(path, ": a glm4moe GGUF file holds ungated shared experts as a multiple of the expert width");
  }
  w.SetU32(key("leading_dense_block_count"), u32(dense));
  w.SetU32(key("expert_shared_count"), u32(spec.shared_expert_ffn_dim / spec.expert_ffn_dim));
  w.SetU32(key("expert_gating_func"), 2);  // sigmoid
  w.SetBool(key("expert_weights_norm"), spec.router_norm == RouterNorm::kSigmoidTopKRenormalize);
  w.SetF32(key("expert_weights_scale"), spec.routed_scale);
  w.SetU32(key("expert_group_count"), u32(spec.n_expert_groups));
  w.SetU32(key("expert_group_used_count"), u32(spec.n_groups_used));
  w.SetU32(key("nextn_predict_layers"), 0);
  return absl::OkStatus();
}

}  // namespace

std::string_view GgufArchName(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
    case Arch::kMixtral: return "llama";
    case Arch::kQwen3: return "qwen3";
    case Arch::kQwen3Moe: return "qwen3moe";
    case Arch::kGlm4Moe: return "glm4moe";
    case Arch::kGptOss: return "gpt-oss";
  }
  return "llama";
}

std::vector<std::string> LlamaCppDifferences(const ModelSpec& spec) {
  std::vector<std::string> out;
  if (!spec.is_moe()) return out;
  const std::string arch(GgufArchName(spec.arch));
  std::string dense;
  int n_dense = 0;
  for (size_t l = 0; l < spec.layer_is_moe.size(); ++l) {
    if (spec.layer_is_moe[l]) continue;
    if (n_dense++ < 8) dense += Cat(dense.empty() ? "" : ", ", l);
  }
  if (n_dense > 0) {
    out.push_back(Cat("llama.cpp will not run this file as specgen does: ", n_dense, " of ", spec.n_layers,
                      " layers are dense (", dense, n_dense > 8 ? ", ..." : "", ") and llama.cpp's ", arch,
                      " needs a router and experts in every layer"));
  }
  if (spec.arch == Arch::kQwen3Moe && spec.router_norm == RouterNorm::kSoftmaxThenTopK) {
    out.push_back(Cat("llama.cpp will not run this file as specgen does: ", arch,
                      ".expert_weights_norm = false (top-k router weights not renormalized) and llama.cpp's ",
                      arch, " always renormalizes them"));
  }
  return out;
}

int64_t InterleavedSourceRow(int64_t r, int64_t head_dim) {
  // Within a head, interleaved row 2i is rotate-half row i and row 2i+1 is row i + head_dim/2.
  const int64_t half = head_dim / 2;
  const int64_t head = r / head_dim, within = r % head_dim;
  return head * head_dim + (within % 2) * half + within / 2;
}

absl::Status ExportGguf(const ModelSpec& spec, const WeightSet& weights, const std::string& path,
                        const GgufExportOptions& opt) {
  ExportType type;
  if (opt.type) {
    type = *opt.type;
  } else {
    ASSIGN_OR_RETURN(type, ExportTypeOf(opt.dtype));
  }
  RETURN_IF_ERROR(Validate(spec, path));
  RETURN_IF_ERROR(weights.Validate(spec, path));
  RETURN_IF_ERROR(CheckOutputPath(path, opt.output));  // before the conversion, not after
  const std::string arch(GgufArchName(spec.arch));
  const bool permute_qk = arch == "llama" && spec.rope_style == RopeStyle::kRotateHalf;

  GgufWriter w;
  w.SetString("general.architecture", arch);
  w.SetString("general.name", spec.name);
  if (Info(type.base).quantized) w.SetU32("general.quantization_version", 2);
  if (type.llama_ftype >= 0) w.SetU32("general.file_type", static_cast<uint32_t>(type.llama_ftype));
  auto key = [&](std::string_view suffix) { return Cat(arch, ".", suffix); };
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.SetU32(key("context_length"), u32(spec.context_length));
  w.SetU32(key("embedding_length"), u32(spec.hidden));
  w.SetU32(key("block_count"), u32(spec.n_layers));
  // Mixtral files carry the per-expert width here (llama.cpp reads it so).
  w.SetU32(key("feed_forward_length"), u32(spec.arch == Arch::kMixtral ? spec.expert_ffn_dim : spec.ffn_dim));
  w.SetU32(key("attention.head_count"), u32(spec.n_heads));
  w.SetU32(key("attention.head_count_kv"), u32(spec.n_kv_heads));
  w.SetU32(key("attention.key_length"), u32(spec.head_dim));
  w.SetU32(key("attention.value_length"), u32(spec.head_dim));
  w.SetF32(key("attention.layer_norm_rms_epsilon"), spec.rms_eps);
  w.SetF32(key("rope.freq_base"), spec.rope_theta);
  w.SetU32(key("rope.dimension_count"), u32(spec.rotary_dim()));
  w.SetU32(key("vocab_size"), u32(spec.vocab_size));
  if (spec.is_moe()) {
    w.SetU32(key("expert_count"), u32(spec.n_experts));
    w.SetU32(key("expert_used_count"), u32(spec.n_experts_used));
    if (spec.arch == Arch::kQwen3Moe) {
      w.SetU32(key("expert_feed_forward_length"), u32(spec.expert_ffn_dim));
      w.SetBool(key("expert_weights_norm"), spec.router_norm != RouterNorm::kSoftmaxThenTopK);
    }
  }
  RETURN_IF_ERROR(SetGlmOrGptOssKeys(spec, path, w));
  // llama.cpp refuses a file without tokenizer.ggml.model; "none" is its own writers' word for "no
  // vocabulary". A tokenizer added below (add_metadata) replaces it.
  w.SetString("tokenizer.ggml.model", "none");
  if (spec.bos_token_id >= 0) w.SetU32("tokenizer.ggml.bos_token_id", u32(spec.bos_token_id));
  if (spec.eos_token_id >= 0) w.SetU32("tokenizer.ggml.eos_token_id", u32(spec.eos_token_id));
  for (const auto& [k, v] : opt.extra_metadata) w.Set(k, v);
  if (opt.add_metadata) RETURN_IF_ERROR(opt.add_metadata(&w));

  std::vector<std::unique_ptr<uint8_t[]>> buffers;  // converted tensors, alive until Write returns
  auto storage_quiet = [&](const WeightKey& k, int64_t cols) { return ChooseTensorType(type, spec, k, cols).dtype; };
  int fallbacks = 0;
  auto storage = [&](const WeightKey& k, int64_t cols, std::string_view name) {
    const TensorTypeChoice c = ChooseTensorType(type, spec, k, cols);
    if (c.fell_back && opt.note && fallbacks < 3) {  // the first few by name, then a count
      opt.note(Cat(name, ": row of ", cols, " is not a multiple of the ", Name(c.wanted), " block size ",
                   Info(c.wanted).block_elems, "; written as ", Name(c.dtype)));
    }
    fallbacks += c.fell_back;
    return c.dtype;
  };

  // Output bytes of every tensor, for the progress report.
  size_t total_bytes = 0, done_bytes = 0;
  if (opt.progress) {
    for (const ExpectedTensor& e : ExpectedTensors(spec)) {
      const int64_t cols = e.shape.back(), rows = e.shape.size() == 2 ? e.shape[0] : 1;
      absl::StatusOr<size_t> b = TensorBytes(storage_quiet(e.key, cols), cols, rows);
      if (b.ok()) total_bytes += *b;
    }
  }
  // Progress comes per block of rows, from the conversion's threads: serialized here so that `done`
  // only grows, and passed on each time another 1/kProgressSteps of the total is done (or a tensor
  // ends), so that a 150k-row embedding moves the bar while a 100-tensor layer does not flood it.
  constexpr size_t kProgressSteps = 500;
  std::mutex progress_mu;
  size_t reported_bytes = 0;
  auto report = [&](int64_t layer, size_t bytes, bool tensor_end) {
    if (!opt.progress) return;
    std::lock_guard lock(progress_mu);
    done_bytes += bytes;
    if (!tensor_end && (done_bytes - reported_bytes) * kProgressSteps < total_bytes) return;
    reported_bytes = done_bytes;
    opt.progress(layer, done_bytes, total_bytes);
  };
  auto advance = [&](int64_t layer, size_t bytes) { report(layer, bytes, true); };
  auto within = [&](int64_t layer) {
    if (!opt.progress) return std::function<void(size_t)>();
    return std::function<void(size_t)>([&report, layer](size_t bytes) { report(layer, bytes, false); });
  };

  for (const ExpectedTensor& e : ExpectedTensors(spec)) {
    const WeightKey& k = e.key;
    if (IsExpertRole(k.role) && k.expert > 0) continue;  // written stacked with expert 0
    const std::string name = GgufTensorName(spec, k);
    ASSIGN_OR_RETURN(TensorView v, weights.Get(k));
    // MXFP4 tensors (gpt-oss's experts as shipped, synth's) stay MXFP4 under a quantized type, as
    // llama.cpp keeps them: requantizing 4-bit values only loses.
    const DType out = v.dtype == DType::kMXFP4 && Info(type.base).quantized ? DType::kMXFP4 : storage(k, v.cols(), name);
    if (!IsExpertRole(k.role)) {
      const bool permute = permute_qk && (k.role == Role::kAttnQ || k.role == Role::kAttnK);
      if (out == v.dtype && !permute) {
        RETURN_IF_ERROR(w.AddTensor(name, Reversed(v), out, v.data, v.bytes));
        advance(k.layer, v.bytes);
        continue;
      }
      ASSIGN_OR_RETURN(size_t bytes, TensorBytes(out, v.cols(), v.rows()));
      buffers.push_back(std::make_unique<uint8_t[]>(bytes));
      std::function<int64_t(int64_t)> map;
      if (permute) map = [&](int64_t r) { return InterleavedSourceRow(r, spec.head_dim); };
      RETURN_IF_ERROR(ConvertTensor(v, out, buffers.back().get(), opt.threads, map, within(k.layer)));
      RETURN_IF_ERROR(w.AddTensor(name, Reversed(v), out, buffers.back().get(), bytes));
      advance(k.layer, 0);  // its bytes came block by block
      continue;
    }
    // Stacked experts: ne = [cols, rows, E]. Zero-copy when the experts already lie back to back in
    // the output dtype (synthetic weights, GGUF sources).
    const int64_t E = spec.n_experts;
    ASSIGN_OR_RETURN(size_t per_expert, TensorBytes(out, v.cols(), v.rows()));
    std::vector<TensorView> experts;
    bool contiguous = true;
    for (int x = 0; x < E; ++x) {
      ASSIGN_OR_RETURN(TensorView ev, weights.Get({k.role, k.layer, x}));
      contiguous = contiguous && ev.dtype == out &&
                   static_cast<const uint8_t*>(ev.data) ==
                       static_cast<const uint8_t*>(v.data) + per_expert * static_cast<size_t>(x);
      experts.push_back(ev);
    }
    std::vector<int64_t> ne = v.ndim == 1 ? std::vector<int64_t>{v.cols(), E} : std::vector<int64_t>{v.cols(), v.rows(), E};
    if (contiguous) {
      RETURN_IF_ERROR(w.AddTensor(name, ne, out, v.data, per_expert * static_cast<size_t>(E)));
      advance(k.layer, per_expert * static_cast<size_t>(E));
      continue;
    }
    buffers.push_back(std::make_unique<uint8_t[]>(per_expert * static_cast<size_t>(E)));
    uint8_t* dst = buffers.back().get();
    for (int x = 0; x < E; ++x) {
      RETURN_IF_ERROR(ConvertTensor(experts[x], out, dst + per_expert * x, opt.threads, nullptr, within(k.layer)));
      advance(k.layer, 0);
    }
    RETURN_IF_ERROR(w.AddTensor(name, ne, out, dst, per_expert * static_cast<size_t>(E)));
  }
  if (fallbacks > 0 && opt.note) {
    opt.note(Cat(fallbacks, " tensor(s) written in a smaller-block type than ", type.name,
                 " chose, their rows not being a multiple of its block"));
  }
  // RoPE scaling as llama.cpp's converter writes it: llama3 (and factors read from a GGUF) as the
  // rope_freqs.weight divisors, linear as rope.scaling.type/factor.
  const RopeScaling& rs = spec.rope_scaling;
  if (rs.kind == RopeScalingKind::kLinear) {
    w.SetString(key("rope.scaling.type"), "linear");
    w.SetF32(key("rope.scaling.factor"), rs.factor);
  }
  if (rs.kind == RopeScalingKind::kYarn) {  // llama.cpp's keys; truncation only where it differs
    w.SetString(key("rope.scaling.type"), "yarn");
    w.SetF32(key("rope.scaling.factor"), rs.factor);
    w.SetU32(key("rope.scaling.original_context_length"), u32(rs.original_context_length));
    w.SetF32(key("rope.scaling.yarn_beta_fast"), rs.beta_fast);
    w.SetF32(key("rope.scaling.yarn_beta_slow"), rs.beta_slow);
    if (rs.attention_factor > 0.0f) w.SetF32(key("rope.scaling.attn_factor"), rs.attention_factor);
    if (rs.truncate != (spec.arch != Arch::kGptOss)) w.SetBool(key("rope.scaling.yarn_truncate"), rs.truncate);
  }
  std::vector<float> freq_factors = rs.freq_factors;
  if (rs.kind == RopeScalingKind::kLlama3) {
    std::vector<float> llama3 = Llama3FreqFactors(spec.rope_theta, spec.head_dim, rs);
    if (freq_factors.empty()) freq_factors.assign(llama3.size(), 1.0f);
    for (size_t j = 0; j < llama3.size(); ++j) freq_factors[j] *= llama3[j];
  }
  if (!freq_factors.empty()) {
    const size_t bytes = freq_factors.size() * sizeof(float);
    buffers.push_back(std::make_unique<uint8_t[]>(bytes));
    std::memcpy(buffers.back().get(), freq_factors.data(), bytes);
    RETURN_IF_ERROR(w.AddTensor("rope_freqs.weight", {static_cast<int64_t>(freq_factors.size())}, DType::kF32,
                                buffers.back().get(), bytes));
  }
  RETURN_IF_ERROR(w.Write(path, 32, opt.output, opt.write_progress));
  if (opt.note) {
    for (const std::string& line : LlamaCppDifferences(spec)) opt.note(line);
  }
  return absl::OkStatus();
}

}  // namespace specgen
