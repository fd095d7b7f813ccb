#include "moe/cuda/streamed_experts.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "engine/backend/device_form.h"
#include "moe/expert_cache_tables.h"
#include "engine/core/status_macros.h"
#include "kernels/cuda_check.h"

namespace specgen {
namespace {

// moe/expert_cache_tables.h mirrors these for the planner.
static_assert(moe::kExpertCacheFetchEntries == kernels::kExpertCacheMaxExperts);
static_assert(sizeof(kernels::ExpertCacheState) <= moe::kExpertCacheStateBytes);
static_assert(moe::kArenaAlignment == DeviceArena::kAlignment);
static_assert(moe::kExpertAddressBytes == 3 * sizeof(void*));
static_assert(moe::kExpertBiasAddressBytes == sizeof(void*));

// The device forms every expert of a layer shares (gate/up [ffn, hidden] of one type, down [hidden,
// ffn] of its own, as llama.cpp's _M mixes store them: what the routed experts' kernels take), or an
// error naming the first that differs.
struct LayerForm {
  DeviceForm gate, up, down;
  DType source, down_source;
  int bias_roles = 0;  // roles with biases (each for every expert), in gate, up, down order
  kernels::ElemType bias_type = kernels::ElemType::kF32;
};
absl::StatusOr<LayerForm> FormOf(const ExpertViews& v) {
  const size_t e = v.gate.size();
  if (e == 0 || v.up.size() != e || v.down.size() != e) {
    return InvalidArgument(v.name, ": ", v.gate.size(), " gate, ", v.up.size(), " up and ", v.down.size(),
                           " down expert matrices");
  }
  if (e > static_cast<size_t>(kernels::kExpertCacheMaxExperts)) {
    return InvalidArgument(v.name, ": ", e, " experts; streaming takes at most ", kernels::kExpertCacheMaxExperts);
  }
  LayerForm f;
  f.source = v.gate[0].dtype;
  f.down_source = v.down[0].dtype;
  ASSIGN_OR_RETURN(f.gate, DeviceFormOf(v.gate[0], Cat(v.name, " expert 0 gate")));
  ASSIGN_OR_RETURN(f.up, DeviceFormOf(v.up[0], Cat(v.name, " expert 0 up")));
  ASSIGN_OR_RETURN(f.down, DeviceFormOf(v.down[0], Cat(v.name, " expert 0 down")));
  if (f.up.type != f.gate.type || !kernels::RoutedExpertTypesSupported(f.gate.type, f.down.type) ||
      f.up.rows != f.gate.rows || f.up.cols != f.gate.cols || f.down.rows != f.gate.cols ||
      f.down.cols != f.gate.rows) {
    return absl::UnimplementedError(Cat(v.name, ": expert matrices of these types or shapes cannot be streamed (",
                                        kernels::ElemTypeName(f.gate.type), " gate, ", kernels::ElemTypeName(f.up.type),
                                        " up, ", kernels::ElemTypeName(f.down.type), " down)"));
  }
  // Biases: resident weights, a role's for every expert or none, of one unpacked type (the routed
  // experts' kernels read one), [ffn] for gate and up, [hidden] for down.
  bool typed = false;
  for (const auto& [list, len, what] : {std::tuple{&v.gate_bias, f.gate.rows, "gate"},
                                        std::tuple{&v.up_bias, f.gate.rows, "up"},
                                        std::tuple{&v.down_bias, f.gate.cols, "down"}}) {
    if (list->empty()) continue;
    if (list->size() != e) {
      return InvalidArgument(v.name, ": ", what, " biases for ", list->size(), " of ", e, " experts");
    }
    for (size_t i = 0; i < e; ++i) {
      const Weight* b = (*list)[i];
      if (b == nullptr || b->rows() * b->cols() != len) {
        return InvalidArgument(v.name, " expert ", i, " ", what, " bias: ", b ? b->rows() * b->cols() : 0,
                               " elements where ", len, " are needed");
      }
      const kernels::ElemType t = CudaBackend::Type(*b);
      if (kernels::IsPacked(t) || (typed && t != f.bias_type)) {
        return absl::UnimplementedError(Cat(v.name, " expert ", i, " ", what, " bias: biases of ",
                                            kernels::ElemTypeName(t), " beside ", kernels::ElemTypeName(f.bias_type),
                                            " or block-quantized cannot be streamed"));
      }
      f.bias_type = t;
      typed = true;
    }
    ++f.bias_roles;
  }
  for (size_t i = 0; i < e; ++i) {
    for (const auto& [list, want, what] :
         {std::tuple{&v.gate, &f.gate, "gate"}, std::tuple{&v.up, &f.up, "up"}, std::tuple{&v.down, &f.down, "down"}}) {
      ASSIGN_OR_RETURN(const DeviceForm got, DeviceFormOf((*list)[i], Cat(v.name, " expert ", i, " ", what)));
      if (got.type != want->type || got.rows != want->rows || got.cols != want->cols) {
        return absl::UnimplementedError(
            Cat(v.name, " expert ", i, " ", what, ": a different type or shape from expert 0's; cannot be streamed"));
      }
    }
  }
  return f;
}

}  // namespace

bool CudaStreamedExperts::LayerFetch::Takes(int64_t n_ids) const {
  return n_ids <= owner_->cache_.n_slots || layer_.experts <= owner_->cache_.n_slots;
}

absl::Status CudaStreamedExperts::LayerFetch::Fetch(const int32_t* ids, int n_ids, cudaStream_t stream) const {
  return SPECGEN_CUDA_STATUS(kernels::LaunchExpertCacheFetch(owner_->cache_, layer_, ids, n_ids, kGatherBlocks, stream));
}

absl::StatusOr<std::unique_ptr<CudaStreamedExperts>> CudaStreamedExperts::Create(
    CudaBackend* backend, std::span<const ExpertViews> layers, const ExpertStreamingOptions& options) {
  if (layers.empty()) return InvalidArgument("streamed experts: no layers");
  if (options.cache_slots < 1) {
    return InvalidArgument("streamed experts: ", options.cache_slots, " cache slots (at least 1)");
  }
  std::unique_ptr<CudaStreamedExperts> s(new CudaStreamedExperts(backend));
  std::vector<LayerForm> forms;
  std::vector<ExpertLayerSize> sizes;
  int max_experts = 0;
  for (const ExpertViews& v : layers) {
    ASSIGN_OR_RETURN(LayerForm f, FormOf(v));
    sizes.push_back({static_cast<int64_t>(v.gate.size()), f.gate.bytes, f.up.bytes, f.down.bytes});
    max_experts = std::max(max_experts, static_cast<int>(v.gate.size()));
    forms.push_back(f);
  }
  ASSIGN_OR_RETURN(s->layout_, MakeExpertLayout(sizes));
  const ExpertLayout& lay = s->layout_;
  if (options.cache_slots > INT32_MAX / 2) return InvalidArgument("streamed experts: ", options.cache_slots, " slots");
  const int n_slots = static_cast<int>(options.cache_slots);

  // Host: one pinned arena, filled expert by expert.
  ASSIGN_OR_RETURN(s->host_, HostArena::Create(lay.total_bytes));
  std::vector<HostArena::Job> jobs;
  for (size_t l = 0; l < layers.size(); ++l) {
    const ExpertLayout::Layer& ll = lay.layers[l];
    for (int64_t e = 0; e < ll.experts; ++e) {
      const ExpertViews* v = &layers[l];
      jobs.push_back({lay.ExpertOffset(l, e), ll.stride, [v, e, ll](void* dst) -> absl::Status {
                        char* d = static_cast<char*>(dst);
                        RETURN_IF_ERROR(WriteDeviceForm(v->gate[e], Cat(v->name, " expert ", e, " gate"), d + ll.gate));
                        RETURN_IF_ERROR(WriteDeviceForm(v->up[e], Cat(v->name, " expert ", e, " up"), d + ll.up));
                        return WriteDeviceForm(v->down[e], Cat(v->name, " expert ", e, " down"), d + ll.down);
                      }});
    }
  }
  RETURN_IF_ERROR(s->host_->Fill(jobs, options.progress));

  // Device: the cache's tables and slots, then one address-table block a layer.
  // The tables as moe/expert_cache_tables.h lays them out: the bytes the planner counted.
  DeviceArena& arena = backend->arena();
  const moe::ExpertCacheTableLayout tl =
      moe::ExpertCacheTables(static_cast<int64_t>(layers.size()), max_experts, n_slots);
  ASSIGN_OR_RETURN(s->tables_block_, arena.Allocate(tl.bytes, "the expert cache's tables"));
  ASSIGN_OR_RETURN(s->slots_block_,
                   arena.Allocate(lay.slot_bytes * static_cast<size_t>(n_slots),
                                  Cat("the expert cache's ", n_slots, " slots of ", lay.slot_bytes, " bytes")));
  char* t = static_cast<char*>(s->tables_block_);
  kernels::ExpertCacheTables& c = s->cache_;
  c.slot_of = reinterpret_cast<int32_t*>(t + tl.slot_of);
  c.owner = reinterpret_cast<int32_t*>(t + tl.owner);
  c.stamp = reinterpret_cast<uint32_t*>(t + tl.stamp);
  c.fetch_expert = reinterpret_cast<int32_t*>(t + tl.fetch_expert);
  c.fetch_slot = reinterpret_cast<int32_t*>(t + tl.fetch_slot);
  c.state = reinterpret_cast<kernels::ExpertCacheState*>(t + tl.state);
  c.slots = static_cast<char*>(s->slots_block_);
  c.slot_bytes = lay.slot_bytes;
  c.n_slots = n_slots;
  c.experts_per_layer = max_experts;
  cudaStream_t stream = backend->stream();
  // Empty: no slot holds anything (slot_of and owner -1: all bits set), stamps and counters 0.
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(c.slot_of, 0xFF, tl.stamp, stream));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(c.stamp, 0, tl.bytes - tl.stamp, stream));

  s->layers_.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerForm& f = forms[l];
    const ExpertLayout::Layer& ll = lay.layers[l];
    const int e = static_cast<int>(ll.experts);
    const size_t address_bytes = moe::ExpertAddressTableBytes(e, f.bias_roles);
    ASSIGN_OR_RETURN(void* block, arena.Allocate(address_bytes, Cat(layers[l].name, ": expert address tables")));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(block, 0, address_bytes, stream));
    const void** table = static_cast<const void**>(block);
    // The bias tables follow the fetched ones and are written once: the biases do not move.
    const void* const* bias_table[3] = {nullptr, nullptr, nullptr};
    std::vector<const void*> ba;
    for (const auto* list : {&layers[l].gate_bias, &layers[l].up_bias, &layers[l].down_bias}) {
      if (list->empty()) continue;
      bias_table[list == &layers[l].gate_bias ? 0 : list == &layers[l].up_bias ? 1 : 2] = table + 3 * e + ba.size();
      for (const Weight* b : *list) ba.push_back(CudaBackend::Data(*b));
    }
    if (!ba.empty()) {  // pageable source: the call returns once the bytes are staged
      SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(table + 3 * e, ba.data(), ba.size() * sizeof(void*),
                                                   cudaMemcpyHostToDevice, stream));
    }
    kernels::ExpertTables tab;
    tab.gate = table;
    tab.up = table + e;
    tab.down = table + 2 * e;
    tab.experts = e;
    tab.hidden = static_cast<int>(f.gate.cols);
    tab.ffn = static_cast<int>(f.gate.rows);
    tab.type = f.gate.type;
    tab.down_type = f.down.type;
    tab.gate_bias = bias_table[0];
    tab.up_bias = bias_table[1];
    tab.down_bias = bias_table[2];
    tab.bias_type = f.bias_type;
    kernels::ExpertCacheLayer cl;
    cl.layer = static_cast<int>(l);
    cl.experts = e;
    cl.host = s->host_->device() + ll.base;
    cl.stride = ll.stride;
    cl.gate = ll.gate;
    cl.up = ll.up;
    cl.down = ll.down;
    cl.gate_table = table;
    cl.up_table = table + e;
    cl.down_table = table + 2 * e;
    Layer& out = s->layers_[l];
    out.type = f.gate.type;
    out.down_type = f.down.type;
    out.source = f.source;
    out.down_source = f.down_source;
    out.hidden = f.gate.cols;
    out.ffn = f.gate.rows;
    out.gate_bias = layers[l].gate_bias;
    out.up_bias = layers[l].up_bias;
    out.down_bias = layers[l].down_bias;
    out.fetch = std::make_unique<LayerFetch>(s.get(), cl);
    out.set = std::make_unique<CudaExpertSet>(tab, &arena, block, out.fetch.get());
  }
  return s;
}

