#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_graph.h"
#include "engine/backend/cuda/cuda_expert_set.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "engine/core/half.h"
#include "engine/core/quant.h"
#include "engine/backend/device_form.h"
#include "engine/backend/op_checks.h"
#include "engine/core/status_macros.h"
#include "kernels/arch_elementwise.cuh"
#include "kernels/attention.cuh"
#include "kernels/attention_choice.h"
#include "kernels/attention_simple.cuh"
#include "kernels/convert.cuh"
#include "kernels/cuda_check.h"
#include "kernels/elementwise.cuh"
#include "kernels/expert_rows.cuh"
#include "kernels/gemv.cuh"
#include "kernels/matmul_rows.cuh"
#include "kernels/norm.cuh"
#include "kernels/packed.cuh"
#include "kernels/rope.cuh"
#include "kernels/routed_experts.cuh"
#include "kernels/router.cuh"
#include "kernels/router_sigmoid.cuh"
#include "kernels/routing_override.cuh"

namespace specgen {
namespace {

using kernels::ElemType;

#define CUDA_RETURN_IF_ERROR(expr) SPECGEN_CUDA_RETURN_IF_ERROR(expr)

absl::Status CublasStatus(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(Cat("cuBLAS error ", cublasGetStatusName(s), " in ", call, " at ", file,
                                 ":", line));
}
#define CUBLAS_RETURN_IF_ERROR(expr)                                              \
  do {                                                                            \
    absl::Status _s = CublasStatus((expr), #expr, __FILE__, __LINE__);            \
    if (!_s.ok()) return _s;                                                      \
  } while (0)

// A block of the arena, given back when the owner dies.
class ArenaBlock {
 public:
  ArenaBlock(DeviceArena* arena, void* p) : arena_(arena), p_(p) {}  // arena null: not owned (a view)
  ~ArenaBlock() {
    if (arena_ != nullptr) arena_->Free(p_);
  }
  ArenaBlock(const ArenaBlock&) = delete;
  ArenaBlock& operator=(const ArenaBlock&) = delete;
  void* get() const { return p_; }

 private:
  DeviceArena* arena_;
  void* p_;
};

class CudaBuffer : public Buffer {
 public:
  CudaBuffer(int64_t capacity_rows, int64_t cols, DeviceArena* arena, void* p, DType dtype = DType::kF32)
      : Buffer(capacity_rows, cols, dtype), block_(arena, p) {}
  float* data() const { return static_cast<float*>(block_.get()); }
  void* raw() const { return block_.get(); }

 private:
  ArenaBlock block_;
};

class CudaWeight : public Weight {
 public:
  CudaWeight(int64_t rows, int64_t cols, DType src, ElemType type, DeviceArena* arena, void* p)
      : Weight(rows, cols, src), type_(type), block_(arena, p) {}
  const void* data() const { return block_.get(); }
  ElemType type() const { return type_; }

 private:
  ElemType type_;
  ArenaBlock block_;
};

const CudaBuffer& B(const Buffer& b) { return static_cast<const CudaBuffer&>(b); }

// The kernels' name for a cache buffer's element type (IsCacheType).
ElemType CacheElemType(DType t) {
  return t == DType::kF16 ? ElemType::kF16 : t == DType::kBF16 ? ElemType::kBF16 : ElemType::kF32;
}
const CudaWeight& W(const Weight& w) { return static_cast<const CudaWeight&>(w); }

// x · W^T for every segment (up to 3 matrices of `type`) in one GEMV launch with `epilogue`: the launch
// each fused MatMul op makes once its weights qualify (CudaBackend::GemvFuses).
absl::Status FusedGemv(const Buffer& x, std::span<const kernels::GemvSegment> segs, ElemType type,
                       kernels::GemvEpilogue epilogue, cudaStream_t stream, kernels::GemvOrder order) {
  return SPECGEN_CUDA_STATUS(kernels::LaunchGemvSegments(segs.data(), static_cast<int>(segs.size()), type,
                                                         B(x).data(), static_cast<int>(x.rows()),
                                                         static_cast<int>(x.cols()), epilogue, stream, order));
}

}  // namespace

bool CudaBackend::DeviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

float* CudaBackend::Data(Buffer& b) { return B(b).data(); }
const float* CudaBackend::Data(const Buffer& b) { return B(b).data(); }
const void* CudaBackend::Data(const Weight& w) { return W(w).data(); }
ElemType CudaBackend::Type(const Weight& w) { return W(w).type(); }
std::unique_ptr<Weight> CudaBackend::WeightView(int64_t rows, int64_t cols, DType source, ElemType type,
                                                const void* data) {
  return std::make_unique<CudaWeight>(rows, cols, source, type, nullptr, const_cast<void*>(data));
}
void* CudaBackend::CacheData(const Buffer& b) { return B(b).raw(); }
ElemType CudaBackend::CacheType(const Buffer& b) { return CacheElemType(b.dtype()); }

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaBackendOptions& options) {
  if (!DeviceAvailable()) return absl::FailedPreconditionError("--device cuda: no CUDA device found");
  std::unique_ptr<CudaBackend> be(new CudaBackend());
  be->device_ = options.device;
  be->fused_ops_ = options.fused_ops;
  be->gemv_order_ = options.gemv_order;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  size_t budget = options.arena_bytes;
  if (budget == 0) {
    size_t free_bytes = 0, total = 0;
    CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total));
    if (free_bytes <= CudaBackendOptions::kReserveBytes) {
      return absl::ResourceExhaustedError(Cat("cuda: only ", free_bytes, " bytes of VRAM free"));
    }
    budget = free_bytes - CudaBackendOptions::kReserveBytes;
  }
  ASSIGN_OR_RETURN(DeviceArena * arena, DeviceArena::Create(budget));
  be->arena_.reset(arena);
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&be->stream_, cudaStreamNonBlocking));
  for (cudaEvent_t& e : be->half_done_) {
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  be->staging_bytes_ = std::max<size_t>(options.staging_bytes, 1 << 16);
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&be->staging_host_), be->staging_bytes_,
                                     cudaHostAllocDefault));
  ASSIGN_OR_RETURN(void* sd, be->arena_->Allocate(be->staging_bytes_, "the argument staging ring"));
  be->staging_dev_ = static_cast<char*>(sd);
  be->readback_bytes_ = 1 << 20;
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&be->readback_), be->readback_bytes_,
                                     cudaHostAllocDefault));
  cublasHandle_t h = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&h));
  be->cublas_ = h;
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(h, be->stream_));
  // cuBLAS's workspace comes out of the budget too (it would cudaMalloc its own otherwise).
  constexpr size_t kCublasWorkspace = size_t{32} << 20;
  ASSIGN_OR_RETURN(void* ws, be->arena_->Allocate(kCublasWorkspace, "the cuBLAS workspace"));
  CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(h, ws, kCublasWorkspace));
  return be;
}

CudaBackend::~CudaBackend() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (cublas_) cublasDestroy(static_cast<cublasHandle_t>(cublas_));
  for (cudaEvent_t e : half_done_) {
    if (e) cudaEventDestroy(e);
  }
  if (staging_host_) cudaFreeHost(staging_host_);
  if (readback_) cudaFreeHost(readback_);
  if (stream_) cudaStreamDestroy(stream_);
  // arena_ (and with it all VRAM) goes last; Buffers and Weights must not outlive the backend.
}

absl::Status CudaBackend::Synchronize(SyncKind kind) {
  if (capturing_) return absl::FailedPreconditionError("cuda: a host wait inside a captured pass");
  switch (kind) {
    case SyncKind::kStepResult: ++syncs_.step_result; break;
    case SyncKind::kExpertUnion: ++syncs_.expert_union; break;
    case SyncKind::kOther: ++syncs_.other; break;
  }
  return SPECGEN_CUDA_STATUS(cudaStreamSynchronize(stream_));
}

