#include "launch/train/step_accounting.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "runtime/memory.h"
#include "runtime/trace.h"

namespace tetra::launch {

namespace fs = std::filesystem;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(t / 3600), static_cast<long long>(t % 3600 / 60));
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  else
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(t));
  return buf;
}

std::string format_rate(double tokens_per_s) {
  char buf[32];
  if (tokens_per_s >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", tokens_per_s / 1e6);
  else if (tokens_per_s >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fK", tokens_per_s / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", tokens_per_s);
  return buf;
}

// "812 MiB", "61.25 GiB".
std::string format_bytes(double bytes) {
  char buf[32];
  constexpr double kMiB = 1024.0 * 1024.0;
  if (bytes >= 1024.0 * kMiB)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * kMiB));
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / kMiB);
  return buf;
}

// The metrics row's numbers as TensorBoard scalars, grouped by what they are: train/ (loss, lr,
// grad norm, tokens), perf/ (throughput, MFU, the step's time and its parts in ms), memory/, moe/, val/.
std::vector<std::pair<std::string, double>> tensorboard_scalars(const MetricsRecord& m) {
  std::vector<std::pair<std::string, double>> v{{"train/loss", m.loss},
                                                {"train/lr", m.lr},
                                                {"train/grad_norm", m.grad_norm},
                                                {"train/tokens", static_cast<double>(m.tokens)},
                                                {"perf/tokens_per_s", m.tokens_per_s},
                                                {"perf/step_ms", m.step_ms}};
  for (auto it = m.extra.begin(); it != m.extra.end(); ++it) {
    if (!it.value().is_number()) continue;
    const std::string& k = it.key();
    std::string tag = "perf/" + k;
    if (k == "val_loss")
      tag = "val/loss";
    else if (k == "mem_peak_gib")
      tag = "memory/peak_gib";
    else if (k.rfind("moe_", 0) == 0)
      tag = "moe/" + k.substr(4);
    v.emplace_back(tag, it.value().get<double>());
  }
  return v;
}

}  // namespace

StepAccounting::StepAccounting(const Config& cfg, int rank, int world_size, Communicator& world, Device device,
                               GoodputLedger* ledger, MetricsLog* metrics, TensorBoardWriter* tensorboard,
                               const RunInfo& run_info, const CommScheduler& comm, const CommScheduler* p2p,
                               int64_t tokens_per_step, int64_t start_step, std::vector<int> moe_blocks)
    : cfg_(cfg),
      rank_(rank),
      world_size_(world_size),
      world_(world),
      device_(device),
      ledger_(ledger),
      metrics_(metrics),
      tensorboard_(tensorboard),
      flops_per_token_(run_info.flops_per_token),
      peak_flops_(run_info.peak_flops_per_device * run_info.devices),
      comm_(comm),
      p2p_(p2p),
      tokens_per_step_(tokens_per_step),
      start_step_(start_step),
      moe_blocks_(std::move(moe_blocks)) {}

void StepAccounting::start(int64_t step) {
  ledger_clock_ = ledger_ ? ledger_->now() : 0;
  trace_begin(step);
  clock_ = now_s();
}

double StepAccounting::finish(int64_t step, StepResult& r) {
  const double t_start = ledger_clock_;
  const double finished = now_s();
  const double seconds = finished - clock_;
  clock_ = finished;
  ledger_clock_ = ledger_ ? ledger_->now() : 0;
  trace_end(step, seconds);
  ledger_row(step, r, seconds, t_start);
  return seconds;
}