CudaStreamedExperts::~CudaStreamedExperts() {
  // Queued passes may still read the slots or the host copy.
  (void)cudaStreamSynchronize(backend_->stream());
  for (Layer& l : layers_) l.set.reset();
  DeviceArena& arena = backend_->arena();
  arena.Free(staging_);
  arena.Free(slots_block_);
  arena.Free(tables_block_);
}

absl::StatusOr<ExpertRefs> CudaStreamedExperts::Stage(size_t i, int expert) {
  if (i >= layers_.size() || expert < 0 || expert >= layout_.layers[i].experts) {
    return InvalidArgument("streamed experts: no expert ", expert, " in streamed layer ", i);
  }
  if (staging_ == nullptr) {
    ASSIGN_OR_RETURN(staging_, backend_->arena().Allocate(layout_.slot_bytes, "the expert staging buffer"));
  }
  Layer& l = layers_[i];
  const ExpertLayout::Layer& ll = layout_.layers[i];
  if (l.staged_gate == nullptr) {
    const char* base = static_cast<const char*>(staging_);
    l.staged_gate = CudaBackend::WeightView(l.ffn, l.hidden, l.source, l.type, base + ll.gate);
    l.staged_up = CudaBackend::WeightView(l.ffn, l.hidden, l.source, l.type, base + ll.up);
    l.staged_down = CudaBackend::WeightView(l.hidden, l.ffn, l.down_source, l.down_type, base + ll.down);
  }
  // Stream-ordered after the ops that read the previous expert; from pinned memory, so no host wait.
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_, host_->host() + layout_.ExpertOffset(i, expert), ll.stride,
                                               cudaMemcpyHostToDevice, backend_->stream()));
  ++staged_;
  staged_bytes_ += static_cast<int64_t>(ll.stride);
  auto bias = [expert](const std::vector<const Weight*>& v) { return v.empty() ? nullptr : v[expert]; };
  return ExpertRefs{l.staged_gate.get(), l.staged_up.get(),  l.staged_down.get(),
                    bias(l.gate_bias),   bias(l.up_bias),    bias(l.down_bias)};
}

