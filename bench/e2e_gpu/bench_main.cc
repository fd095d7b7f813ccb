// e2e_gpu_bench's entry point: the suites register themselves from their own files
// (draft_decode, draft_anatomy, kernel_chain, target_pass, generation, graph_memory).
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