void CudaBackend::SetDeviceLength(const int32_t* d_length, int64_t max_keys) {
  device_length_ = d_length;
  device_length_max_keys_ = d_length != nullptr ? max_keys : 0;
}

absl::Status CudaBackend::BeginCapture() {
  if (capturing_) return absl::FailedPreconditionError("cuda: a capture is already running");
  RETURN_IF_ERROR(BeginStreamCapture(stream_));
  capturing_ = true;
  return absl::OkStatus();
}

absl::StatusOr<cudaGraph_t> CudaBackend::EndCapture() {
  if (!capturing_) return absl::FailedPreconditionError("cuda: no capture to end");
  capturing_ = false;
  return EndStreamCapture(stream_);
}

absl::StatusOr<void*> CudaBackend::Stage(const void* src, size_t bytes) {
  if (capturing_) {
    return absl::FailedPreconditionError(
        Cat("cuda: ", bytes, " bytes of host arguments staged inside a captured pass (a replay would "
            "read these bytes again)"));
  }
  const size_t half = staging_bytes_ / 2;
  const size_t size = (bytes + 255) / 256 * 256;
  if (size > half) {
    return InvalidArgument("cuda: ", bytes, " bytes of arguments exceed the staging ring's half (",
                           half, ")");
  }
  if (size == 0) return static_cast<void*>(staging_dev_);
  const int h_now = staging_pos_ < half ? 0 : 1;
  size_t pos = staging_pos_;
  if (h_now == 0 && pos + size > half) pos = half;           // move on to half 1
  if (h_now == 1 && pos + size > staging_bytes_) pos = 0;    // wrap to half 0
  const int h_new = pos < half ? 0 : 1;
  if (h_new != h_now) {
    // Leaving half h_now: its copies are queued before this event. Entering h_new: its previous
    // copies must have run before the host overwrites it (normally long done: no wait).
    CUDA_RETURN_IF_ERROR(cudaEventRecord(half_done_[h_now], stream_));
    const cudaError_t q = cudaEventQuery(half_done_[h_new]);
    if (q == cudaErrorNotReady) {
      ++syncs_.other;
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(half_done_[h_new]));
    } else {
      CUDA_RETURN_IF_ERROR(q);
    }
  }
  std::memcpy(staging_host_ + pos, src, bytes);
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_dev_ + pos, staging_host_ + pos, bytes,
                                       cudaMemcpyHostToDevice, stream_));
  staging_pos_ = pos + size;
  return static_cast<void*>(staging_dev_ + pos);
}

absl::Status CudaBackend::EnsureScratch(void** p, size_t* capacity, size_t bytes, std::string_view what) {
  if (*capacity >= bytes) return absl::OkStatus();
  if (capturing_) return absl::FailedPreconditionError(Cat("cuda: ", what, " would grow inside a captured pass"));
  ++scratch_generation_;
  // Work queued on the stream may still read the old block; the arena only hands it out again to a
  // later allocation whose users are queued after it on the same stream, so stream order keeps it safe.
  // The exact size (the code had read as doubling, but took the capacity after zeroing it): the decode
  // path's workspaces reach their size at the first pass of each shape, and doubling a long prompt's
  // attention workspace would double the largest one.
  arena_->Free(*p);
  *p = nullptr;
  *capacity = 0;
  ASSIGN_OR_RETURN(*p, arena_->Allocate(bytes, what));
  *capacity = bytes;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaBackend::NewBuffer(int64_t capacity_rows, int64_t cols) {
  if (capacity_rows < 0 || cols <= 0) {
    return InvalidArgument("cuda NewBuffer: bad shape [", capacity_rows, ", ", cols, "]");
  }
  const size_t bytes = static_cast<size_t>(capacity_rows * cols) * sizeof(float);
  ASSIGN_OR_RETURN(void* p, arena_->Allocate(bytes, Cat("an activation buffer [", capacity_rows, ", ",
                                                        cols, "]")));
  return std::unique_ptr<Buffer>(new CudaBuffer(capacity_rows, cols, arena_.get(), p));
}

DType CudaBackend::ResidentDType(DType stored) const {
  if (PackedDeviceType(stored).has_value()) return stored;
  return stored == DType::kF32 || stored == DType::kF16 ? stored : DType::kBF16;
}

absl::StatusOr<std::unique_ptr<Weight>> CudaBackend::Upload(const TensorView& t, std::string_view name) {
  if (t.location == Location::kDevice) {
    return InvalidArgument("tensor ", name, ": device-resident views are not uploadable");
  }
  // The device form (engine/backend/device_form.h): what a streamed copy of this weight holds too.
  ASSIGN_OR_RETURN(const DeviceForm form, DeviceFormOf(t, name));
  const int64_t rows = form.rows, cols = form.cols;
  const ElemType type = form.type;
  const size_t bytes = form.bytes;
  const void* host = t.data;
  std::vector<uint8_t> converted;
  if (Info(t.dtype).quantized && !kernels::IsPacked(type)) {
    converted.resize(bytes);
    RETURN_IF_ERROR(WriteDeviceForm(t, name, converted.data()));
    host = converted.data();
  }
  ASSIGN_OR_RETURN(void* p, arena_->Allocate(bytes, Cat("tensor ", name)));
  auto w = std::make_unique<CudaWeight>(rows, cols, t.dtype, type, arena_.get(), p);
  // Stream-ordered (the block may be one that queued work just released), then waited for: `host`
  // may be a temporary. Uploads happen before generation, never inside a step.
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, stream_));
  RETURN_IF_ERROR(Synchronize(SyncKind::kOther));
  return std::unique_ptr<Weight>(std::move(w));
}