void StepAccounting::ledger_row(int64_t step, StepResult& r, double seconds, double t_start) {
  // The step-level rows of the ledger come from every rank: each category is the mean over the
  // ranks of its share of that rank's step, times the step's time on rank 0 — so the categories
  // still add up within the step (docs/goodput.md). Taken before anything after the step can
  // stop a rank, so every rank takes part.
  const double span = ledger_ ? ledger_->now() - t_start : seconds;
  if (world_.size() > 1 && seconds > 0) {
    std::vector<double> share{std::min(1.0, r.exposed_comm_s / seconds), std::min(1.0, r.optimizer_s / seconds),
                              std::min(1.0, r.data_wait_s / seconds), std::min(1.0, r.bubble_s / seconds)};
    // The split of exposed communication by mesh axis (the same axes on every rank) likewise.
    for (const auto& [axis, s] : r.exposed_comm_axis_s) share.push_back(std::min(1.0, s / seconds));
    world_.all_reduce_host(share, ReduceOp::Sum);
    const double n = static_cast<double>(world_.size());
    r.exposed_comm_s = share[0] / n * span;
    r.optimizer_s = share[1] / n * span;
    r.data_wait_s = share[2] / n * span;
    r.bubble_s = share[3] / n * span;
    size_t k = 4;
    for (auto& [axis, s] : r.exposed_comm_axis_s) s = share[k++] / n * span;
  }
  if (!ledger_) return;
  StepTiming t;
  t.step = step + 1;
  t.start = t_start;
  t.end = t_start + span;
  t.tokens = tokens_per_step_;
  t.breakdown.exposed_comm = r.exposed_comm_s;
  t.breakdown.bubble = r.bubble_s;
  t.breakdown.exposed_comm_by_axis = r.exposed_comm_axis_s;
  t.breakdown.optimizer = r.optimizer_s;
  t.breakdown.data_wait = r.data_wait_s;
  t.loss = r.loss;
  t.skipped = r.skipped;
  ledger_->step(t);
}

void StepAccounting::log(int64_t step, const StepResult& r, double step_seconds, std::optional<double> val_loss,
                         int64_t tokens_seen) {
  const int64_t tokens = tokens_per_step_;
  double rate = static_cast<double>(tokens) / step_seconds;
  tokens_per_s_ema_ = tokens_per_s_ema_ == 0 ? rate : 0.9 * tokens_per_s_ema_ + 0.1 * rate;
  MetricsRecord m;
  m.step = step + 1;
  m.loss = r.loss;
  m.lr = r.lr;
  m.grad_norm = r.grad_norm;
  m.tokens = tokens_seen;
  m.step_ms = step_seconds * 1e3;
  m.tokens_per_s = rate;
  m.extra["exposed_comm_ms"] = r.exposed_comm_s * 1e3;
  m.extra["data_wait_ms"] = r.data_wait_s * 1e3;
  m.extra["optimizer_ms"] = r.optimizer_s * 1e3;
  if (p2p_) m.extra["bubble_ms"] = r.bubble_s * 1e3;
  for (const auto& [axis, seconds] : r.exposed_comm_axis_s) m.extra["exposed_comm_ms_" + axis] = seconds * 1e3;
  // Model FLOPs of the step's tokens over its time, against the peak of every device (the
  // report's MFU, per step).
  if (peak_flops_ > 0) m.extra["mfu"] = flops_per_token_ * rate / peak_flops_;
  // tetra's allocations on this device at their peak since the first step (runtime/memory.h).
  const double mem_peak = static_cast<double>(peak_allocated_bytes(device_));
  m.extra["mem_peak_gib"] = mem_peak / (1024.0 * 1024.0 * 1024.0);
  if (r.skipped) m.extra["skipped"] = true;
  // Each MoE layer's max/mean expert load over the step's global batch (1 = balanced).
  for (size_t i = 0; i < r.moe_max_over_mean.size() && i < moe_blocks_.size(); ++i)
    m.extra["moe_load_max_over_mean_" + std::to_string(moe_blocks_[i])] = r.moe_max_over_mean[i];
  if (val_loss) m.extra["val_loss"] = *val_loss;
  metrics_->log(m);
  if (tensorboard_) tensorboard_->scalars(m.step, tensorboard_scalars(m));
  const int every = std::max(1, cfg_.log.every);
  if ((step + 1) % every == 0 || step + 1 == cfg_.train.steps || step == start_step_) {
    double left = static_cast<double>(cfg_.train.steps - step - 1) * static_cast<double>(tokens) / tokens_per_s_ema_;
    // MFU at the averaged rate, as tok/s beside it.
    char mfu[32] = "MFU ?";
    if (peak_flops_ > 0)
      std::snprintf(mfu, sizeof mfu, "MFU %.2f%%", 100.0 * flops_per_token_ * tokens_per_s_ema_ / peak_flops_);
    std::printf("step %5lld/%d | loss %.4f | lr %.2e | grad norm %.3f | %s tok/s | %s | mem %s | %.0f ms | eta %s%s\n",
                static_cast<long long>(step + 1), cfg_.train.steps, r.loss, r.lr, r.grad_norm,
                format_rate(tokens_per_s_ema_).c_str(), mfu, format_bytes(mem_peak).c_str(), step_seconds * 1e3,
                format_duration(left).c_str(), r.skipped ? " | SKIPPED (non-finite)" : "");
  }
  if (val_loss)
    std::printf("eval  %5lld/%d | val loss %.4f\n", static_cast<long long>(step + 1), cfg_.train.steps, *val_loss);
  std::fflush(stdout);
}

