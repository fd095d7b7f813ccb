// A model's weight bytes as the GPU will hold them, by kind and by layer, from its headers alone: a
// GGUF file's tensor infos, a Hugging Face directory's safetensors headers, or a synth preset's shape
// and weight type (nothing is generated or read). The offload planner places these bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/io/weight_set.h"
#include "engine/model/model_spec.h"

namespace specgen::moe {

// The dtype a weight stored as `stored` has on the GPU: f32/f16/bf16 as stored; Q4_0, Q8_0, Q4_K, Q5_K,
// Q6_K and MXFP4 stay packed (their GPU kernels read the blocks, engine/backend/device_form.h); every
// other quantized type is expanded to bf16 at upload. A streamed weight crosses PCIe in this form too,
// so it is also its host-arena form.
DType DeviceDType(DType stored);

// One layer's weights on the GPU, in bytes.
struct LayerBytes {
  bool moe = false;
  size_t norms = 0;      // attention, FFN and q/k norm gains
  size_t attention = 0;  // Q, K, V and output projections
  size_t router = 0;     // MoE layers only
  size_t dense_ffn = 0;  // dense layers only: gate + up + down
  size_t shared_experts = 0;  // MoE layers' shared experts (and their gate): resident, never streamed
  // One expert's gate + up + down (MoE layers; a layer's experts all have one dtype per role).
  size_t expert = 0;
  // Every expert's biases (gpt-oss: E × (2F + D) values a layer): resident whether or not the experts
  // stream, as the Transformer uploads them (small, and every pass reads the routed ones).
  size_t expert_biases = 0;
  // The same as a streamed expert lies in a cache slot: gate, up and down each from a 256-byte
  // boundary (moe/expert_layout.h).
  size_t expert_slot = 0;
};

struct ModelBytes {
  ModelSpec spec;
  std::string source;
  size_t embedding = 0;    // token_embd
  size_t head = 0;         // output projection (0 when tied to the embedding) and output norm
  std::vector<LayerBytes> layers;
  size_t stored_total = 0;  // every tensor as the files hold it (host RAM when loaded as stored)
  // Expert bias roles (gate, up, down) the model has: a streamed layer's address tables point at each
  // (moe/expert_cache_tables.h).
  int expert_bias_roles = 0;

  int64_t n_moe_layers() const;
  size_t experts_total() const;   // every expert of every layer (their matrices: what streams)
  size_t largest_expert() const;  // the largest one-expert size over the MoE layers (0 if dense)
  size_t slot_bytes() const;      // a cache slot: the largest expert_slot over the MoE layers (0 if dense)
  size_t device_total() const;    // every weight, as the GPU holds it
};

// One tensor as its headers describe it: key, stored dtype and row-major shape.
struct TensorEntry {
  WeightKey key;
  DType stored;
  std::vector<int64_t> shape;
};

// Sums `tensors` (every tensor ExpectedTensors(spec) lists, each once) into ModelBytes.
absl::StatusOr<ModelBytes> SumModelBytes(const ModelSpec& spec, const std::vector<TensorEntry>& tensors,
                                         std::string source);

// The tensors of a model path (GGUF, HF directory or synth:PRESET[:TYPE[:SEED]]), headers only.
absl::StatusOr<ModelBytes> ReadModelBytes(const std::string& path);

}  // namespace specgen::moe
