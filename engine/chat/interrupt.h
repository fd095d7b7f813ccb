// Ctrl-C for the chat: a SIGINT handler that only sets a flag, which the reply's token sink and the
// input reader check, so that Ctrl-C stops the current answer (or discards the line being typed)
// and the session goes on. Installed without SA_RESTART so that a blocked read() returns EINTR.
#pragma once

namespace specgen::chat {

void InstallInterruptHandler();
bool InterruptRequested();
void ClearInterrupt();

}  // namespace specgen::chat
