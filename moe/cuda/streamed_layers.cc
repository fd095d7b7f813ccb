#include "moe/cuda/streamed_layers.h"

#include <string>

#include "engine/backend/device_form.h"
#include "engine/core/status_macros.h"
#include "kernels/cuda_check.h"

namespace specgen {

absl::StatusOr<std::unique_ptr<CudaStreamedLayers>> CudaStreamedLayers::Create(
    CudaBackend* backend, std::span<const LayerViews> layers, const LayerStreamingOptions& options) {
  // The device form of every weight first: a bad one is reported before anything is allocated.
  std::vector<std::vector<DeviceForm>> forms(layers.size());
  std::vector<std::vector<size_t>> bytes(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    for (size_t t = 0; t < layers[i].weights.size(); ++t) {
      ASSIGN_OR_RETURN(DeviceForm f, DeviceFormOf(layers[i].weights[t], Cat(layers[i].name, " weight ", t)));
      bytes[i].push_back(f.bytes);
      forms[i].push_back(f);
    }
  }
  std::unique_ptr<CudaStreamedLayers> s(new CudaStreamedLayers(backend));
  ASSIGN_OR_RETURN(s->layout_, MakeLayerRingLayout(bytes, options.ring_layers));
  const LayerRingLayout& lay = s->layout_;

  // Host: one pinned arena, filled layer by layer in parallel.
  ASSIGN_OR_RETURN(s->host_, HostArena::Create(lay.host_bytes));
  std::vector<HostArena::Job> jobs;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerViews* v = &layers[i];
    const LayerRingLayout::Layer* l = &lay.layers[i];
    jobs.push_back({l->base, l->bytes, [v, l](void* dst) -> absl::Status {
                      char* d = static_cast<char*>(dst);
                      for (size_t t = 0; t < v->weights.size(); ++t) {
                        RETURN_IF_ERROR(WriteDeviceForm(v->weights[t], Cat(v->name, " weight ", t), d + l->offsets[t]));
                      }
                      return absl::OkStatus();
                    }});
  }
  RETURN_IF_ERROR(s->host_->Fill(jobs, options.progress));

  // Device: the ring's buffers, and each layer's views into its buffer, made once.
  s->stride_ = (lay.buffer_bytes + LayerRingLayout::kAlignment - 1) / LayerRingLayout::kAlignment *
               LayerRingLayout::kAlignment;
  ASSIGN_OR_RETURN(void* ring, backend->arena().Allocate(s->stride_ * static_cast<size_t>(lay.ring),
                                                         Cat("the dense-layer ring (", lay.ring, " buffers of ",
                                                             lay.buffer_bytes, " bytes)")));
  s->ring_ = static_cast<char*>(ring);
  s->layers_.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const char* buffer = s->buffer(lay.BufferOf(i));
    for (size_t t = 0; t < forms[i].size(); ++t) {
      const DeviceForm& f = forms[i][t];
      s->layers_[i].push_back(CudaBackend::WeightView(f.rows, f.cols, layers[i].weights[t].dtype, f.type,
                                                      buffer + lay.layers[i].offsets[t]));
    }
  }
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s->copy_, cudaStreamNonBlocking));
  s->copied_.assign(static_cast<size_t>(lay.ring), nullptr);
  s->freed_.assign(static_cast<size_t>(lay.ring), nullptr);
  for (cudaEvent_t* e : {&s->start_, &s->joined_}) {
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
  for (int b = 0; b < lay.ring; ++b) {
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s->copied_[b], cudaEventDisableTiming));
    SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s->freed_[b], cudaEventDisableTiming));
  }
  return s;
}

CudaStreamedLayers::~CudaStreamedLayers() {
  // Queued passes may still copy into the ring or read it.
  if (copy_ != nullptr) (void)cudaStreamSynchronize(copy_);
  (void)cudaStreamSynchronize(backend_->stream());
  layers_.clear();
  for (cudaEvent_t e : copied_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  for (cudaEvent_t e : freed_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (joined_ != nullptr) cudaEventDestroy(joined_);
  if (copy_ != nullptr) cudaStreamDestroy(copy_);
  backend_->arena().Free(ring_);
}

absl::Status CudaStreamedLayers::Copy(size_t i) {
  const LayerRingLayout::Layer& l = layout_.layers[i];
  const int b = layout_.BufferOf(i);
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ring_ + static_cast<size_t>(b) * stride_, host_->host() + l.base,
                                               l.bytes, cudaMemcpyHostToDevice, copy_));
  return SPECGEN_CUDA_STATUS(cudaEventRecord(copied_[b], copy_));
}

absl::Status CudaStreamedLayers::BeginPass() {
  if (in_pass_) return absl::FailedPreconditionError("streamed layers: a pass began before the last one ended");
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(backend_->stream(), &capture));
  capturing_ = capture != cudaStreamCaptureStatusNone;
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, backend_->stream()));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_, start_, 0));
  in_pass_ = true;
  next_ = 0;
  held_ = false;
  for (size_t i = 0; i < static_cast<size_t>(layout_.ring); ++i) RETURN_IF_ERROR(Copy(i));
  return absl::OkStatus();
}

absl::Status CudaStreamedLayers::Acquire(size_t i) {
  if (!in_pass_ || held_ || i != next_) {
    return absl::FailedPreconditionError(
        Cat("streamed layers: layer ", i, " acquired ",
            !in_pass_ ? std::string("outside a pass")
                      : held_ ? Cat("while layer ", next_, " is held") : Cat("when layer ", next_, " is next")));
  }
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(backend_->stream(), copied_[layout_.BufferOf(i)], 0));
  held_ = true;
  return absl::OkStatus();
}

absl::Status CudaStreamedLayers::Release(size_t i) {
  if (!in_pass_ || !held_ || i != next_) {
    return absl::FailedPreconditionError(Cat("streamed layers: layer ", i, " released without being acquired"));
  }
  held_ = false;
  next_ = i + 1;
  const size_t following = i + static_cast<size_t>(layout_.ring);
  if (following >= layers_.size()) return absl::OkStatus();
  const int b = layout_.BufferOf(i);
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(freed_[b], backend_->stream()));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copy_, freed_[b], 0));
  return Copy(following);
}

absl::Status CudaStreamedLayers::EndPass() {
  if (!in_pass_) return absl::FailedPreconditionError("streamed layers: a pass ended that had not begun");
  in_pass_ = false;
  held_ = false;
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaEventRecord(joined_, copy_));
  SPECGEN_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(backend_->stream(), joined_, 0));
  if (!capturing_) ++passes_;
  return absl::OkStatus();
}

LayerStreamStats CudaStreamedLayers::Stats() const {
  LayerStreamStats s;
  s.layers = static_cast<int64_t>(layers_.size());
  s.ring = layout_.ring;
  s.buffer_bytes = layout_.buffer_bytes;
  s.host_bytes = layout_.host_bytes;
  s.pass_bytes = layout_.PassBytes();
  s.passes = passes_;
  s.copied_bytes = passes_ * static_cast<int64_t>(s.pass_bytes);
  return s;
}

}  // namespace specgen
