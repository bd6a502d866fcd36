// Graceful stops and the exit codes of `tetra train` (docs/operations.md, "Signals and exit codes").
//
// SIGTERM and SIGUSR1 (SLURM's preemption and time-limit warnings) and SIGINT do not kill the
// trainer: the handler only records the signal. The trainer all-reduces that flag with MAX once
// per step, so every rank stops after the same step, writes a checkpoint and exits with
// kPreempted (TERM, USR1) or kInterrupted (INT). A second delivery of the same signal kills the
// process at once (the default action), for a user who really means it.
#pragma once
#include "runtime/error.h"

namespace tetra::launch {

namespace exit_code {
inline constexpr int kFinished = 0;      // every step done, final checkpoint (if any) committed
inline constexpr int kError = 1;         // a failure (data, checkpoint, device, internal): look at the message
inline constexpr int kConfig = 2;        // config or usage error, found before any work
inline constexpr int kNonFinite = 3;     // train.on_nonfinite: stop — a checkpoint of the last good state was written
inline constexpr int kCommTimeout = 4;   // a collective did not complete within run.comm_timeout_s
inline constexpr int kPreempted = 75;    // SIGTERM/SIGUSR1: checkpoint written, requeue me (EX_TEMPFAIL)
inline constexpr int kInterrupted = 130; // SIGINT: checkpoint written, not to be requeued (128 + SIGINT)
}  // namespace exit_code

// The exit code for an error of this kind (Config/Usage → 2, Comm → 4, else 1).
int exit_code_for(ErrorKind kind);

// Installs the handlers for SIGTERM, SIGUSR1 and SIGINT, and ignores SIGXFSZ (idempotent).
void install_stop_signal_handlers();
// The signal that asked this process to stop (SIGTERM, SIGUSR1 or SIGINT), 0 if none yet.
// When several arrived, the one that ranks highest in stop_signal_priority().
int stop_signal();
// Order used to pick one reason when ranks received different signals: TERM > USR1 > INT > none.
// The trainer all-reduces this value with MAX.
int stop_signal_priority(int signal);
int signal_of_priority(int priority);
// Forgets a received signal (tests).
void clear_stop_signal();

// "SIGTERM", "SIGUSR1", ... ("signal N" for others).
const char* signal_name(int signal);

}  // namespace tetra::launch
