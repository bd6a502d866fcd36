#include "launch/job/fault_injection.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "runtime/error.h"

namespace tetra::launch {

namespace {

const char* kSyntax =
    "TETRA_FAULT holds comma-separated ACTION@STEP[:rank=R] with ACTION one of kill, stop, term, usr1, nan, "
    "nan_grad, stop_in_step, kill_in_save, save_error, data_stall (e.g. kill@7:rank=1)";

void raise_now(int rank, int signal, const char* name, const std::string& when) {
  std::fprintf(stderr, "tetra: TETRA_FAULT: rank %d raises %s on itself %s\n", rank, name, when.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::raise(signal);
}

int64_t parse_int(const std::string& text, const std::string& fault) {
  size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || v < 0)
    TETRA_FAIL(Usage, "TETRA_FAULT: '", fault, "': '", text, "' is not a non-negative integer; ", kSyntax);
  return v;
}

}  // namespace

FaultPlan FaultPlan::parse(const std::string& spec) {
  FaultPlan plan;
  std::stringstream all(spec);
  for (std::string item; std::getline(all, item, ',');) {
    if (item.empty()) continue;
    const size_t at = item.find('@');
    if (at == std::string::npos) TETRA_FAIL(Usage, "TETRA_FAULT: '", item, "' has no @STEP; ", kSyntax);
    const std::string action = item.substr(0, at);
    Fault f{};
    if (action == "kill") f.action = Action::Kill;
    else if (action == "stop") f.action = Action::Stop;
    else if (action == "term") f.action = Action::Term;
    else if (action == "usr1") f.action = Action::Usr1;
    else if (action == "nan") f.action = Action::Nan;
    else if (action == "nan_grad") f.action = Action::NanGrad;
    else if (action == "stop_in_step") f.action = Action::StopInStep;
    else if (action == "kill_in_save") f.action = Action::KillInSave;
    else if (action == "save_error") f.action = Action::SaveError;
    else if (action == "data_stall") f.action = Action::DataStall;
    else TETRA_FAIL(Usage, "TETRA_FAULT: '", item, "': unknown action '", action, "'; ", kSyntax);
    std::string rest = item.substr(at + 1);
    const size_t colon = rest.find(':');
    f.step = parse_int(rest.substr(0, colon), item);
    f.rank = 0;
    if (colon != std::string::npos) {
      const std::string opt = rest.substr(colon + 1);
      if (opt.rfind("rank=", 0) != 0) TETRA_FAIL(Usage, "TETRA_FAULT: '", item, "': expected rank=R after ':'; ", kSyntax);
      f.rank = static_cast<int>(parse_int(opt.substr(5), item));
    }
    plan.faults_.push_back(f);
  }
  return plan;
}

FaultPlan FaultPlan::from_environment(int world_size) {
  const char* v = std::getenv("TETRA_FAULT");
  FaultPlan plan = v && *v ? parse(v) : FaultPlan();
  for (const Fault& f : plan.faults_)
    if (f.rank < 0 || f.rank >= world_size)
      TETRA_FAIL(Usage, "TETRA_FAULT='", v, "' names rank ", f.rank, ", but the job has ranks 0 to ", world_size - 1,
                 " only; ", kSyntax);
  return plan;
}

void FaultPlan::after_step(int64_t step, int rank) const {
  for (const Fault& f : faults_) {
    if (f.step != step || f.rank != rank || f.action > Action::Usr1 || f.action == Action::Nan) continue;
    const char* names[] = {"SIGKILL", "SIGSTOP", "SIGTERM", "SIGUSR1"};
    const int signals[] = {SIGKILL, SIGSTOP, SIGTERM, SIGUSR1};
    const int k = static_cast<int>(f.action);
    raise_now(rank, signals[k], names[k], "after step " + std::to_string(step));
  }
}

bool FaultPlan::poison_loss(int64_t step, int rank) const {
  for (const Fault& f : faults_)
    if (f.action == Action::Nan && f.step == step && f.rank == rank) return true;
  return false;
}

bool FaultPlan::poison_grad(int64_t step, int rank) const {
  for (const Fault& f : faults_)
    if (f.action == Action::NanGrad && f.step == step && f.rank == rank) return true;
  return false;
}

void FaultPlan::inside_step(int64_t step, int rank) const {
  for (const Fault& f : faults_)
    if (f.action == Action::StopInStep && f.step == step && f.rank == rank)
      raise_now(rank, SIGSTOP, "SIGSTOP", "inside step " + std::to_string(step) + ", after its first forward");
}

void FaultPlan::inside_save(int64_t step, int rank) const {
  for (const Fault& f : faults_) {
    if (f.step != step || f.rank != rank) continue;
    if (f.action == Action::KillInSave)
      raise_now(rank, SIGKILL, "SIGKILL", "while writing its file of the checkpoint of step " + std::to_string(step));
    if (f.action == Action::SaveError)
      TETRA_FAIL(Checkpoint, "TETRA_FAULT save_error@", step, ": rank ", rank,
                 "'s write of its checkpoint file fails as on a full disk (No space left on device)");
  }
}

bool FaultPlan::blocks_run_ahead(int64_t step) const {
  for (const Fault& f : faults_) {
    const bool after = f.action <= Action::Usr1 || f.action == Action::KillInSave || f.action == Action::SaveError;
    if ((after && f.step == step) || (f.action == Action::StopInStep && f.step == step + 1)) return true;
  }
  return false;
}

double FaultPlan::data_stall(int64_t step, int rank) const {
  for (const Fault& f : faults_)
    if (f.action == Action::DataStall && f.step == step && f.rank == rank) return 0.5;
  return 0.0;
}

}  // namespace tetra::launch
