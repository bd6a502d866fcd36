#include "launch/fault_injection.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "runtime/error.h"

namespace tetra::launch {

namespace {

const char* kSyntax =
    "TETRA_FAULT holds comma-separated ACTION@STEP[:rank=R] with ACTION one of kill, stop, term, usr1, nan "
    "(e.g. kill@7:rank=1)";

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

FaultPlan FaultPlan::from_environment() {
  const char* v = std::getenv("TETRA_FAULT");
  return v && *v ? parse(v) : FaultPlan();
}

void FaultPlan::after_step(int64_t step, int rank) const {
  for (const Fault& f : faults_) {
    if (f.step != step || f.rank != rank || f.action == Action::Nan) continue;
    const char* names[] = {"SIGKILL", "SIGSTOP", "SIGTERM", "SIGUSR1"};
    const int signals[] = {SIGKILL, SIGSTOP, SIGTERM, SIGUSR1};
    const int k = static_cast<int>(f.action);
    std::fprintf(stderr, "tetra: TETRA_FAULT: rank %d raises %s on itself after step %lld\n", rank, names[k],
                 static_cast<long long>(step));
    std::fflush(stdout);
    std::fflush(stderr);
    std::raise(signals[k]);
  }
}

bool FaultPlan::poison_loss(int64_t step, int rank) const {
  for (const Fault& f : faults_)
    if (f.action == Action::Nan && f.step == step && f.rank == rank) return true;
  return false;
}

}  // namespace tetra::launch