// The last log.profile_steps steps are traced: ops, layers (F/B/W) and collectives per rank.
void StepAccounting::trace_begin(int64_t step) {
  const int n = cfg_.log.profile_steps;
  if (n <= 0 || step < cfg_.train.steps - n) return;
  Tracer& tr = Tracer::instance();
  if (!tr.enabled()) tr.start(device_, rank_, "rank " + std::to_string(rank_) + " (" + device_.str() + ")");
  tr.mark_step_start();
}

void StepAccounting::trace_end(int64_t step, double seconds) {
  Tracer& tr = Tracer::instance();
  if (!tr.enabled()) return;
  const double t0 = tr.step_start_us();
  tr.complete("step " + std::to_string(step + 1), "step", "compute", t0, seconds * 1e6);
  std::vector<CommScheduler::Record> records = comm_.records();
  if (p2p_) records.insert(records.end(), p2p_->records().begin(), p2p_->records().end());
  for (const CommScheduler::Record& c : records) {
    const double start = c.start_ms >= 0 ? c.start_ms : c.issued_ms;
    const double end = c.end_ms >= 0 ? c.end_ms : c.issued_ms;
    // Data parallelism's stream keeps the "communication" row; other axes get a row each.
    const std::string row = c.axis == MeshAxis::DP ? "communication" : std::string("communication ") + axis_name(c.axis);
    tr.complete(c.name, "comm", row, t0 + 1e3 * start, 1e3 * (end - start),
                {{"bytes", c.bytes}, {"compute_waited_ms", c.waited_ms}, {"axis", axis_name(c.axis)}});
  }
  tr.end_step();
}

void StepAccounting::write_trace(const std::string& run_dir) {
  Tracer& tr = Tracer::instance();
  if (!tr.enabled()) return;
  tr.stop();
  const fs::path part = fs::path(run_dir) / ("trace.rank" + std::to_string(rank_) + ".json");
  std::ofstream(part) << tr.chrome_events().dump();
  if (world_.size() > 1) world_.barrier();
  if (rank_ != 0) return;
  nlohmann::json all = nlohmann::json::array();
  for (int r = 0; r < world_size_; ++r) {
    const fs::path p = fs::path(run_dir) / ("trace.rank" + std::to_string(r) + ".json");
    std::ifstream in(p);
    if (!in) continue;
    for (auto& e : nlohmann::json::parse(in)) all.push_back(std::move(e));
    fs::remove(p);
  }
  std::ofstream(fs::path(run_dir) / "trace.json") << nlohmann::json{{"traceEvents", all}}.dump();
  std::vector<std::pair<std::string, Tracer::OpStat>> ops(tr.op_profile().begin(), tr.op_profile().end());
  std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second.total_ms > b.second.total_ms; });
  double total = 0;
  for (auto& [name, s] : ops) total += s.total_ms;
  std::printf("tetra: op profile of rank 0 over %d steps (device time per step), trace in %s/trace.json\n",
              tr.steps(), run_dir.c_str());
  for (auto& [name, s] : ops)
    std::printf("  %-28s %8.3f ms %6.1f %%  %6.1f calls\n", name.c_str(), s.total_ms / tr.steps(),
                100.0 * s.total_ms / total, static_cast<double>(s.calls) / tr.steps());
  std::fflush(stdout);
}

}  // namespace tetra::launch
