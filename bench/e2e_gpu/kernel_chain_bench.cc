// What a chain of dependent kernels costs before any weight is read (the floor under the draft's
// ~140 kernels a token), and what queuing a kernel costs the host:
//  - BM_KernelChainFloor: a graph of 140 dependent kernels doing nothing or a GEMV prologue's read +
//    reduction, with and without PDL: what a kernel boundary costs before any weight is read; work 2
//    and 3 add 1024 FMAs a thread as straight code in 8 alternating kernels or as a loop: what
//    fetching a kernel's instructions costs; work 4 hands each link on through a counter in L2 instead
//    of the grid boundary (bench/e2e_gpu/kernel_chain.cu).
//  - BM_KernelChainUnderLoad: that chain while other blocks stream HBM on another stream: what HBM
//    traffic that is not the chain's does to its L2 round trips.
//  - BM_HostLaunchCost: what queuing one kernel costs the host, with and without the PDL attribute.
// Skips (with an error message) without a device.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <chrono>

#include "bench/e2e_gpu/bench_models.h"
#include "bench/e2e_gpu/kernel_chain.h"

namespace specgen::e2e {
namespace {

// The 140-link chain of bench::LaunchChainLink kernels (ping-ponging between buf's two 1024-float
// halves) captured on `stream` and instantiated; null when the capture fails.
constexpr int kChainLinks = 140;  // the draft decode's 5 kernels a layer x 28 layers
// work 4 (links waiting on counters): `counters` [kChainLinks], zeroed by the graph's first node.
cudaGraphExec_t CaptureChain(float* buf, int blocks, int work, bool pdl, cudaStream_t stream,
                             unsigned* counters = nullptr) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (counters != nullptr) cudaMemsetAsync(counters, 0, kChainLinks * sizeof(unsigned), stream);
  for (int i = 0; i < kChainLinks; ++i) {
    (void)bench::LaunchChainLink(buf + (i % 2) * 1024, buf + ((i + 1) % 2) * 1024, blocks, work, pdl && i > 0,
                                 stream, i, counters);
  }
  const bool ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess &&
                  cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (graph) cudaGraphDestroy(graph);
  if (!ok && exec) {
    cudaGraphExecDestroy(exec);
    exec = nullptr;
  }
  return exec;
}

// A graph of 140 dependent kernels (the draft decode's 5 a layer x 28 layers) that do nothing (work 0)
// or a decode GEMV prologue's read + block reduction (work 1), over `blocks` blocks, with and without
// PDL: us per kernel is what each kernel boundary of the decode graph costs before any weight is read.
// work 2 / 3: the same plus 1024 FMAs a thread, straight code in 8 alternating kernels / a loop.
void BM_KernelChainFloor(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const int blocks = static_cast<int>(state.range(0));
  const int work = static_cast<int>(state.range(1));
  const bool pdl = state.range(2) != 0;
  constexpr int kLinks = kChainLinks, kReplays = 50;
  float* buf = nullptr;
  unsigned* counters = nullptr;
  if (cudaMalloc(&buf, sizeof(float) * 2 * 1024) != cudaSuccess ||
      cudaMalloc(&counters, sizeof(unsigned) * kChainLinks) != cudaSuccess) {
    return state.SkipWithError("cudaMalloc");
  }
  cudaMemset(buf, 0, sizeof(float) * 2 * 1024);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaGraphExec_t exec = CaptureChain(buf, blocks, work, pdl, stream, work == 4 ? counters : nullptr);
  const bool ok = exec != nullptr;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  double us = 0;
  if (ok) {
    cudaGraphLaunch(exec, stream);  // warm-up
    for (auto _ : state) {
      cudaEventRecord(start, stream);
      for (int r = 0; r < kReplays; ++r) cudaGraphLaunch(exec, stream);
      cudaEventRecord(stop, stream);
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      us = ms * 1e3 / (kReplays * kLinks);
    }
    state.counters["us_per_kernel"] = us;
    state.counters["us_per_token_5x28"] = us * kLinks;
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(buf);
  cudaFree(counters);
  if (!ok || cudaGetLastError() != cudaSuccess) state.SkipWithError("graph capture or launch failed");
}
BENCHMARK(BM_KernelChainFloor)
    ->ArgNames({"blocks", "work", "pdl"})
    ->Args({1, 0, 1})->Args({132, 0, 1})->Args({512, 0, 1})->Args({132, 1, 1})->Args({512, 1, 1})
    ->Args({132, 0, 0})->Args({132, 1, 0})->Args({132, 2, 1})->Args({132, 3, 1})
    ->Args({132, 4, 1})->Args({512, 4, 1})->Args({264, 1, 1})->Args({264, 4, 1})
    ->Unit(benchmark::kMillisecond)->Iterations(3);

// What the host pays to queue one kernel (no graph): the chain's links launched one by one, 132 blocks
// doing a prologue's work (work 1), with and without the PDL attribute: the driver's floor under each
// Backend op of an eagerly launched pass (BM_TargetPass's us_host_launch counts ~230 of those a pass).
void BM_HostLaunchCost(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const bool pdl = state.range(0) != 0;
  constexpr int kLaunches = 230;
  float* buf = nullptr;
  if (cudaMalloc(&buf, sizeof(float) * 2 * 1024) != cudaSuccess) return state.SkipWithError("cudaMalloc");
  cudaMemset(buf, 0, sizeof(float) * 2 * 1024);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  const auto launch_all = [&] {
    for (int i = 0; i < kLaunches; ++i) {
      const float* in = buf + (i % 2) * 1024;
      (void)bench::LaunchChainLink(in, buf + ((i + 1) % 2) * 1024, 132, 1, pdl, stream, i % 8);
    }
  };
  launch_all();  // warm-up (module loading)
  cudaStreamSynchronize(stream);
  double host_s = 0, total_s = 0;
  int64_t rounds = 0;
  for (auto _ : state) {
    for (int r = 0; r < 20; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      launch_all();
      const auto t1 = std::chrono::steady_clock::now();
      cudaStreamSynchronize(stream);
      host_s += std::chrono::duration<double>(t1 - t0).count();
      total_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++rounds;
    }
  }
  state.counters["us_host_per_launch"] = host_s * 1e6 / (rounds * kLaunches);
  state.counters["us_per_launch"] = total_s * 1e6 / (rounds * kLaunches);
  cudaStreamDestroy(stream);
  cudaFree(buf);
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("launch failed");
}
BENCHMARK(BM_HostLaunchCost)->ArgNames({"pdl"})->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

// The same chain (132 blocks, work 1, PDL) while `readers` blocks on another stream read 4 GB of HBM
// over and over: how much the chain's L2 round trips slow down under HBM traffic that is not theirs (the
// decode graph's weight loads issued early), and the traffic's own GB/s. At most 66 readers: with a
// reader block on every multiprocessor the chain's blocks find no room and never end (nor do the readers,
// which wait for the chain's end to stop).
void BM_KernelChainUnderLoad(benchmark::State& state) {
  if (!CudaBackend::DeviceAvailable()) return state.SkipWithError("no CUDA device");
  const int readers = static_cast<int>(state.range(0));
  constexpr int kLinks = kChainLinks, kReplays = 50;
  constexpr size_t kStreamBytes = size_t{4} << 30;
  float* buf = nullptr;
  void* big = nullptr;
  int* stop = nullptr;
  unsigned long long* read = nullptr;
  if (cudaMalloc(&buf, sizeof(float) * 2 * 1024) != cudaSuccess ||
      cudaMalloc(&big, kStreamBytes) != cudaSuccess || cudaMalloc(&stop, 64) != cudaSuccess ||
      cudaMalloc(&read, 64) != cudaSuccess) {
    return state.SkipWithError("cudaMalloc");
  }
  cudaMemset(buf, 0, sizeof(float) * 2 * 1024);
  cudaMemset(big, 1, kStreamBytes);
  cudaStream_t stream, side;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  cudaGraphExec_t exec = CaptureChain(buf, 132, 1, true, stream);
  const bool ok = exec != nullptr;
  cudaEvent_t start, stop_ev, side_start, side_stop;
  for (cudaEvent_t* e : {&start, &stop_ev, &side_start, &side_stop}) cudaEventCreate(e);
  double us = 0, gbps = 0;
  if (ok) {
    cudaGraphLaunch(exec, stream);  // warm-up
    cudaStreamSynchronize(stream);
    for (auto _ : state) {
      cudaMemset(stop, 0, 64);
      cudaMemset(read, 0, 64);
      cudaDeviceSynchronize();
      if (readers > 0) {
        cudaEventRecord(side_start, side);
        (void)bench::LaunchHbmReader(big, kStreamBytes, readers, stop, read,
                                     reinterpret_cast<unsigned*>(read + 1), side);
        cudaEventRecord(side_stop, side);
      }
      cudaEventRecord(start, stream);
      for (int r = 0; r < kReplays; ++r) cudaGraphLaunch(exec, stream);
      cudaEventRecord(stop_ev, stream);
      cudaEventSynchronize(stop_ev);
      const int one = 1;
      cudaMemcpy(stop, &one, sizeof(int), cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();
      float ms = 0, side_ms = 0;
      cudaEventElapsedTime(&ms, start, stop_ev);
      us = ms * 1e3 / (kReplays * kLinks);
      if (readers > 0) {
        unsigned long long bytes = 0;
        cudaMemcpy(&bytes, read, sizeof(bytes), cudaMemcpyDeviceToHost);
        cudaEventElapsedTime(&side_ms, side_start, side_stop);
        gbps = side_ms > 0 ? bytes / (side_ms * 1e6) : 0.0;
      }
    }
    state.counters["us_per_kernel"] = us;
    state.counters["reader_GB_per_s"] = gbps;
  }
  if (exec) cudaGraphExecDestroy(exec);
  for (cudaEvent_t e : {start, stop_ev, side_start, side_stop}) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
  cudaStreamDestroy(side);
  for (void* p : {static_cast<void*>(buf), big, static_cast<void*>(stop), static_cast<void*>(read)}) {
    cudaFree(p);
  }
  if (!ok || cudaGetLastError() != cudaSuccess) state.SkipWithError("graph capture or launch failed");
}
BENCHMARK(BM_KernelChainUnderLoad)
    ->ArgNames({"readers"})
    ->Arg(0)->Arg(8)->Arg(16)->Arg(33)->Arg(66)
    ->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace
}  // namespace specgen::e2e
