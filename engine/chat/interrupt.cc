#include "engine/chat/interrupt.h"

#include <signal.h>

#include <atomic>

namespace specgen::chat {
namespace {

std::atomic<bool> g_interrupted{false};

void OnSigint(int) { g_interrupted.store(true, std::memory_order_relaxed); }

}  // namespace

void InstallInterruptHandler() {
  struct sigaction action = {};
  action.sa_handler = OnSigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a read() waiting for input returns EINTR
  sigaction(SIGINT, &action, nullptr);
}

bool InterruptRequested() { return g_interrupted.load(std::memory_order_relaxed); }
void ClearInterrupt() { g_interrupted.store(false, std::memory_order_relaxed); }

}  // namespace specgen::chat
