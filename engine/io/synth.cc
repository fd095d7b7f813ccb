#include "engine/io/synth.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <tuple>

#include "engine/core/byte_size.h"
#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "engine/core/status_macros.h"
#include "engine/io/row_convert.h"

namespace specgen {
namespace {

ModelSpec Qwen3Moe(std::string name, int64_t layers, int64_t D, int64_t H, int64_t Hkv, int64_t E,
                   int64_t k, int64_t F, int64_t Fd) {
  ModelSpec s;
  s.arch = Arch::kQwen3Moe;
  s.name = std::move(name);
  s.vocab_size = 151936;
  s.hidden = D;
  s.n_layers = layers;
  s.n_heads = H;
  s.n_kv_heads = Hkv;
  s.head_dim = 128;
  s.ffn_dim = Fd;
  s.n_experts = E;
  s.n_experts_used = k;
  s.expert_ffn_dim = F;
  s.layer_is_moe.assign(layers, true);
  s.router_norm = RouterNorm::kSoftmaxTopKRenormalize;
  s.qk_norm = true;
  s.rms_eps = 1e-6f;
  s.rope_theta = 1e6f;
  s.rope_style = RopeStyle::kRotateHalf;
  s.context_length = 40960;
  s.bos_token_id = 151643;
  s.eos_token_id = 151645;
  return s;
}

ModelSpec Qwen3Dense(std::string name, int64_t layers, int64_t D, int64_t H, int64_t Hkv, int64_t Fd) {
  ModelSpec s = Qwen3Moe(std::move(name), layers, D, H, Hkv, 0, 0, 0, Fd);
  s.arch = Arch::kQwen3;
  s.layer_is_moe.assign(layers, false);
  s.router_norm = ModelSpec().router_norm;  // no router: the default, as every loader leaves it
  s.tied_embeddings = true;
  return s;
}

// The small test presets: head_dim 16, a 300-token vocabulary, 512 positions, bos 1 / eos 2.
ModelSpec ForTests(ModelSpec s) {
  s.head_dim = 16;
  s.vocab_size = 300;
  s.context_length = 512;
  s.bos_token_id = 1;
  s.eos_token_id = 2;
  return s;
}

// GLM-4.5 family (Glm4MoeForCausalLM config.json): leading dense layers, 1 shared expert, sigmoid
// routing with a selection bias, q/k/v biases, half the head rotated. The trailing next-token
// prediction layer of the published checkpoints is not part of the preset (specgen does not run it).
ModelSpec Glm45(std::string name, int64_t layers, int64_t D, int64_t E, int64_t F, int64_t Fd, int64_t dense,
                float scale, bool qk_norm) {
  ModelSpec s = Qwen3Moe(std::move(name), layers, D, 96, 8, E, 8, F, Fd);
  s.arch = Arch::kGlm4Moe;
  s.vocab_size = 151552;
  for (int64_t l = 0; l < dense; ++l) s.layer_is_moe[l] = false;
  s.router_norm = RouterNorm::kSigmoidTopKRenormalize;
  s.expert_selection_bias = true;
  s.routed_scale = scale;
  s.shared_expert_ffn_dim = F;
  s.attn_qkv_bias = true;
  s.qk_norm = qk_norm;
  s.rope_dim = 64;  // partial_rotary_factor 0.5 of head_dim 128
  s.rms_eps = 1e-5f;
  s.context_length = 131072;
  s.bos_token_id = -1;
  s.eos_token_id = 151329;
  return s;
}

// gpt-oss (GptOssForCausalLM config.json): every layer MoE with 4 of E experts, biases everywhere,
// attention sinks, a 128-position window on even layers, YaRN (factor 32 over 4096 positions).
ModelSpec GptOss(std::string name, int64_t layers, int64_t E) {
  ModelSpec s = Qwen3Moe(std::move(name), layers, 2880, 64, 8, E, 4, 2880, 2880);
  s.arch = Arch::kGptOss;
  s.vocab_size = 201088;
  s.head_dim = 64;
  s.qk_norm = false;
  s.router_norm = RouterNorm::kTopKThenSoftmax;
  s.router_bias = s.expert_bias = true;
  s.expert_act = FfnActivation::kSwiGluClamped;
  s.attn_qkv_bias = s.attn_out_bias = s.attn_sinks = true;
  s.sliding_window = 128;
  s.layer_is_swa.assign(layers, false);
  for (int64_t l = 0; l < layers; l += 2) s.layer_is_swa[l] = true;
  s.rope_theta = 150000.0f;
  s.rope_scaling.kind = RopeScalingKind::kYarn;
  s.rope_scaling.factor = 32.0f;
  s.rope_scaling.original_context_length = 4096;
  s.rope_scaling.truncate = false;
  s.rms_eps = 1e-5f;
  s.context_length = 131072;
  s.bos_token_id = 199998;
  s.eos_token_id = 200002;
  return s;
}

struct Preset {
  const char* name;
  const char* description;
  ModelSpec (*make)();
};

// Shapes from the published config.json files (docs/formats.md §4, §7).
const Preset kPresets[] = {
    {"qwen3-30b-a3b", "Qwen3-30B-A3B: 48 layers, 128 experts top-8, 30.5B params, 3.3B active",
     [] { return Qwen3Moe("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 8, 768, 6144); }},
    {"qwen3-235b-a22b", "Qwen3-235B-A22B: 94 layers, 128 experts top-8, 235B params, 22B active",
     [] { return Qwen3Moe("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 8, 1536, 12288); }},
    {"mixtral-8x7b", "Mixtral-8x7B: 32 layers, 8 experts top-2, 46.7B params, 12.9B active",
     [] {
       ModelSpec s = Qwen3Moe("mixtral-8x7b", 32, 4096, 32, 8, 8, 2, 14336, 14336);
       s.arch = Arch::kMixtral;
       s.vocab_size = 32000;
       s.router_norm = RouterNorm::kTopKThenSoftmax;
       s.qk_norm = false;
       s.rms_eps = 1e-5f;
       s.context_length = 32768;
       s.bos_token_id = 1;
       s.eos_token_id = 2;
       return s;
     }},
    // OLMoE is not one of our architectures; this is its shape as a qwen3moe model. Differences from
    // the real model: OLMoE's q/k norms span the whole projection ([H*d], [Hkv*d]) where qwen3moe's
    // are per head ([d]), so this preset has 2*(4096 - 256)*16 fewer norm parameters.
    {"olmoe-1b-7b", "OLMoE-1B-7B shapes as a qwen3moe model: 16 layers, 64 experts top-8, 6.9B params",
     [] {
       ModelSpec s = Qwen3Moe("olmoe-1b-7b", 16, 2048, 16, 16, 64, 8, 1024, 1024);
       s.vocab_size = 50304;
       s.router_norm = RouterNorm::kSoftmaxThenTopK;  // norm_topk_prob = false
       s.rms_eps = 1e-5f;
       s.rope_theta = 10000.0f;
       s.context_length = 4096;
       s.bos_token_id = -1;
       s.eos_token_id = 50279;
       return s;
     }},
    {"glm-4.5-air", "GLM-4.5-Air: 46 layers (1 dense), 128 experts top-8 + 1 shared, 106B params, 12B active",
     [] { return Glm45("glm-4.5-air", 46, 4096, 128, 1408, 10944, 1, 1.0f, false); }},
    {"glm-4.5", "GLM-4.5 (and 4.6/4.7 shapes): 92 layers (3 dense), 160 experts top-8 + 1 shared, 355B params",
     [] { return Glm45("glm-4.5", 92, 5120, 160, 1536, 12288, 3, 2.5f, true); }},
    {"gpt-oss-120b", "gpt-oss-120b: 36 layers, 128 experts top-4 (MXFP4 under quantized types), 117B params",
     [] { return GptOss("gpt-oss-120b", 36, 128); }},
    {"gpt-oss-20b", "gpt-oss-20b: 24 layers, 32 experts top-4 (MXFP4 under quantized types), 21B params",
     [] { return GptOss("gpt-oss-20b", 24, 32); }},
    {"qwen3-0.6b", "Qwen3-0.6B: dense, 28 layers, tied embeddings (a draft for Qwen3 targets)",
     [] { return Qwen3Dense("qwen3-0.6b", 28, 1024, 16, 8, 3072); }},
    {"qwen3-1.7b", "Qwen3-1.7B: dense, 28 layers, tied embeddings (a draft for Qwen3 targets)",
     [] { return Qwen3Dense("qwen3-1.7b", 28, 2048, 16, 8, 6144); }},
    {"tiny-moe", "tests: qwen3moe, 3 layers, D=64, 8 experts top-2, vocab 300",
     [] { return ForTests(Qwen3Moe("tiny-moe", 3, 64, 4, 2, 8, 2, 32, 96)); }},
    {"tiny-dense", "tests: qwen3, 2 layers, D=64, tied embeddings, vocab 300",
     [] { return ForTests(Qwen3Dense("tiny-dense", 2, 64, 4, 2, 128)); }},
    {"tiny-glm4moe", "tests: glm4moe, 3 layers (1 dense), D=64, 8 experts in 2 groups top-2 + shared, YaRN",
     [] {
       ModelSpec s = ForTests(Glm45("tiny-glm4moe", 3, 64, 8, 32, 96, 1, 2.0f, true));
       s.n_heads = 4;
       s.n_kv_heads = 2;
       s.rope_dim = 8;
       s.n_expert_groups = 2;
       s.n_experts_used = 2;
       s.rope_scaling.kind = RopeScalingKind::kYarn;
       s.rope_scaling.factor = 4.0f;
       s.rope_scaling.original_context_length = 64;
       return s;
     }},
    {"tiny-gptoss", "tests: gpt-oss, 3 layers, D=64, 4 experts top-2, window 4 on even layers, sinks, YaRN",
     [] {
       ModelSpec s = ForTests(GptOss("tiny-gptoss", 3, 4));
       s.hidden = 64;
       s.n_heads = 4;
       s.n_kv_heads = 2;
       s.head_dim = 16;
       s.ffn_dim = s.expert_ffn_dim = 32;
       s.n_experts_used = 2;
       s.sliding_window = 4;
       s.rope_scaling.original_context_length = 64;
       s.rope_scaling.factor = 8.0f;
       s.swiglu_limit = 1.0f;  // the random activations reach it
       return s;
     }},
};

uint64_t Mix64(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t TensorKey(uint64_t seed, uint64_t tensor) { return Mix64(Mix64(seed) ^ (tensor * kGolden + 1)); }

// Fills n uniform [-1, 1) values of elements [first, first + n) of a tensor with key `key`; two values
// per 64-bit draw.
void FillUniform(uint64_t key, uint64_t first, int64_t n, float scale, float offset, float* out) {
  constexpr float kInv = 1.0f / 2147483648.0f;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t idx = first + static_cast<uint64_t>(i);
    const uint64_t r = Mix64(key + (idx >> 1) * kGolden);
    const auto bits = static_cast<int32_t>((idx & 1) ? (r >> 32) : (r & 0xffffffffull));
    out[i] = offset + scale * (static_cast<float>(bits) * kInv);
  }
}

// Amplitude and centre of a tensor's uniform values: norms near 1, matrices ±1/sqrt(fan_in) so a
// product keeps the scale of its input, embeddings ±1, routers with unit-variance logits so that
// routing is decisive rather than uniform.
void ScaleFor(Role role, int64_t fan_in, float* scale, float* offset) {
  *offset = 0.0f;
  if (IsNormRole(role)) {
    *offset = 1.0f;
    *scale = 0.05f;
    return;
  }
  if (IsVectorRole(role)) {  // biases and sinks: small, around 0
    *scale = 0.1f;
    return;
  }
  switch (role) {
    case Role::kTokenEmbd:
      *scale = 1.0f;
      return;
    case Role::kRouter:
      *scale = std::sqrt(3.0f / static_cast<float>(fan_in));
      return;
    default:
      *scale = 1.0f / std::sqrt(static_cast<float>(fan_in));
      return;
  }
}

// Random K-quant blocks, written directly: llama.cpp's K-quant search (make_qkx2_quants) costs about
// a microsecond an element, minutes for a 30B preset, where random weights need no search. Every
// sub-block gets the same scale (and min) and uniform random quants, the block scale chosen so that the
// values are centred and span [-scale, scale] as the f32 generator's do. Deterministic per (key, row).
bool IsRandomBlockType(DType t) { return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K; }

void RandomKQuantRow(DType t, uint64_t key, uint64_t row, int64_t cols, float scale, uint8_t* dst) {
  const int64_t blocks = cols / 256;
  const size_t block_bytes = static_cast<size_t>(Info(t).block_bytes);
  uint64_t state = Mix64(key ^ Mix64(row + 1));
  auto fill_random = [&state](uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
      state += kGolden;
      const uint64_t r = Mix64(state);
      std::memcpy(p + i, &r, std::min<size_t>(8, n - i));
    }
  };
  auto store_half = [](uint8_t* p, float v) {
    const uint16_t h = F32ToF16(v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = dst + static_cast<size_t>(b) * block_bytes;
    if (t == DType::kQ6_K) {  // ql[128] qh[64] scales[16] (int8) d: y = d·sc·(q − 32), q in 0..63
      fill_random(blk, 192);
      std::memset(blk + 192, 32, 16);
      store_half(blk + 208, scale / (32.0f * 32.0f));
      continue;
    }
    // Q4_K / Q5_K: d dmin scales[12] [qh[32]] qs[128]: y = d·sc·q − dmin·m; sc = m = 15 in every
    // sub-block (6-bit fields; below 16, so their high bits are 0), dmin·15 = d·15·qmax/2 centres them.
    const float qmax = t == DType::kQ4_K ? 15.0f : 31.0f;
    const float d = scale / (15.0f * qmax / 2.0f);
    store_half(blk, d);
    store_half(blk + 2, d * qmax / 2.0f);
    std::memset(blk + 4, 15, 8);          // sc of sub-blocks 0..3, then m of 0..3
    std::memset(blk + 12, 15 | (15 << 4), 4);  // sc and m of sub-blocks 4..7
    fill_random(blk + 16, block_bytes - 16);
  }
}

}  // namespace

DType SynthTensorType(const ExportType& type, const ModelSpec& spec, const WeightKey& key, int64_t row_len) {
  const bool expert_matrix =
      key.role == Role::kExpertGate || key.role == Role::kExpertUp || key.role == Role::kExpertDown;
  if (spec.arch == Arch::kGptOss && expert_matrix && Info(type.base).quantized && row_len % 32 == 0) {
    return DType::kMXFP4;
  }
  return ChooseTensorType(type, spec, key, row_len).dtype;
}

namespace {

struct Planned {
  size_t index;        // in ExpectedTensors order: the generator's tensor number
  DType dtype;
  size_t offset;       // in the buffer
  size_t bytes;
};

absl::StatusOr<std::vector<Planned>> Plan(const ModelSpec& spec, const std::vector<ExpectedTensor>& expected,
                                          const ExportType& type, size_t* total) {
  // Buffer order: by layer, then role, then expert, so that one role's experts of a layer are
  // adjacent (a stacked GGUF tensor can be written from them without a copy).
  std::vector<size_t> order(expected.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const WeightKey& x = expected[a].key;
    const WeightKey& y = expected[b].key;
    return std::tie(x.layer, x.role, x.expert) < std::tie(y.layer, y.role, y.expert);
  });
  std::vector<Planned> plan;
  size_t offset = 0;
  for (size_t i : order) {
    const ExpectedTensor& e = expected[i];
    const int64_t cols = e.shape.back();
    const int64_t rows = e.shape.size() == 2 ? e.shape[0] : 1;
    const DType t = SynthTensorType(type, spec, e.key, cols);
    ASSIGN_OR_RETURN(size_t bytes, TensorBytes(t, cols, rows));
    offset = (offset + 63) & ~size_t{63};
    plan.push_back({i, t, offset, bytes});
    offset += bytes;
    if (offset < bytes) return InvalidArgument("synthetic weights: total size overflows");
  }
  *total = offset;
  return plan;
}

}  // namespace

float SynthUniform(uint64_t seed, uint64_t tensor, uint64_t index) {
  float v;
  FillUniform(TensorKey(seed, tensor), index, 1, 1.0f, 0.0f, &v);
  return v;
}

std::vector<SynthPresetInfo> SynthPresets() {
  std::vector<SynthPresetInfo> out;
  for (const Preset& p : kPresets) out.push_back({p.name, p.description});
  return out;
}

absl::StatusOr<ModelSpec> SynthSpec(std::string_view name) {
  std::string names;
  for (const Preset& p : kPresets) {
    if (name == p.name) return p.make();
    names += Cat(names.empty() ? "" : ", ", p.name);
  }
  return NotFound("unknown synthetic preset '", name, "' (presets: ", names, ")");
}

ExportType PureExportType(DType dtype) { return ExportType{std::string(Name(dtype)), dtype, QuantMix::kPure, -1}; }

absl::StatusOr<size_t> SynthBytes(const ModelSpec& spec, const ExportType& type) {
  size_t total = 0;
  ASSIGN_OR_RETURN(std::vector<Planned> plan, Plan(spec, ExpectedTensors(spec), type, &total));
  (void)plan;
  return total;
}

absl::StatusOr<size_t> SynthBytes(const ModelSpec& spec, DType dtype) {
  return SynthBytes(spec, PureExportType(dtype));
}

absl::StatusOr<std::unique_ptr<LoadedModel>> SynthWeights(const ModelSpec& spec, DType dtype,
                                                          uint64_t seed, int threads) {
  return SynthWeights(spec, PureExportType(dtype), seed, threads);
}

absl::StatusOr<std::unique_ptr<LoadedModel>> SynthWeights(
    const ModelSpec& spec, const ExportType& type, uint64_t seed, int threads,
    const std::function<void(size_t done, size_t total)>& progress) {
  RETURN_IF_ERROR(Validate(spec, Cat("synth:", spec.name)));
  const std::vector<ExpectedTensor> expected = ExpectedTensors(spec);
  size_t total = 0;
  ASSIGN_OR_RETURN(std::vector<Planned> plan, Plan(spec, expected, type, &total));
  if (!CanQuantize(type.base)) {
    return InvalidArgument("synth:", spec.name, ": cannot generate weights as ", type.name);
  }

  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0 && static_cast<double>(total) > 0.9 * pages * static_cast<double>(page)) {
    return absl::ResourceExhaustedError(
        Cat("synth:", spec.name, " as ", type.name, " needs ", FormatBytes(total),
            " of weights, more than this machine's memory (",
            FormatBytes(static_cast<double>(pages) * page), ")"));
  }
  const size_t alloc = std::max<size_t>(4096, (total + 4095) & ~size_t{4095});
  void* raw = std::aligned_alloc(4096, alloc);
  if (raw == nullptr) {
    return absl::ResourceExhaustedError(Cat("synth:", spec.name, ": cannot allocate ", FormatBytes(total)));
  }
  std::shared_ptr<void> buffer(raw, std::free);
  auto* base = static_cast<uint8_t*>(raw);

  // Work items: row ranges of about 1M elements, so big and small tensors spread over threads.
  struct Chunk {
    size_t plan_index;
    int64_t row_begin, row_end;
  };
  std::vector<Chunk> chunks;
  for (size_t p = 0; p < plan.size(); ++p) {
    const ExpectedTensor& e = expected[plan[p].index];
    const int64_t cols = e.shape.back();
    const int64_t rows = e.shape.size() == 2 ? e.shape[0] : 1;
    const int64_t step = std::max<int64_t>(1, (int64_t{1} << 20) / cols);
    for (int64_t r = 0; r < rows; r += step) chunks.push_back({p, r, std::min(rows, r + step)});
  }
  int n_threads = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  n_threads = std::max(1, std::min<int>(n_threads, static_cast<int>(chunks.size())));

  std::atomic<size_t> next{0};
  std::atomic<size_t> done_bytes{0};
  std::mutex error_mu, progress_mu;
  size_t reported = 0;  // under progress_mu
  absl::Status error;
  auto worker = [&] {
    std::vector<float> row;
    for (size_t c; (c = next.fetch_add(1)) < chunks.size();) {
      const Chunk& ch = chunks[c];
      const Planned& p = plan[ch.plan_index];
      const ExpectedTensor& e = expected[p.index];
      const int64_t cols = e.shape.back();
      float scale, offset;
      ScaleFor(e.key.role, cols, &scale, &offset);
      const uint64_t key = TensorKey(seed, p.index);
      const size_t row_bytes = p.bytes / static_cast<size_t>(e.shape.size() == 2 ? e.shape[0] : 1);
      row.resize(cols);
      for (int64_t r = ch.row_begin; r < ch.row_end; ++r) {
        if (IsRandomBlockType(p.dtype) && cols % 256 == 0) {
          RandomKQuantRow(p.dtype, key, static_cast<uint64_t>(r), cols, scale, base + p.offset + r * row_bytes);
          continue;
        }
        FillUniform(key, static_cast<uint64_t>(r) * cols, cols, scale, offset, row.data());
        absl::Status s = RowFromF32(p.dtype, row.data(), cols, base + p.offset + r * row_bytes);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (error.ok()) error = s;
          return;
        }
      }
      const size_t chunk_bytes = static_cast<size_t>(ch.row_end - ch.row_begin) * row_bytes;
      const size_t now_done = done_bytes.fetch_add(chunk_bytes) + chunk_bytes;
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mu);
        reported = std::max(reported, now_done);  // threads may finish out of order
        progress(reported, total);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  RETURN_IF_ERROR(error);

  auto model = std::make_unique<LoadedModel>();
  model->spec = spec;
  model->source = Cat("synth:", spec.name);
  for (const Planned& p : plan) {
    const ExpectedTensor& e = expected[p.index];
    TensorView v;
    v.dtype = p.dtype;
    v.ndim = static_cast<int>(e.shape.size());
    for (int i = 0; i < v.ndim; ++i) v.shape[i] = e.shape[i];
    v.location = Location::kHost;
    v.data = base + p.offset;
    v.bytes = p.bytes;
    model->weights.Add(e.key, v, KeyString(e.key));
  }
  model->weights.KeepAlive(std::move(buffer));
  return model;
}

}  // namespace specgen