absl::Status CudaBackend::Write(std::span<const float> src, Buffer* dst) {
  RETURN_IF_ERROR(CheckWrite("cuda", src.size(), *dst));
  const size_t bytes = src.size() * sizeof(float);
  if (bytes <= staging_bytes_ / 8) {
    ASSIGN_OR_RETURN(void* d, Stage(src.data(), bytes));
    return SPECGEN_CUDA_STATUS(
        cudaMemcpyAsync(B(*dst).data(), d, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(B(*dst).data(), src.data(), bytes, cudaMemcpyHostToDevice, stream_));
  return Synchronize(SyncKind::kOther);  // `src` may go away once we return
}

absl::Status CudaBackend::Read(const Buffer& src, std::span<float> dst) {
  RETURN_IF_ERROR(CheckRead("cuda", src, dst.size()));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.data(), B(src).data(), dst.size() * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
  return Synchronize(SyncKind::kOther);
}

absl::Status CudaBackend::Embed(const Weight& table, std::span<const int32_t> tokens, Buffer* out) {
  const int32_t* device_ids = device_tokens_;
  device_tokens_ = nullptr;
  RETURN_IF_ERROR(CheckEmbedShape("cuda", table, tokens.size(), *out));
  if (tokens.empty()) return absl::OkStatus();
  if (device_ids == nullptr) {
    RETURN_IF_ERROR(CheckTokenIds(table, tokens));
    ASSIGN_OR_RETURN(void* d, Stage(tokens.data(), tokens.size_bytes()));
    device_ids = static_cast<const int32_t*>(d);
  }
  if (kernels::IsPacked(W(table).type())) {
    return SPECGEN_CUDA_STATUS(kernels::LaunchPackedEmbedding(W(table).data(), W(table).type(), table.rows(),
                                                              static_cast<int>(table.cols()), device_ids,
                                                              static_cast<int>(tokens.size()), B(*out).data(),
                                                              stream_));
  }
  return SPECGEN_CUDA_STATUS(kernels::LaunchEmbedding(W(table).data(), W(table).type(), table.rows(),
                                                      static_cast<int>(table.cols()), device_ids,
                                                      static_cast<int>(tokens.size()), B(*out).data(),
                                                      stream_));
}

absl::Status CudaBackend::MatMul(const Buffer& x, const Weight& w, Buffer* y) {
  RETURN_IF_ERROR(CheckMatMul("cuda", x, w, *y));
  const int n = static_cast<int>(x.rows()), out = static_cast<int>(w.rows()),
            in = static_cast<int>(x.cols());
  if (n == 0) return absl::OkStatus();
  const ElemType type = W(w).type();
  const float* xd = B(x).data();
  float* yd = B(*y).data();
  if (!kernels::GemvTakes(type, in)) {
    return SPECGEN_CUDA_STATUS(kernels::LaunchMatMulRows(W(w).data(), type, xd, yd, n, out, in, stream_));
  }
  if (n > kernels::kGemvMaxTokens && kernels::IsPacked(type)) return PackedPrefill(x, w, y);
  if (n > kernels::kGemvMaxTokens && type == ElemType::kBF16) {
    // Prefill: cuBLAS on bf16 activations (never on the decode/verify path, which has <= 16 rows;
    // cuBLAS picks its algorithm by shape, so batch invariance is not promised here).
    const size_t xb_bytes = static_cast<size_t>(n) * in * sizeof(uint16_t);
    RETURN_IF_ERROR(EnsureScratch(&bf16_x_, &bf16_x_bytes_, xb_bytes, "bf16 prefill activations"));
    CUDA_RETURN_IF_ERROR(kernels::LaunchF32ToBf16(xd, static_cast<uint16_t*>(bf16_x_),
                                                  static_cast<int64_t>(n) * in, stream_));
    const float alpha = 1.0f, beta = 0.0f;
    // Column-major view: y^T [out, n] = W [in, out]^T · x^T [in, n].
    CUBLAS_RETURN_IF_ERROR(cublasGemmEx(static_cast<cublasHandle_t>(cublas_), CUBLAS_OP_T, CUBLAS_OP_N,
                                        out, n, in, &alpha, W(w).data(), CUDA_R_16BF, in, bf16_x_,
                                        CUDA_R_16BF, in, &beta, yd, CUDA_R_32F, out,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }
  // 1..16 rows per launch (larger f16 batches in chunks of 16): one reduction order per element.
  for (int t0 = 0; t0 < n; t0 += kernels::kGemvMaxTokens) {
    const int m = std::min(kernels::kGemvMaxTokens, n - t0);
    CUDA_RETURN_IF_ERROR(kernels::LaunchGemv(W(w).data(), type, xd + static_cast<int64_t>(t0) * in,
                                             yd + static_cast<int64_t>(t0) * out, m, out, in, stream_,
                                             gemv_order_));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::PackedPrefill(const Buffer& x, const Weight& w, Buffer* y) {
  const int n = static_cast<int>(x.rows()), out = static_cast<int>(w.rows()), in = static_cast<int>(x.cols());
  const size_t xb_bytes = static_cast<size_t>(n) * in * sizeof(uint16_t);
  RETURN_IF_ERROR(EnsureScratch(&bf16_x_, &bf16_x_bytes_, xb_bytes, "bf16 prefill activations"));
  CUDA_RETURN_IF_ERROR(kernels::LaunchF32ToBf16(B(x).data(), static_cast<uint16_t*>(bf16_x_),
                                                static_cast<int64_t>(n) * in, stream_));
  // Row tiles of the weights dequantized to bf16 (the values Upload stored before weights stayed
  // packed) into a scratch of at most kPackedTileBytes, each multiplied by cuBLAS as a bf16 weight is.
  const int64_t tile_rows = std::min<int64_t>(
      out, std::max<int64_t>(16, kPackedTileBytes / (static_cast<int64_t>(in) * sizeof(uint16_t)) / 16 * 16));
  const size_t tile_bytes = static_cast<size_t>(tile_rows) * in * sizeof(uint16_t);
  RETURN_IF_ERROR(EnsureScratch(&packed_tile_, &packed_tile_bytes_, tile_bytes, "the packed prefill tile"));
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t r0 = 0; r0 < out; r0 += tile_rows) {
    const int rows = static_cast<int>(std::min<int64_t>(tile_rows, out - r0));
    CUDA_RETURN_IF_ERROR(kernels::LaunchDequantizePacked(W(w).data(), W(w).type(), r0, rows, in, nullptr,
                                                         static_cast<uint16_t*>(packed_tile_), stream_));
    // Column-major view: y^T [rows of this tile, n] (leading dimension out) = tile [in, rows]^T · x^T.
    CUBLAS_RETURN_IF_ERROR(cublasGemmEx(static_cast<cublasHandle_t>(cublas_), CUBLAS_OP_T, CUBLAS_OP_N, rows, n,
                                        in, &alpha, packed_tile_, CUDA_R_16BF, in, bf16_x_, CUDA_R_16BF, in, &beta,
                                        B(*y).data() + r0, CUDA_R_32F, out, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
  }
  return absl::OkStatus();
}

bool CudaBackend::GemvFuses(const Buffer& x, std::span<const Weight* const> ws) const {
  const int64_t n = x.rows(), in = x.cols();
  if (!fused_ops_ || n < 1 || n > kernels::kGemvMaxTokens || ws.empty()) return false;
  const ElemType type = W(*ws[0]).type();
  for (const Weight* w : ws) {
    if (W(*w).type() != type || w->cols() != in || !kernels::GemvTakes(type, static_cast<int>(in))) return false;
  }
  return true;
}

absl::Status CudaBackend::MatMulMany(const Buffer& x, std::span<const Weight* const> ws,
                                     std::span<Buffer* const> ys) {
  if (ws.size() != ys.size() || ws.empty() || ws.size() > 3 || !GemvFuses(x, ws)) {
    return Backend::MatMulMany(x, ws, ys);
  }
  kernels::GemvSegment segs[3];
  for (size_t i = 0; i < ws.size(); ++i) {
    RETURN_IF_ERROR(CheckMatMul("cuda", x, *ws[i], *ys[i]));
    segs[i] = {W(*ws[i]).data(), B(*ys[i]).data(), static_cast<int>(ws[i]->rows())};
  }
  return FusedGemv(x, std::span(segs, ws.size()), W(*ws[0]).type(), kernels::GemvEpilogue::kStore, stream_, gemv_order_);
}

absl::Status CudaBackend::MatMulAdd(const Buffer& x, const Weight& w, Buffer* scratch, Buffer* y) {
  const Weight* ws[1] = {&w};
  if (!GemvFuses(x, ws)) return Backend::MatMulAdd(x, w, scratch, y);
  RETURN_IF_ERROR(CheckMatMul("cuda", x, w, *y));
  const kernels::GemvSegment seg{W(w).data(), B(*y).data(), static_cast<int>(w.rows())};
  return FusedGemv(x, {&seg, 1}, W(w).type(), kernels::GemvEpilogue::kAddTo, stream_, gemv_order_);
}

absl::Status CudaBackend::MatMulSwiGlu(const Buffer& x, const Weight& gate, const Weight& up, Buffer* up_scratch,
                                       Buffer* gate_out) {
  const Weight* ws[2] = {&gate, &up};
  if (!GemvFuses(x, ws) || gate.rows() != up.rows()) return Backend::MatMulSwiGlu(x, gate, up, up_scratch, gate_out);
  RETURN_IF_ERROR(CheckMatMul("cuda", x, gate, *gate_out));
  const kernels::GemvSegment segs[2] = {{W(gate).data(), B(*gate_out).data(), static_cast<int>(gate.rows())},
                                        {W(up).data(), B(*gate_out).data(), static_cast<int>(up.rows())}};
  return FusedGemv(x, segs, W(gate).type(), kernels::GemvEpilogue::kSwiGlu, stream_, gemv_order_);
}

absl::Status CudaBackend::RmsNorm(const Buffer& x, const Weight& w, int64_t group, float eps, Buffer* y) {
  RETURN_IF_ERROR(CheckRmsNorm("cuda", x, w, group, *y));
  if (x.rows() == 0) return absl::OkStatus();
  return SPECGEN_CUDA_STATUS(kernels::LaunchRmsNorm(B(x).data(), W(w).data(), W(w).type(),
                                                    B(*y).data(), x.rows() * (x.cols() / group),
                                                    static_cast<int>(group), eps, stream_));
}

absl::StatusOr<const int32_t*> CudaBackend::StagePositions(std::span<const int32_t> positions) {
  if (staged_positions_dev_ != nullptr && staging_pos_ == staged_positions_end_ &&
      std::equal(positions.begin(), positions.end(), staged_positions_.begin(), staged_positions_.end())) {
    return staged_positions_dev_;
  }
  ASSIGN_OR_RETURN(void* d, Stage(positions.data(), positions.size_bytes()));
  staged_positions_.assign(positions.begin(), positions.end());
  staged_positions_dev_ = static_cast<const int32_t*>(d);
  staged_positions_end_ = staging_pos_;
  return staged_positions_dev_;
}

absl::Status CudaBackend::Rope(std::span<const int32_t> positions, int64_t head_dim, float theta,
                               RopeStyle style, Buffer* x) {
  RETURN_IF_ERROR(CheckRope("cuda", positions.size(), head_dim, *x));
  if (positions.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const int32_t* d, StagePositions(positions));
  return SPECGEN_CUDA_STATUS(kernels::LaunchRope(
      B(*x).data(), d, static_cast<int>(x->rows()),
      static_cast<int>(x->cols() / head_dim), static_cast<int>(head_dim), static_cast<int>(head_dim),
      theta, style == RopeStyle::kRotateHalf ? kernels::RopeStyle::kRotateHalf
                                             : kernels::RopeStyle::kInterleaved,
      stream_));
}

namespace {
// RopePartial's arguments, as the CPU backend checks them.
absl::Status CheckRopeFrequencies(int64_t head_dim, int64_t rope_dim, std::span<const float> inv_freq) {
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0) {
    return InvalidArgument("cuda Rope: rotating ", rope_dim, " of ", head_dim, " dims (an even count, at most all)");
  }
  if (static_cast<int64_t>(inv_freq.size()) != rope_dim / 2) {
    return InvalidArgument("cuda Rope: ", inv_freq.size(), " inverse frequencies for ", rope_dim, " rotated dims");
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<const float*> CudaBackend::DeviceFrequencies(std::span<const float> inv_freq) {
  for (const FreqTable& t : freq_tables_) {
    if (std::equal(inv_freq.begin(), inv_freq.end(), t.host.begin(), t.host.end())) {
      return static_cast<const float*>(t.dev);
    }
  }
  if (capturing_) return absl::FailedPreconditionError("cuda: a new RoPE frequency table inside a captured pass");
  if (freq_tables_.size() >= kMaxFreqTables) {
    // Work queued before may still read it; the arena hands the block out again only in stream order.
    arena_->Free(freq_tables_.front().dev);
    freq_tables_.erase(freq_tables_.begin());
    ++scratch_generation_;  // a captured pass may hold its address
  }
  FreqTable t;
  t.host.assign(inv_freq.begin(), inv_freq.end());
  ASSIGN_OR_RETURN(t.dev, arena_->Allocate(inv_freq.size_bytes(), "a RoPE frequency table"));
  absl::StatusOr<void*> staged = Stage(inv_freq.data(), inv_freq.size_bytes());
  if (!staged.ok()) {
    arena_->Free(t.dev);
    return staged.status();
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.dev, *staged, inv_freq.size_bytes(), cudaMemcpyDeviceToDevice, stream_));
  freq_tables_.push_back(std::move(t));
  return static_cast<const float*>(freq_tables_.back().dev);
}

absl::Status CudaBackend::RopeWithFrequencies(std::span<const int32_t> positions, int64_t head_dim,
                                              std::span<const float> inv_freq, RopeStyle style, Buffer* x) {
  return RopePartial(positions, head_dim, head_dim, inv_freq, 1.0f, style, x);
}

absl::Status CudaBackend::RopePartial(std::span<const int32_t> positions, int64_t head_dim, int64_t rope_dim,
                                      std::span<const float> inv_freq, float factor, RopeStyle style, Buffer* x) {
  RETURN_IF_ERROR(CheckRope("cuda", positions.size(), head_dim, *x));
  RETURN_IF_ERROR(CheckRopeFrequencies(head_dim, rope_dim, inv_freq));
  if (positions.empty()) return absl::OkStatus();
  kernels::RopeFrequencies f;
  ASSIGN_OR_RETURN(f.inv_freq, DeviceFrequencies(inv_freq));
  f.rot_dim = static_cast<int>(rope_dim);
  f.factor = factor;
  ASSIGN_OR_RETURN(const int32_t* d, StagePositions(positions));
  return SPECGEN_CUDA_STATUS(kernels::LaunchRopeFrequencies(
      B(*x).data(), d, static_cast<int>(x->rows()), static_cast<int>(x->cols() / head_dim),
      static_cast<int>(head_dim), f,
      style == RopeStyle::kRotateHalf ? kernels::RopeStyle::kRotateHalf : kernels::RopeStyle::kInterleaved,
      stream_));
}

bool CudaBackend::Supports(ModelFeature f) const {
  switch (f) {
    case ModelFeature::kAttentionBias:
    case ModelFeature::kAttentionSinks:
    case ModelFeature::kSlidingWindow:  // without a ring (SupportsKvRing): every position kept
    case ModelFeature::kPartialRope:
    case ModelFeature::kScaledRope:
    case ModelFeature::kSharedExperts:
    case ModelFeature::kSigmoidRouting:
    case ModelFeature::kRouterBias:
    case ModelFeature::kExpertBias:
    case ModelFeature::kClampedSwiGlu:
      return true;
  }
  return false;
}

absl::Status CudaBackend::AddBias(const Weight& b, Buffer* y) {
  if (b.rows() * b.cols() != y->cols()) {
    return InvalidArgument("cuda AddBias: a bias of ", b.rows() * b.cols(), " for rows of ", y->cols());
  }
  if (kernels::IsPacked(W(b).type())) return InvalidArgument("cuda AddBias: a bias of a block-quantized type");
  return SPECGEN_CUDA_STATUS(kernels::LaunchAddBias(B(*y).data(), W(b).data(), W(b).type(), y->rows(),
                                                    static_cast<int>(y->cols()), stream_));
}

absl::Status CudaBackend::SwiGluClamped(const Buffer& gate, const Buffer& up, float alpha, float limit, Buffer* out) {
  RETURN_IF_ERROR(CheckSwiGlu("cuda", gate, up, *out));
  return SPECGEN_CUDA_STATUS(kernels::LaunchSwiGluClamped(B(gate).data(), B(up).data(), B(*out).data(),
                                                          gate.rows() * gate.cols(), alpha, limit, stream_));
}

absl::Status CudaBackend::ScaleRowsBySigmoid(const Buffer& g, Buffer* y) {
  if (g.cols() != 1 || g.rows() != y->rows()) {
    return InvalidArgument("cuda ScaleRowsBySigmoid: gates ", g.rows(), "x", g.cols(), " for ", y->rows(), " rows");
  }
  return SPECGEN_CUDA_STATUS(kernels::LaunchScaleRowsBySigmoid(B(g).data(), B(*y).data(), y->rows(),
                                                               static_cast<int>(y->cols()), stream_));
}

absl::Status CudaBackend::Zero(Buffer* y) {
  return SPECGEN_CUDA_STATUS(cudaMemsetAsync(B(*y).data(), 0,
                                             static_cast<size_t>(y->rows() * y->cols()) * sizeof(float),
                                             stream_));
}

absl::Status CudaBackend::Add(const Buffer& x, Buffer* y) {
  RETURN_IF_ERROR(CheckSameShape("cuda", "Add", x, *y));
  if (x.rows() == 0) return absl::OkStatus();
  return SPECGEN_CUDA_STATUS(
      kernels::LaunchAdd(B(*y).data(), B(x).data(), B(*y).data(), x.rows() * x.cols(), stream_));
}

absl::Status CudaBackend::SwiGlu(const Buffer& gate, const Buffer& up, Buffer* out) {
  RETURN_IF_ERROR(CheckSwiGlu("cuda", gate, up, *out));
  if (gate.rows() == 0) return absl::OkStatus();
  return SPECGEN_CUDA_STATUS(kernels::LaunchSwiGlu(B(gate).data(), B(up).data(), B(*out).data(),
                                                   gate.rows() * gate.cols(), stream_));
}

absl::Status CudaBackend::CopyRows(const Buffer& src, int64_t dst_row, Buffer* dst) {
  RETURN_IF_ERROR(CheckCopyRows("cuda", src, dst_row, *dst));
  const int64_t n = src.rows() * src.cols();
  if (dst->dtype() != DType::kF32) {  // rounded to the cache's type on the way
    const ElemType type = CacheElemType(dst->dtype());
    void* to = static_cast<char*>(B(*dst).raw()) + dst_row * dst->cols() * kernels::ElemBytes(type);
    return SPECGEN_CUDA_STATUS(kernels::LaunchF32ToCache(B(src).data(), to, type, n, stream_));
  }
  return SPECGEN_CUDA_STATUS(cudaMemcpyAsync(B(*dst).data() + dst_row * dst->cols(), B(src).data(),
                                             static_cast<size_t>(n) * sizeof(float),
                                             cudaMemcpyDeviceToDevice, stream_));
}

absl::Status CudaBackend::NormRopeStore(const HeadNormRope& p, Buffer* q, Buffer* k, const Buffer& v,
                                        int64_t dst_row, Buffer* k_cache, Buffer* v_cache) {
  // A frequency table (scaled RoPE), a partial rotation or YaRN's factor: the frequency kernel's rotation.
  const bool freq = !p.inv_freq.empty() || (p.rope_dim != 0 && p.rope_dim != p.head_dim) || p.rope_factor != 1.0f;
  const int64_t rope_dim = p.rope_dim != 0 ? p.rope_dim : p.head_dim;
  const bool normed = p.q_norm != nullptr && p.k_norm != nullptr;
  const bool one_kernel = fused_ops_ && (p.q_norm == nullptr) == (p.k_norm == nullptr) && p.head_dim > 0 && p.head_dim <= 256 &&
                          p.head_dim % 2 == 0 && (!normed || W(*p.q_norm).type() == W(*p.k_norm).type()) &&
                          q->cols() % p.head_dim == 0 && k->cols() % p.head_dim == 0 && v.cols() == k->cols() &&
                          v.rows() == k->rows() && q->rows() == k->rows() && k_cache->dtype() == v_cache->dtype();
  if (!one_kernel) {
    if (device_length_ != nullptr) {
      return absl::FailedPreconditionError("cuda NormRopeStore: a device length needs the fused kernel");
    }
    return Backend::NormRopeStore(p, q, k, v, dst_row, k_cache, v_cache);  // its checks name the fault
  }
  if (freq) RETURN_IF_ERROR(CheckRopeFrequencies(p.head_dim, rope_dim, p.inv_freq));
  if (normed) {
    RETURN_IF_ERROR(CheckRmsNorm("cuda", *q, *p.q_norm, p.head_dim, *q));
    RETURN_IF_ERROR(CheckRmsNorm("cuda", *k, *p.k_norm, p.head_dim, *k));
  }
  RETURN_IF_ERROR(CheckRope("cuda", p.positions.size(), p.head_dim, *q));
  RETURN_IF_ERROR(CheckRope("cuda", p.positions.size(), p.head_dim, *k));
  RETURN_IF_ERROR(CheckCopyRows("cuda", *k, dst_row, *k_cache));
  RETURN_IF_ERROR(CheckCopyRows("cuda", v, dst_row, *v_cache));
  if (q->rows() == 0) return absl::OkStatus();
  kernels::RopeFrequencies f;
  if (freq) {
    ASSIGN_OR_RETURN(f.inv_freq, DeviceFrequencies(p.inv_freq));
    f.rot_dim = static_cast<int>(rope_dim);
    f.factor = p.rope_factor;
  }
  const int32_t* d_pos = nullptr;
  if (device_length_ != nullptr) {
    for (size_t t = 0; t < p.positions.size(); ++t) {
      if (p.positions[t] != dst_row + static_cast<int64_t>(t)) {
        return InvalidArgument("cuda NormRopeStore: position ", p.positions[t], " of row ", t,
                               " is not its cache row ", dst_row + static_cast<int64_t>(t),
                               " (a device length takes consecutive positions only)");
      }
    }
    if (dst_row + q->rows() > device_length_max_keys_) {
      return InvalidArgument("cuda NormRopeStore: rows up to ", dst_row + q->rows(), " past the device length's bound ",
                             device_length_max_keys_);
    }
  } else {
    ASSIGN_OR_RETURN(d_pos, StagePositions(p.positions));
  }
  const int d = static_cast<int>(p.head_dim);
  return SPECGEN_CUDA_STATUS(kernels::LaunchNormRopeStore(
      B(*q).data(), B(*k).data(), B(v).data(), normed ? W(*p.q_norm).data() : nullptr,
      normed ? W(*p.k_norm).data() : nullptr, normed ? W(*p.q_norm).type() : ElemType::kF32, p.eps, d_pos,
      static_cast<int>(q->rows()), static_cast<int>(q->cols() / d), static_cast<int>(k->cols() / d), d, p.theta,
      p.style == RopeStyle::kRotateHalf ? kernels::RopeStyle::kRotateHalf : kernels::RopeStyle::kInterleaved,
      B(*k_cache).raw(), B(*v_cache).raw(), dst_row, stream_, device_length_, CacheElemType(k_cache->dtype()),
      freq ? &f : nullptr));
}

absl::Status CudaBackend::Attention(const Buffer& q, const Buffer& k_cache, const Buffer& v_cache,
                                    const AttentionShape& s, std::span<const uint8_t> mask, Buffer* out) {
  const int64_t n = q.rows(), d = s.head_dim;
  RETURN_IF_ERROR(CheckAttention("cuda", q, k_cache, v_cache, s, mask, *out));
  // Sliding layers' ring caches are CPU-only so far (docs/design.md §5.1, item 2 of the CUDA path).
  if (s.ring > 0) return absl::UnimplementedError("cuda Attention: a ring KV cache (sliding-window layer) is not supported yet");
  if (n == 0) return absl::OkStatus();
  const uint8_t* d_mask = nullptr;
  if (!mask.empty()) {
    ASSIGN_OR_RETURN(void* p, Stage(mask.data(), mask.size()));
    d_mask = static_cast<const uint8_t*>(p);
  }
  const int heads = static_cast<int>(s.n_heads), kv_heads = static_cast<int>(s.n_kv_heads);
  const ElemType kv_type = CacheElemType(k_cache.dtype());
  // A causal batch of up to 16 (a decode step, a verification pass): the decode kernel, one block per
  // (query, head, chunk) with every K/V row of a warp's batch loaded at once. Its results do not depend
  // on the batch (see LaunchDecodeAttentionBatch), as the general kernel's did not.
  kernels::AttentionProblem problem;
  problem.head_dim = static_cast<int>(d);
  problem.heads = heads;
  problem.kv_heads = kv_heads;
  problem.queries = static_cast<int>(std::min<int64_t>(n, INT32_MAX));
  problem.masked = d_mask != nullptr;
  problem.sinks_or_window = s.sinks != nullptr || s.window > 0;
  const kernels::AttentionKernel kernel = kernels::ChooseAttentionKernel(problem);
  const bool decode_kernel = kernel == kernels::AttentionKernel::kDecode;
  // With a device length (a captured pass) the host's prefix is only checked against the bound the
  // grid is sized for; the kernel reads the prefix itself.
  int64_t n_prefix = s.n_prefix;
  if (device_length_ != nullptr) {
    if (!decode_kernel) {
      return absl::FailedPreconditionError(Cat("cuda Attention: a device length needs the causal decode kernel (",
                                               n, " queries, head_dim ", d, mask.empty() ? "" : ", a mask", ")"));
    }
    if (s.n_prefix + n > device_length_max_keys_ || device_length_max_keys_ > k_cache.rows()) {
      return InvalidArgument("cuda Attention: ", s.n_prefix + n, " keys, a device length bound of ",
                             device_length_max_keys_, " and a cache of ", k_cache.rows(), " rows");
    }
    n_prefix = device_length_max_keys_ - n;
  }
  if (decode_kernel) {
    const size_t ws = kernels::DecodeAttentionWorkspaceBytes(heads, kv_heads, static_cast<int>(n_prefix + n),
                                                             static_cast<int>(d), static_cast<int>(n));
    if (decode_attn_ws_bytes_ < ws) {
      RETURN_IF_ERROR(EnsureScratch(&decode_attn_ws_, &decode_attn_ws_bytes_, ws, "the decode attention workspace"));
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(decode_attn_ws_, 0, decode_attn_ws_bytes_, stream_));
    }
    return SPECGEN_CUDA_STATUS(kernels::LaunchDecodeAttentionBatch(
        B(q).data(), B(k_cache).raw(), B(v_cache).raw(), kv_type, B(*out).data(),
        static_cast<int>(n_prefix), static_cast<int>(n), heads, kv_heads, static_cast<int>(d), s.scale,
        decode_attn_ws_, decode_attn_ws_bytes_, stream_, device_length_));
  }
  if (problem.sinks_or_window) {  // ChooseAttentionKernel chose the simple kernel
    kernels::AttentionSinksWindow extra;
    if (s.sinks != nullptr) {
      if (kernels::IsPacked(W(*s.sinks).type())) {
        return InvalidArgument("cuda Attention: sinks of a block-quantized type");
      }
      extra.sinks = W(*s.sinks).data();
      extra.sinks_type = W(*s.sinks).type();
    }
    if (s.window > 0) {
      // Positions are int32: a window past 2^30 sees everything any position can.
      extra.window = static_cast<int>(std::min<int64_t>(s.window, int64_t{1} << 30));
      ASSIGN_OR_RETURN(extra.positions, StagePositions(s.positions));
    }
    return SPECGEN_CUDA_STATUS(kernels::LaunchAttentionSimple(
        B(q).data(), B(k_cache).raw(), B(v_cache).raw(), kv_type, d_mask, B(*out).data(), static_cast<int>(n),
        static_cast<int>(s.n_prefix), heads, kv_heads, static_cast<int>(d), s.scale, extra, stream_));
  }
  if (kernel == kernels::AttentionKernel::kSimple) {
    return SPECGEN_CUDA_STATUS(kernels::LaunchAttentionSimple(
        B(q).data(), B(k_cache).raw(), B(v_cache).raw(), kv_type, d_mask, B(*out).data(), static_cast<int>(n),
        static_cast<int>(s.n_prefix), heads, kv_heads, static_cast<int>(d), s.scale, stream_));
  }
  const size_t ws = kernels::AttentionWorkspaceBytes(static_cast<int>(n), heads,
                                                     static_cast<int>(s.n_prefix + n),
                                                     static_cast<int>(d));
  RETURN_IF_ERROR(EnsureScratch(&attn_ws_, &attn_ws_bytes_, ws, "the attention workspace"));
  return SPECGEN_CUDA_STATUS(kernels::LaunchAttention(
      B(q).data(), B(k_cache).raw(), B(v_cache).raw(), kv_type, d_mask, B(*out).data(),
      static_cast<int>(n), static_cast<int>(s.n_prefix), heads, kv_heads, static_cast<int>(d), s.scale,
      attn_ws_, attn_ws_bytes_, stream_));
}

absl::StatusOr<CudaBackend::DeviceRouting> CudaBackend::RouteOnDevice(const Buffer& logits, int64_t k,
                                                                      const RouterParams& p) {
  const RouterNorm norm = p.norm;
  const int64_t n = logits.rows(), e = logits.cols();
  if (k <= 0 || k > e || k > kernels::kRouterMaxTopK || e > kernels::kRouterMaxExperts) {
    return InvalidArgument("cuda Route: top-", k, " of ", e, " experts");
  }
  const size_t bytes = static_cast<size_t>(n * k) * (sizeof(float) + sizeof(int32_t));
  RETURN_IF_ERROR(EnsureScratch(&route_, &route_bytes_, bytes, "router outputs"));
  DeviceRouting r{static_cast<float*>(route_), reinterpret_cast<int32_t*>(static_cast<float*>(route_) + n * k),
                  bytes};
  const kernels::RouterMode mode = norm == RouterNorm::kSoftmaxThenTopK
                                       ? kernels::RouterMode::kSoftmaxTopK
                                       : norm == RouterNorm::kSoftmaxTopKRenormalize
                                             ? kernels::RouterMode::kSoftmaxTopKRenorm
                                             : kernels::RouterMode::kTopKSoftmax;
  ASSIGN_OR_RETURN(const std::optional<RoutingOverrideState::Site> site, routing_override_.Take("cuda", n, e, k));
  if (n == 0) return r;
  if (IsSigmoidRouter(norm)) {  // RouteWith has checked the groups and the bias
    kernels::SigmoidRouterParams sp;
    if (p.selection_bias != nullptr) {
      sp.bias = W(*p.selection_bias).data();
      sp.bias_type = W(*p.selection_bias).type();
    }
    sp.groups = static_cast<int>(p.n_groups);
    sp.groups_used = static_cast<int>(p.groups_used);
    sp.renormalize = norm == RouterNorm::kSigmoidTopKRenormalize;
    sp.scale = p.scale;
    CUDA_RETURN_IF_ERROR(kernels::LaunchSigmoidRouterTopK(B(logits).data(), static_cast<int>(n), static_cast<int>(e),
                                                          static_cast<int>(k), sp, r.weights, r.ids, stream_));
  } else {
    CUDA_RETURN_IF_ERROR(kernels::LaunchRouterTopK(B(logits).data(), static_cast<int>(n),
                                                   static_cast<int>(e), static_cast<int>(k), mode, r.weights,
                                                   r.ids, stream_));
  }
  if (site) RETURN_IF_ERROR(OverrideRouting(*site, r.ids));
  return r;
}

absl::Status CudaBackend::PrepareRoutingOverride(std::shared_ptr<const RoutingTable> trace) {
  if (capturing_) return absl::FailedPreconditionError("cuda PrepareRoutingOverride: while capturing a graph");
  const RoutingTable* old = routing_override_.table();
  // A trace of the old one's shape goes where it was (a captured pass reads the new ids); any other
  // moves, and a captured pass holding the old address is recaptured. Work queued before reads the old
  // copy: a block written again is written in stream order after it.
  const bool same_shape = old != nullptr && trace != nullptr && old->positions() == trace->positions() &&
                          old->moe_layers() == trace->moe_layers() && old->top_k() == trace->top_k();
  if (!same_shape) {
    arena_->Free(routing_trace_dev_);
    routing_trace_dev_ = nullptr;
    ++scratch_generation_;
  }
  if (trace != nullptr) {
    const size_t bytes = trace->ids().size_bytes();
    if (routing_trace_dev_ == nullptr) {
      ASSIGN_OR_RETURN(routing_trace_dev_, arena_->Allocate(bytes, "the routing trace (benchmark regimes)"));
    }
    // Pageable source: the call returns once the bytes are staged, so the trace may go before the copy.
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(routing_trace_dev_, trace->ids().data(), bytes, cudaMemcpyHostToDevice, stream_));
  }
  routing_override_.Prepare(std::move(trace));
  return absl::OkStatus();
}

absl::Status CudaBackend::OverrideNextRouting(int layer, std::span<const int32_t> positions) {
  return routing_override_.Arm("cuda", layer, positions);
}

absl::Status CudaBackend::OverrideRouting(const RoutingOverrideState::Site& site, int32_t* ids) {
  const RoutingTable& trace = *site.table;
  const int n = static_cast<int>(site.positions.size());
  const int32_t* d_positions = nullptr;
  if (device_length_ != nullptr) {  // a captured pass: consecutive positions from the device's length
    for (int t = 0; t < n; ++t) {
      if (site.positions[t] != site.positions[0] + t) {
        return InvalidArgument("cuda routing override: position ", site.positions[t], " of row ", t,
                               " with a device length (consecutive positions only)");
      }
    }
  } else {
    for (int t = 0; t < n; ++t) {
      if (site.positions[t] < 0) return InvalidArgument("cuda routing override: negative position ", site.positions[t]);
    }
    ASSIGN_OR_RETURN(d_positions, StagePositions(site.positions));
  }
  kernels::RoutingTraceTable table;
  table.ids = static_cast<const int32_t*>(routing_trace_dev_);
  table.positions = trace.positions();
  table.layers = trace.moe_layers();
  table.k = trace.top_k();
  return SPECGEN_CUDA_STATUS(kernels::LaunchRoutingOverride(table, site.layer, d_positions,
                                                            d_positions ? nullptr : device_length_, n, ids, stream_));
}

absl::Status CudaBackend::Route(const Buffer& logits, int64_t k, RouterNorm norm, Routing* routing) {
  if (IsSigmoidRouter(norm)) return RouteWith(logits, k, RouterParams{norm}, routing);
  ASSIGN_OR_RETURN(const DeviceRouting r, RouteOnDevice(logits, k, RouterParams{norm}));
  return ReadRouting(r, logits.rows(), k, routing);
}

// What RouteWith and RouteAndRunExperts refuse of `p` beyond CheckRoute's shapes (RouteOnDevice
// takes the rest as given).
static absl::Status CheckRouterParams(const Buffer& logits, int64_t k, const RouterParams& p) {
  if (!IsSigmoidRouter(p.norm)) {
    if (p.selection_bias != nullptr || p.n_groups != 1) {
      return InvalidArgument("cuda Route: a selection bias or expert groups need sigmoid routing");
    }
    return absl::OkStatus();
  }
  const int64_t e = logits.cols();
  if (p.n_groups <= 0 || e % p.n_groups != 0 || p.groups_used <= 0 || p.groups_used > p.n_groups ||
      p.groups_used * (e / p.n_groups) < k || (p.n_groups > 1 && e / p.n_groups < 2)) {
    return InvalidArgument("cuda Route: top-", k, " of ", e, " experts in ", p.n_groups, " groups keeping ",
                           p.groups_used);
  }
  if (p.n_groups > kernels::kSigmoidRouterMaxGroups) {
    return InvalidArgument("cuda Route: ", p.n_groups, " expert groups (the router kernel takes at most ",
                           kernels::kSigmoidRouterMaxGroups, ")");
  }
  if (p.selection_bias != nullptr) {
    if (p.selection_bias->rows() * p.selection_bias->cols() != e) {
      return InvalidArgument("cuda Route: a selection bias of ", p.selection_bias->rows() * p.selection_bias->cols(),
                             " for ", e, " experts");
    }
    if (kernels::IsPacked(W(*p.selection_bias).type())) {
      return InvalidArgument("cuda Route: a selection bias of a block-quantized type");
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::RouteWith(const Buffer& logits, int64_t k, const RouterParams& p, Routing* routing) {
  RETURN_IF_ERROR(CheckRouterParams(logits, k, p));
  if (!IsSigmoidRouter(p.norm)) {
    RETURN_IF_ERROR(Route(logits, k, p.norm, routing));
    if (p.scale != 1.0f) {  // the CPU's one rounding a weight, on the host as there
      for (float& w : routing->weight) w *= p.scale;
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckRoute("cuda", logits, k));
  ASSIGN_OR_RETURN(const DeviceRouting r, RouteOnDevice(logits, k, p));
  return ReadRouting(r, logits.rows(), k, routing);
}

absl::Status CudaBackend::ReadRouting(const DeviceRouting& r, int64_t n, int64_t k, Routing* routing) {
  if (n == 0) {
    *routing = Routing{0, k, {}, {}};
    return absl::OkStatus();
  }
  if (r.bytes > readback_bytes_) {
    cudaFreeHost(readback_);
    readback_ = nullptr;
    readback_bytes_ = 0;
    CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&readback_), r.bytes, cudaHostAllocDefault));
    readback_bytes_ = r.bytes;
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(readback_, route_, r.bytes, cudaMemcpyDeviceToHost, stream_));
  // The host learns the layer's expert union here (docs/design.md §6.2).
  RETURN_IF_ERROR(Synchronize(SyncKind::kExpertUnion));
  routing->n_tokens = n;
  routing->k = k;
  routing->weight.resize(n * k);
  routing->expert.resize(n * k);
  std::memcpy(routing->weight.data(), readback_, n * k * sizeof(float));
  std::memcpy(routing->expert.data(), readback_ + n * k * sizeof(float), n * k * sizeof(int32_t));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ExpertSet>> CudaBackend::PrepareExperts(const ExpertWeights& experts) {
  const size_t e = experts.gate.size();
  if (e == 0 || e > static_cast<size_t>(kernels::kRouterMaxExperts) || experts.up.size() != e ||
      experts.down.size() != e) {
    return std::unique_ptr<ExpertSet>();
  }
  const Weight& g0 = *experts.gate[0];
  // One shape for all; gate and up of one type, down of one type (the same, or packed like gate and
  // up: the kernels' per-role types). Anything else routes on the host.
  const ElemType type = W(g0).type();
  const ElemType down_type = experts.down[0] != nullptr ? W(*experts.down[0]).type() : type;
  if (!kernels::RoutedExpertTypesSupported(type, down_type)) return std::unique_ptr<ExpertSet>();
  std::vector<const void*> addresses;  // gate[0..e), up[0..e), down[0..e), then each bias role present
  for (const auto* list : {&experts.gate, &experts.up, &experts.down}) {
    for (const Weight* w : *list) {
      const bool down = list == &experts.down;
      if (w == nullptr || W(*w).type() != (down ? down_type : type) || w->rows() != (down ? g0.cols() : g0.rows()) ||
          w->cols() != (down ? g0.rows() : g0.cols())) {
        return std::unique_ptr<ExpertSet>();
      }
      addresses.push_back(W(*w).data());
    }
  }
  // Biases: a role's for every expert or for none (RunRoutedExperts' rule), one element type for all of
  // them (the kernels read one), [ffn] for gate and up, [hidden] for down.
  const std::vector<const Weight*>* bias_lists[3] = {&experts.gate_bias, &experts.up_bias, &experts.down_bias};
  ElemType bias_type = ElemType::kF32;
  bool any_bias = false;
  size_t bias_offset[3] = {0, 0, 0};  // into addresses, 0: the role has none
  for (int role = 0; role < 3; ++role) {
    const std::vector<const Weight*>& list = *bias_lists[role];
    if (list.empty()) continue;
    if (list.size() != e) {
      return InvalidArgument("cuda PrepareExperts: biases for ", list.size(), " of ", e, " experts");
    }
    const int64_t want = role == 2 ? g0.cols() : g0.rows();
    bias_offset[role] = addresses.size();
    for (const Weight* b : list) {
      if (b == nullptr || b->rows() * b->cols() != want) {
        return InvalidArgument("cuda PrepareExperts: an expert bias of ", b ? b->rows() * b->cols() : 0,
                               " elements where ", want, " are needed");
      }
      if (kernels::IsPacked(W(*b).type()) || (any_bias && W(*b).type() != bias_type)) {
        return std::unique_ptr<ExpertSet>();  // the op-by-op path takes any mix
      }
      bias_type = W(*b).type();
      any_bias = true;
      addresses.push_back(W(*b).data());
    }
  }
  const size_t bytes = addresses.size() * sizeof(void*);
  ASSIGN_OR_RETURN(void* block, arena_->Allocate(bytes, "expert address tables"));
  // Load time, not the step: a plain copy (the host vector dies with this call).
  const cudaError_t copied = cudaMemcpy(block, addresses.data(), bytes, cudaMemcpyHostToDevice);
  if (copied != cudaSuccess) {
    arena_->Free(block);
    CUDA_RETURN_IF_ERROR(copied);
  }
  const auto* table = static_cast<const void* const*>(block);
  kernels::ExpertTables t;
  t.gate = table;
  t.up = table + e;
  t.down = table + 2 * e;
  t.experts = static_cast<int>(e);
  t.hidden = static_cast<int>(g0.cols());
  t.ffn = static_cast<int>(g0.rows());
  t.type = type;
  t.down_type = down_type;
  t.gate_bias = bias_offset[0] ? table + bias_offset[0] : nullptr;
  t.up_bias = bias_offset[1] ? table + bias_offset[1] : nullptr;
  t.down_bias = bias_offset[2] ? table + bias_offset[2] : nullptr;
  t.bias_type = bias_type;
  return std::unique_ptr<ExpertSet>(std::make_unique<CudaExpertSet>(t, arena_.get(), block));
}

absl::StatusOr<bool> CudaBackend::RouteAndRunExperts(const Buffer& x, const Buffer& router_logits, int64_t k,
                                                     const RouterParams& router, const ExpertFfnOptions& ffn,
                                                     const ExpertSet& experts, Buffer* out, bool accumulate) {
  const CudaExpertSet& set = static_cast<const CudaExpertSet&>(experts);
  const kernels::ExpertTables& t = set.tables();
  const int64_t n = x.rows();
  if (n < 1 || n > kernels::kRoutedExpertsMaxTokens) return false;
  if (set.fetch() != nullptr && !set.fetch()->Takes(n * k)) return false;  // the host streams this one
  if (x.cols() != t.hidden || out->cols() != t.hidden || out->rows() != n || router_logits.rows() != n ||
      router_logits.cols() != t.experts) {
    return InvalidArgument("cuda RouteAndRunExperts: x [", n, ", ", x.cols(), "], router logits [",
                           router_logits.rows(), ", ", router_logits.cols(), "], out [", out->rows(), ", ",
                           out->cols(), "] for ", t.experts, " experts of hidden ", t.hidden);
  }
  RETURN_IF_ERROR(CheckRouterParams(router_logits, k, router));
  kernels::ExpertFfn kf;
  switch (ffn.act) {
    case FfnActivation::kSwiGlu: break;
    case FfnActivation::kSwiGluClamped:
      kf.clamped = true;
      kf.alpha = ffn.alpha;
      kf.limit = ffn.limit;
      break;
    default: return InvalidArgument("cuda RouteAndRunExperts: an expert activation it does not know");
  }
  // A softmax router's routed scale is RouteWith's host multiply (one rounding a weight), done by the
  // experts' plan kernel instead; a sigmoid router's kernel applies its own.
  kf.route_scale = IsSigmoidRouter(router.norm) ? 1.0f : router.scale;
  ASSIGN_OR_RETURN(const DeviceRouting r, RouteOnDevice(router_logits, k, router));
  // A streamed layer: its routed experts into cache slots, the tables pointed at them (on the device).
  if (set.fetch() != nullptr) RETURN_IF_ERROR(set.fetch()->Fetch(r.ids, static_cast<int>(n * k), stream_));
  const size_t ws = kernels::RoutedExpertsWorkspaceBytes(static_cast<int>(n), static_cast<int>(k), t.hidden, t.ffn);
  RETURN_IF_ERROR(EnsureScratch(&experts_ws_, &experts_ws_bytes_, ws, "the routed experts' workspace"));
  CUDA_RETURN_IF_ERROR(kernels::LaunchRoutedExperts(t, B(x).data(), static_cast<int>(n), r.ids, r.weights,
                                                    static_cast<int>(k), experts_ws_, experts_ws_bytes_,
                                                    B(*out).data(), accumulate, stream_, gemv_order_,
                                                    kernels::PackedLayout::kAuto, kf));
  return true;
}

absl::Status CudaBackend::GatherRows(const Buffer& src, std::span<const int32_t> rows, Buffer* dst) {
  RETURN_IF_ERROR(CheckGatherRows("cuda", src, rows, *dst));
  if (rows.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(void* d_rows, Stage(rows.data(), rows.size_bytes()));
  return SPECGEN_CUDA_STATUS(kernels::LaunchGatherRows(B(src).data(), static_cast<const int32_t*>(d_rows),
                                                       static_cast<int>(rows.size()),
                                                       static_cast<int>(src.cols()), B(*dst).data(),
                                                       stream_));
}

absl::Status CudaBackend::ScatterAddScaled(const Buffer& src, std::span<const int32_t> rows,
                                           std::span<const float> scales, Buffer* dst) {
  RETURN_IF_ERROR(CheckScatterAddScaled("cuda", src, rows, scales, *dst));
  if (rows.empty()) return absl::OkStatus();
  // Rows and scales travel together in one staged block.
  std::vector<int32_t> packed(rows.size() * 2);
  std::memcpy(packed.data(), rows.data(), rows.size_bytes());
  std::memcpy(packed.data() + rows.size(), scales.data(), scales.size_bytes());
  ASSIGN_OR_RETURN(void* d, Stage(packed.data(), packed.size() * sizeof(int32_t)));
  const int32_t* d_rows = static_cast<const int32_t*>(d);
  const float* d_scales = reinterpret_cast<const float*>(d_rows + rows.size());
  return SPECGEN_CUDA_STATUS(kernels::LaunchScatterAddScaled(B(src).data(), d_rows, d_scales,
                                                             static_cast<int>(rows.size()),
                                                             static_cast<int>(src.cols()),
                                                             B(*dst).data(), stream_));
}

absl::StatusOr<std::unique_ptr<Buffer>> CudaBackend::NewCacheBuffer(int64_t capacity_rows, int64_t cols,
                                                                    DType type) {
  if (capacity_rows < 0 || cols <= 0 || !IsCacheType(type)) {
    return InvalidArgument("cuda NewCacheBuffer: [", capacity_rows, ", ", cols, "] of ", Name(type),
                           " (a KV cache is f32, f16 or bf16)");
  }
  const size_t bytes = static_cast<size_t>(capacity_rows * cols) * kernels::ElemBytes(CacheElemType(type));
  ASSIGN_OR_RETURN(void* p, arena_->Allocate(bytes, Cat("a KV cache buffer [", capacity_rows, ", ", cols, "] of ",
                                                        Name(type))));
  return std::unique_ptr<Buffer>(new CudaBuffer(capacity_rows, cols, arena_.get(), p, type));
}

}  // namespace specgen