absl::Status CudaStreamedExperts::EmptyCache() {
  const size_t keys = layers_.size() * static_cast<size_t>(cache_.experts_per_layer);
  cudaStream_t stream = backend_->stream();
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(cache_.slot_of, 0xFF, keys * sizeof(int32_t), stream));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(cache_.owner, 0xFF, cache_.n_slots * sizeof(int32_t), stream));
  return SPECGEN_CUDA_STATUS(cudaMemsetAsync(cache_.stamp, 0, cache_.n_slots * sizeof(uint32_t), stream));
}

absl::StatusOr<ExpertStreamStats> CudaStreamedExperts::Stats() {
  RETURN_IF_ERROR(backend_->Synchronize(SyncKind::kOther));
  kernels::ExpertCacheState st;
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemcpy(&st, cache_.state, sizeof(st), cudaMemcpyDeviceToHost));
  ExpertStreamStats out;
  out.slots = cache_.n_slots;
  out.slot_bytes = cache_.slot_bytes;
  out.host_bytes = layout_.total_bytes;
  out.hits = static_cast<int64_t>(st.hits);
  out.misses = static_cast<int64_t>(st.misses);
  out.evictions = static_cast<int64_t>(st.evictions);
  out.fetched_bytes = static_cast<int64_t>(st.bytes);
  out.staged = staged_;
  out.staged_bytes = staged_bytes_;
  out.layer_passes = static_cast<int64_t>(st.clock);  // one decision per (pass, layer) on the device
  return out;
}

}  // namespace specgen
