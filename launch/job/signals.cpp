#include "launch/job/signals.h"

#include <csignal>
#include <cstdio>

namespace tetra::launch {

namespace {

// Highest priority received so far; written only by the handler, read by the trainer.
volatile std::sig_atomic_t g_priority = 0;

constexpr int kStopSignals[] = {SIGTERM, SIGUSR1, SIGINT};

void on_stop_signal(int sig) {
  const int p = stop_signal_priority(sig);
  // The same signal a second time: the user (or scheduler) insists — die the default way.
  static volatile std::sig_atomic_t seen[4] = {0, 0, 0, 0};
  if (p > 0 && p < 4) {
    if (seen[p]) {
      std::signal(sig, SIG_DFL);
      std::raise(sig);
      return;
    }
    seen[p] = 1;
  }
  if (p > g_priority) g_priority = p;
}

}  // namespace

int exit_code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Config:
    case ErrorKind::Usage: return exit_code::kConfig;
    case ErrorKind::Comm: return exit_code::kCommTimeout;
    default: return exit_code::kError;
  }
}

int stop_signal_priority(int signal) {
  if (signal == SIGTERM) return 3;
  if (signal == SIGUSR1) return 2;
  if (signal == SIGINT) return 1;
  return 0;
}

int signal_of_priority(int priority) {
  switch (priority) {
    case 3: return SIGTERM;
    case 2: return SIGUSR1;
    case 1: return SIGINT;
    default: return 0;
  }
}

void install_stop_signal_handlers() {
  static bool installed = false;
  if (installed) return;
  for (int sig : kStopSignals) {
    struct sigaction sa {};
    sa.sa_handler = &on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // a signal during a write or a poll must not fail the call
    if (sigaction(sig, &sa, nullptr) != 0)
      TETRA_FAIL(Internal, "cannot install the handler for ", signal_name(sig));
  }
  // A write past the file-size limit (ulimit -f) fails with EFBIG, an error the writer reports
  // and the job ends on (exit 1, the ledger closed), instead of killing the process by SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  installed = true;
}

int stop_signal() { return signal_of_priority(g_priority); }

void clear_stop_signal() { g_priority = 0; }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGINT: return "SIGINT";
    case SIGKILL: return "SIGKILL";
    case SIGSTOP: return "SIGSTOP";
    case SIGHUP: return "SIGHUP";
    default: {
      static thread_local char buf[24];
      std::snprintf(buf, sizeof buf, "signal %d", signal);
      return buf;
    }
  }
}

}  // namespace tetra::launch
