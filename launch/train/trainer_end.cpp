// How a Trainer's attempt ends: finished, stopped by a signal, by a non-finite step or by too many
// skipped ones — the last checkpoint, the trace, the memory peaks, rank 0's ledger entry, goodput
// report and page.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "launch/checkpoint/files.h"
#include "launch/job/signals.h"
#include "launch/report/goodput.h"
#include "launch/report/html_page.h"
#include "launch/train/trainer.h"
#include "runtime/memory.h"

namespace tetra::launch {

namespace {

// "3..13, 17, 20..22": the step numbers (ascending) as runs; at most `most` runs, then "…".
std::string step_runs(const std::vector<int64_t>& steps, size_t most = 20) {
  std::string out;
  size_t runs = 0;
  for (size_t i = 0; i < steps.size();) {
    size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    if (runs++ == most) return out + ", …";
    out += (out.empty() ? "" : ", ") + std::to_string(steps[i]) + (j > i ? ".." + std::to_string(steps[j]) : "");
    i = j + 1;
  }
  return out;
}

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

void Trainer::count_skip(int64_t step, bool skipped) {
  if (!skipped) {
    skipped_in_a_row_ = 0;
    return;
  }
  ++skipped_in_a_row_;
  skipped_here_.push_back(step + 1);
  if (cfg_.train.on_nonfinite != OnNonfinite::Skip || !over_skip_limit_.empty()) return;
  const SkipLimit& limit = cfg_.train.max_skipped_steps;
  const int64_t done = step + 1;
  const std::string skipped_for = " were skipped for a non-finite loss or gradient norm, ";
  if (skipped_in_a_row_ > limit.consecutive)
    over_skip_limit_ = std::to_string(skipped_in_a_row_) + " steps in a row (" +
                       std::to_string(done - skipped_in_a_row_ + 1) + ".." + std::to_string(done) + ")" + skipped_for +
                       "more than train.max_skipped_steps.consecutive = " + std::to_string(limit.consecutive);
  else if (skipped_steps_ > limit.consecutive && static_cast<double>(skipped_steps_) > limit.fraction * done)
    over_skip_limit_ = std::to_string(skipped_steps_) + " of the " + std::to_string(done) + " steps so far" +
                       skipped_for + "more than train.max_skipped_steps.fraction = " + number_text(limit.fraction) +
                       " of them";
}

std::string Trainer::skip_limit_message(int64_t steps_done) const {
  const std::string why = over_skip_limit_.empty() ? "another rank counted more skipped steps than "
                                                     "train.max_skipped_steps allows"
                                                   : over_skip_limit_;
  return why + " (skipped in this attempt: steps " + step_runs(skipped_here_) +
         "): saved the state after step " + std::to_string(steps_done) + " as " +
         checkpoints_dir(parts_->run_dir) + "/" + step_dir_name(steps_done) +
         "; lower optimizer.lr or train.grad_clip, or check the data, and resume with checkpoint.resume: auto (a "
         "looser train.max_skipped_steps lets such a run go on) (exit code " + std::to_string(exit_code::kNonFinite) +
         ")";
}

int Trainer::end_run(int64_t step, int stop, bool nonfinite, bool skip_limit) {
  Checkpointer& ckpt = *parts_->checkpointer;
  const std::string& run_dir = parts_->run_dir;
  ckpt.finish();
  accounting_->write_trace(run_dir);
  if (nonfinite) {
    // Step `step + 1` was skipped: the state is the one after `step` steps; save it for a look or
    // a resume with other settings, unless that is the checkpoint just written.
    TrainingProgress p = progress(step);
    p.tokens_seen -= parts_->loader->tokens_per_step();
    p.skipped_steps -= 1;
    if (ckpt.last_committed_step() != step) {
      ckpt.save(p);
      ckpt.finish();
    }
    return end_attempt("nonfinite", exit_code::kNonFinite,
                       "step " + std::to_string(step + 1) + " had a non-finite loss or gradient norm and " +
                           "train.on_nonfinite is stop: saved the state after step " + std::to_string(step) + " as " +
                           checkpoints_dir(run_dir) + "/" + step_dir_name(step) +
                           "; lower optimizer.lr or train.grad_clip, or set train.on_nonfinite: skip, and resume with "
                           "checkpoint.resume: auto (exit code " + std::to_string(exit_code::kNonFinite) + ")");
  }
  if (skip_limit) return end_attempt("nonfinite", exit_code::kNonFinite, skip_limit_message(step));
  if (stop != 0 && step < cfg_.train.steps) {
    const bool interrupted = stop == SIGINT;
    const int code = interrupted ? exit_code::kInterrupted : exit_code::kPreempted;
    return end_attempt(interrupted ? "interrupted" : "preempted", code,
                       std::string(signal_name(stop)) + " received: stopped after step " + std::to_string(step) +
                           " on every rank and saved " + checkpoints_dir(run_dir) + "/" + step_dir_name(step) +
                           (interrupted ? "; resume with checkpoint.resume: auto"
                                        : "; exit code " + std::to_string(code) +
                                              " asks the scheduler to requeue the job, which resumes with "
                                              "checkpoint.resume: auto"));
  }
  report_memory_peaks();
  if (is_rank0()) {
    parts_->ledger->attempt_end("finished", 0);
    GoodputReport report = load_and_compute(run_dir);
    write_report(run_dir, report);
    write_tensorboard_goodput(report);
    print_report(report, std::cout);
    write_page(&report);
    std::fflush(stdout);
  }
  return 0;
}

// The measured peak of tetra's allocations on the device over the steps, the largest over all
// ranks, beside the plan printed at start-up; each pipeline rank's peak of micro-batches in flight.
void Trainer::report_memory_peaks() {
  const Device device = parts_->device;
  const double peak = world_.all_reduce_scalar(static_cast<double>(peak_allocated_bytes(device)), ReduceOp::Max);
  const double startup_peak = world_.all_reduce_scalar(parts_->startup_peak_bytes, ReduceOp::Max);
  const double planned = world_.all_reduce_scalar(rank_memory_plan(cfg_, *parts_).total(), ReduceOp::Max);
  report_pipeline_peaks();
  if (is_rank0()) {
    std::printf("tetra: memory peak %.0f B (%.3f GiB) measured over the steps on %s (largest rank; start-up %.0f B), "
                "planned %.0f B (%.3f GiB)\n",
                peak, peak / (1024.0 * 1024.0 * 1024.0), device.str().c_str(), startup_peak, planned,
                planned / (1024.0 * 1024.0 * 1024.0));
  }
}

int Trainer::end_attempt(const std::string& reason, int code, const std::string& message) {
  if (is_rank0()) {
    std::printf("tetra: %s\n", message.c_str());
    parts_->ledger->attempt_end(reason, code);
    GoodputReport report = load_and_compute(parts_->run_dir);
    write_report(parts_->run_dir, report);
    write_tensorboard_goodput(report);
    print_report(report, std::cout);
    write_page(&report);
    std::fflush(stdout);
  }
  // A launcher may kill the whole job as soon as one rank exits non-zero (mpirun does): nobody
  // leaves before rank 0 has recorded the end of the attempt.
  if (world_.size() > 1) world_.barrier();
  return code;
}

// log.tensorboard: the goodput fraction and each category's seconds over the run so far, at the
// last step written. Like the page, a view of the run: a failure to write them is a warning.
void Trainer::write_tensorboard_goodput(const GoodputReport& report) {
  TensorBoardWriter* tb = parts_->tensorboard.get();
  if (!tb) return;
  std::vector<std::pair<std::string, double>> values{{"goodput/goodput", report.goodput},
                                                     {"goodput/productive_s", report.seconds.productive}};
  for (const auto& [name, seconds] : report.seconds.badput()) values.emplace_back("goodput/" + name + "_s", seconds);
  try {
    tb->scalars(tb->last_step(), values);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tetra: warning: the goodput scalars were not written to TensorBoard: %s\n", e.what());
  }
}

void Trainer::write_page(const GoodputReport* report) {
  if (!cfg_.run.html_report) return;
  const std::string& run_dir = parts_->run_dir;
  try {  // the page is a view of the run: its failure never changes the run's outcome
    const std::string path = report ? write_html_report(run_dir, *report)
                                    : write_html_report(run_dir, load_and_compute(run_dir));
    std::printf("tetra: wrote %s\n", path.c_str());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tetra: warning: the report page was not written: %s\n", e.what());
  }
}

}  // namespace tetra::launch
