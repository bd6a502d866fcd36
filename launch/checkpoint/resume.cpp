// Checkpointer::resume: which checkpoint a run continues from (checkpoint.resume), and loading it.
//
//   auto, no step_N at all          a fresh start, step 0
//   auto, some usable               the newest; newer damaged ones are set aside (.discarded)
//   auto, none usable               a Config error (exit 2) listing each and why; nothing renamed
//   any file that cannot be read    a Checkpoint error (exit 1) naming it; nothing renamed — a
//                                   permission or I/O problem says nothing about the checkpoint
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "launch/checkpoint/checkpointer.h"
#include "launch/checkpoint/files.h"
#include "launch/checkpoint/reader.h"
#include "launch/job/rank_agreement.h"

namespace tetra::launch {

namespace fs = std::filesystem;

namespace {

void print_rank0(const Communicator& world, const std::string& line) {
  if (world.rank() != 0) return;
  std::printf("tetra: %s\n", line.c_str());
  std::fflush(stdout);
}

bool same_dir(const fs::path& a, const fs::path& b) {
  std::error_code ec1, ec2;
  fs::path ca = fs::weakly_canonical(a, ec1), cb = fs::weakly_canonical(b, ec2);
  return !ec1 && !ec2 && ca == cb;
}

std::string none_usable(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& rejected) {
  std::string text = "checkpoint.resume: auto found " + std::to_string(rejected.size()) + " checkpoint" +
                     (rejected.size() == 1 ? "" : "s") + " in " + dir + " and none can be used:";
  for (const auto& [path, why] : rejected) text += "\n  " + fs::path(path).filename().string() + ": " + why;
  return text + "\nnothing was renamed; to start from step 0 instead, pass checkpoint.resume: none (the run "
                "directory moves to previous/), or name a checkpoint with checkpoint.resume: PATH";
}

}  // namespace

void Checkpointer::set_aside(const std::string& path, const std::string& why) {
  std::error_code ec;
  std::string target = path + ".discarded";
  for (int i = 2; fs::exists(target, ec); ++i) target = path + ".discarded-" + std::to_string(i);
  fs::rename(path, target, ec);
  if (ec)
    std::cerr << "tetra: warning: could not rename " << path << " to " << target << ": " << ec.message() << "\n";
  else
    std::printf("tetra: set %s aside as %s (%s)\n", path.c_str(), target.c_str(), why.c_str());
}

std::vector<std::string> Checkpointer::resume_candidates() {
  std::vector<double> steps;
  // A checkpoints folder that cannot be listed ends every rank, not rank 0 alone.
  agree(world_, [&] {
    if (is_rank0())
      for (const CheckpointDir& d : list_checkpoint_dirs(dir_)) steps.push_back(static_cast<double>(d.step));
  });
  std::vector<double> n{static_cast<double>(steps.size())};
  world_.all_reduce_host(n, ReduceOp::Max);
  steps.resize(static_cast<size_t>(n[0]), 0.0);
  if (!steps.empty()) world_.all_reduce_host(steps, ReduceOp::Sum);
  std::vector<std::string> out;
  for (double s : steps) out.push_back((fs::path(dir_) / step_dir_name(static_cast<int64_t>(s))).string());
  return out;
}

std::unique_ptr<CheckpointReader> Checkpointer::first_usable(
    const std::vector<std::string>& candidates, std::vector<std::pair<std::string, std::string>>& rejected) {
  const bool automatic = cfg_.checkpoint.resume.kind == ResumeFrom::Kind::Auto;
  for (const std::string& path : candidates) {
    std::unique_ptr<CheckpointReader> reader;
    std::string problem;
    bool unreadable = false;
    try {
      reader = std::make_unique<CheckpointReader>(path);
      // Each rank checksums every world-th file, so a big checkpoint is read once, in parallel.
      problem = reader->verify(world_.rank(), world_.size());
    } catch (const CheckpointUnreadable& e) {
      problem = e.what();
      unreadable = true;
    } catch (const std::exception& e) {  // tetra::Error, or anything a damaged file provokes
      problem = e.what();
    }
    std::vector<double> bad{problem.empty() ? 0.0 : 1.0, unreadable ? 1.0 : 0.0};
    world_.all_reduce_host(bad, ReduceOp::Max);
    if (bad[0] == 0.0) return reader;
    if (bad[1] != 0.0) {
      const std::string why = first_problem(world_, unreadable ? problem : std::string());
      fail_on_every_rank(ErrorKind::Checkpoint,
                         "checkpoint.resume: cannot read " + path + ": " + why +
                             ". The checkpoint itself may be whole, so it was left as it is and nothing was "
                             "renamed; make its files readable (permissions, the file system) and run again, or "
                             "pass checkpoint.resume: none to start from step 0");
    }
    const std::string why = first_problem(world_, problem);
    if (!automatic)
      fail_on_every_rank(ErrorKind::Config, "checkpoint.resume: " + path + " cannot be loaded: " + why +
                                                " (use checkpoint.resume: auto for the newest usable checkpoint, or "
                                                "another step_N)");
    print_rank0(world_, "ignoring " + path + ": " + why);
    rejected.emplace_back(path, why);
  }
  return nullptr;
}

std::optional<TrainingProgress> Checkpointer::resume() {
  const ResumeFrom& mode = cfg_.checkpoint.resume;
  if (mode.kind == ResumeFrom::Kind::None) return std::nullopt;
  const double t0 = now();
  const bool automatic = mode.kind == ResumeFrom::Kind::Auto;

  // Candidates, newest first: rank 0 lists them, everyone gets the same list.
  const std::vector<std::string> candidates = automatic ? resume_candidates() : std::vector<std::string>{mode.path};
  std::vector<std::pair<std::string, std::string>> rejected;  // path, why (as rank 0 knows it)
  std::unique_ptr<CheckpointReader> chosen = first_usable(candidates, rejected);
  // Whether it is this run's model and data is checked before anything is renamed, so that a
  // mistaken resume changes nothing on disk; so is a run that would otherwise start over.
  if (chosen) agree(world_, [&] { check_resumable(*chosen); });
  if (!chosen && !rejected.empty()) fail_on_every_rank(ErrorKind::Config, none_usable(dir_, rejected));
  if (is_rank0()) {
    for (const auto& [path, why] : rejected) set_aside(path, "not usable");
    // Rolling back to an earlier checkpoint of this run: later ones belong to the abandoned
    // timeline and must not be picked by a later resume.
    if (chosen && same_dir(fs::path(chosen->dir()).parent_path(), dir_))
      for (const CheckpointDir& d : list_checkpoint_dirs(dir_))
        if (d.step > chosen->meta().step)
          set_aside(d.path, "newer than step " + std::to_string(chosen->meta().step) + ", which this run resumes from");
    std::fflush(stdout);
  }
  if (!chosen) {
    print_rank0(world_, "checkpoint.resume: auto found no checkpoint in " + dir_ + ": starting from step 0");
    return std::nullopt;
  }
  return load(*chosen, t0);
}

TrainingProgress Checkpointer::load(CheckpointReader& chosen, double t0) {
  const CheckpointMeta& meta = chosen.meta();
  std::vector<StatePiece> pieces = optimizer_.pieces_to_load();
  agree(world_, [&] {
    for (StatePiece& piece : pieces) chosen.fill(piece);
  });
  optimizer_.after_load();
  optimizer_.set_steps_taken(meta.optimizer_steps);

  if (is_rank0()) {
    const MeshShape& s = mesh_.shape();
    const bool reshard = meta.world_size != world_.size() || meta.dp != s.dp || meta.tp != s.tp || meta.pp != s.pp ||
                         meta.ep != s.ep || meta.zero_stage != optimizer_.zero_stage();
    // The expert-parallel sizes, where either side has expert parallelism.
    const bool experts = meta.ep > 1 || s.ep > 1;
    auto ep_text = [experts](int ep) { return experts ? " ep " + std::to_string(ep) : std::string(); };
    std::string line = "resumed from " + chosen.dir() + " (step " + std::to_string(meta.step) + ", " +
                       std::to_string(meta.tokens_seen) + " tokens";
    if (reshard)
      line += "; written at dp " + std::to_string(meta.dp) + " tp " + std::to_string(meta.tp) + " pp " +
              std::to_string(meta.pp) + ep_text(meta.ep) +
              " ZeRO-" + std::to_string(meta.zero_stage) + ", resharded to dp " + std::to_string(s.dp) + " tp " +
              std::to_string(s.tp) + " pp " + std::to_string(s.pp) +
              ep_text(s.ep) + " ZeRO-" +
              std::to_string(optimizer_.zero_stage());
    print_rank0(world_, line + ")");
  }
  if (ledger_) ledger_->ckpt_load(t0, now(), meta.step);
  TrainingProgress progress;
  progress.step = meta.step;
  progress.tokens_seen = meta.tokens_seen;
  progress.skipped_steps = meta.skipped_steps;
  return progress;
}

}  // namespace tetra::launch
