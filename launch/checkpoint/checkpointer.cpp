#include "launch/checkpoint/checkpointer.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "launch/checkpoint/checksum.h"
#include "launch/checkpoint/files.h"
#include "launch/checkpoint/reader.h"
#include "launch/checkpoint/shard.h"
#include "launch/config/schema.h"
#include "launch/train/lr_schedule.h"
#include "launch/job/rank_agreement.h"

namespace tetra::launch {

namespace fs = std::filesystem;
using nlohmann::json;

// One save between its start and its commit.
struct Checkpointer::Pending {
  TrainingProgress progress;
  int64_t optimizer_steps = 0;  // taken at the save: the optimizer moves on while an async write runs
  std::string tmp_dir, final_dir, file;
  bool async = false;
  double start = 0, blocked_end = 0, write_end = 0;  // ledger clock
  std::vector<StatePiece> host;                      // what the writer writes (host fp32)
  std::vector<SavedPiece> saved;
  ShardHeader header;
  std::thread writer;
  std::atomic<bool> done{false};
  bool ok = false;
  std::string error;
  FileDigest digest;
};

namespace {

void print_rank0(const Communicator& world, const std::string& line) {
  if (world.rank() != 0) return;
  std::printf("tetra: %s\n", line.c_str());
  std::fflush(stdout);
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

}  // namespace

// The first non-empty `mine` over the ranks, as "rank R: ...", known to every rank (collective;
// only called when some rank has a problem, so the fixed-size gather costs nothing in good runs).
std::string Checkpointer::first_problem(Communicator& world, const std::string& mine) {
  constexpr int64_t kBytes = 512;
  Tensor in = Tensor::zeros({kBytes}, DType::U8);
  std::memcpy(in.data_ptr(), mine.data(), std::min<size_t>(mine.size(), kBytes - 1));
  Tensor out = Tensor::zeros({kBytes * world.size()}, DType::U8);
  world.all_gather(out, in)->wait();
  const char* all = static_cast<const char*>(out.data_ptr());
  for (int r = 0; r < world.size(); ++r) {
    const char* m = all + r * kBytes;
    if (*m) return (world.size() > 1 ? "rank " + std::to_string(r) + ": " : std::string()) + std::string(m, strnlen(m, kBytes));
  }
  return "";
}

Checkpointer::Checkpointer(const Config& cfg, const std::string& run_dir, Communicator& world, const Mesh& mesh,
                           DistributedOptimizer& optimizer, const std::vector<Param*>& params, GoodputLedger* ledger)
    : cfg_(cfg),
      run_dir_(run_dir),
      dir_(checkpoints_dir(run_dir)),
      world_(world),
      mesh_(mesh),
      optimizer_(optimizer),
      ledger_(ledger) {
  for (const Param* p : params) params_.push_back({p->name, p->full_shape});
}

Checkpointer::~Checkpointer() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
}

double Checkpointer::now() const { return ledger_ ? ledger_->now() : unix_now(); }

bool Checkpointer::writing() const { return pending_ && pending_->async && !pending_->done.load(); }

// ---- save -------------------------------------------------------------------------------------

void Checkpointer::save(const TrainingProgress& progress) {
  const double t0 = now();
  if (pending_) {  // an earlier background write is still uncommitted: it goes first
    if (pending_->writer.joinable()) pending_->writer.join();
    commit();
  }
  const std::string name = step_dir_name(progress.step);
  auto p = std::make_unique<Pending>();
  p->progress = progress;
  p->optimizer_steps = optimizer_.steps_taken();
  p->async = cfg_.checkpoint.async;
  p->start = t0;
  p->tmp_dir = (fs::path(dir_) / (name + ".tmp")).string();
  p->final_dir = (fs::path(dir_) / name).string();
  p->file = (fs::path(p->tmp_dir) / rank_file_name(world_.rank())).string();

  // Rank 0 removes what failed or interrupted saves left (step_*.tmp) and makes a clean
  // step_N.tmp; the all-reduce of its success is also the barrier before any rank writes into it.
  std::string dir_error;
  if (is_rank0()) {
    std::error_code ec;
    remove_incomplete_saves(dir_);
    fs::create_directories(p->tmp_dir, ec);
    if (ec) dir_error = ec.message();
  }
  std::vector<double> ok{dir_error.empty() ? 1.0 : 0.0};
  world_.all_reduce_host(ok, ReduceOp::Min);
  if (ok[0] != 1.0)  // every rank knows it: the job ends cleanly, rank 0 says why
    fail_on_every_rank(ErrorKind::Checkpoint,
                       "cannot create " + p->tmp_dir +
                           (is_rank0() ? ": " + dir_error : std::string(" (rank 0 reports why)")) +
                           "; check that run.output_dir is writable and not full");

  std::vector<StatePiece> pieces = optimizer_.pieces_to_save();
  bool host_fp32 = true;
  for (const StatePiece& s : pieces) {
    p->saved.push_back({s.name, s.begin, s.end, s.box});
    for (const Tensor* t : {&s.master, &s.exp_avg, &s.exp_avg_sq})
      host_fp32 &= t->device().is_cpu() && t->dtype() == DType::F32;
  }
  // A synchronous save of host state writes it in place; anything else goes through host copies.
  p->host = p->async || !host_fp32 ? snapshot_.take(pieces) : pieces;
  p->blocked_end = now();

  const MeshCoords& c = mesh_.coords();
  p->header = {progress.step, world_.rank(), world_.size(), c.dp, c.tp, c.pp, optimizer_.zero_stage()};
  Pending* raw = p.get();
  pending_ = std::move(p);
  if (raw->async) {
    raw->writer = std::thread([this, raw] { write_file(*raw); });
  } else {
    write_file(*raw);
    commit();
  }
}

// Runs on the writer thread (async) or the caller's: never throws, never talks MPI.
void Checkpointer::write_file(Pending& pending) {
  Pending* p = &pending;
  try {
    std::function<void()> halfway;
    if (faults_) halfway = [&] { faults_->inside_save(p->progress.step, world_.rank()); };
    write_shard(p->file, p->header, p->host, halfway);
    fsync_path(p->file);
    p->digest = digest_file(p->file);
    p->ok = true;
  } catch (const std::exception& e) {
    p->error = e.what();
    p->ok = false;
  }
  p->write_end = now();
  p->host.clear();  // drop the views (the snapshot buffer stays with the Checkpointer)
  p->done.store(true);
}

std::vector<RankFileInfo> Checkpointer::gather_index(const std::vector<SavedPiece>& mine) {
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].name] = static_cast<int64_t>(i);
  const int world = world_.size();
  std::vector<RankFileInfo> files(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    files[static_cast<size_t>(r)].file = rank_file_name(r);
    files[static_cast<size_t>(r)].rank = r;
  }
  std::vector<double> count{static_cast<double>(mine.size())};
  world_.all_reduce_host(count, ReduceOp::Max);
  const int64_t m = static_cast<int64_t>(count[0]);
  if (m == 0) return files;
  // Per piece: parameter index, begin, end, then its box (offsets, extents; −1 for a whole tensor)
  // over K dimensions, padded with −1 to the longest list.
  size_t K = 0;
  for (const ParamInfo& p : params_) K = std::max(K, p.full_shape.size());
  const int64_t W = 3 + 2 * static_cast<int64_t>(K);
  Tensor in = Tensor::empty({W * m}, DType::I64);
  int64_t* pin = in.data<int64_t>();
  std::fill(pin, pin + W * m, int64_t{-1});
  for (size_t k = 0; k < mine.size(); ++k) {
    auto it = index.find(mine[k].name);
    TETRA_CHECK(it != index.end(), "checkpoint: the optimizer saves '", mine[k].name, "', not a model parameter");
    int64_t* t = pin + static_cast<int64_t>(k) * W;
    t[0] = it->second;
    t[1] = mine[k].begin;
    t[2] = mine[k].end;
    for (size_t d = 0; d < mine[k].box.shape.size(); ++d) {
      t[3 + d] = mine[k].box.offset[d];
      t[3 + K + d] = mine[k].box.shape[d];
    }
  }
  Tensor out = Tensor::empty({world * W * m}, DType::I64);
  world_.all_gather(out, in)->wait();
  const int64_t* po = out.data<int64_t>();
  for (int r = 0; r < world; ++r)
    for (int64_t k = 0; k < m; ++k) {
      const int64_t* t = po + (static_cast<int64_t>(r) * m + k) * W;
      if (t[0] < 0) continue;
      SavedPiece piece{params_[static_cast<size_t>(t[0])].name, t[1], t[2], {}};
      const size_t nd = params_[static_cast<size_t>(t[0])].full_shape.size();
      if (K > 0 && t[3 + K] >= 0)
        for (size_t d = 0; d < nd; ++d) {
          piece.box.offset.push_back(t[3 + d]);
          piece.box.shape.push_back(t[3 + K + d]);
        }
      files[static_cast<size_t>(r)].pieces.push_back(std::move(piece));
    }
  return files;
}

CheckpointMeta Checkpointer::make_meta(const Pending& p) const {
  CheckpointMeta m;
  m.step = p.progress.step;
  m.tokens_seen = p.progress.tokens_seen;
  m.skipped_steps = p.progress.skipped_steps;
  m.optimizer_steps = p.optimizer_steps;
  m.attempt = ledger_ ? ledger_->attempt() : 0;
  m.time = unix_now();
  m.config_yaml = to_yaml(cfg_);
  const MeshShape& s = mesh_.shape();
  m.world_size = world_.size();
  m.dp = s.dp;
  m.tp = s.tp;
  m.pp = s.pp;
  m.ep = s.ep;
  m.zero_stage = optimizer_.zero_stage();
  // The sampler is a pure function of (config, step): its position is the next step.
  m.sampler = {{"next_step", p.progress.step},
               {"consumed_sequences", p.progress.step * cfg_.train.global_batch},
               {"global_batch", cfg_.train.global_batch},
               {"seq_len", cfg_.train.seq_len},
               {"shuffle", cfg_.data.shuffle},
               {"seed", cfg_.run.seed},
               {"data", cfg_.data.train},
               {"data_fingerprint", data_fingerprint_}};
  const LrSchedule sched = LrSchedule::of(cfg_);
  m.lr_schedule = {{"next_step", p.progress.step},
                   {"next_lr", sched.at(p.progress.step)},
                   {"kind", sched.kind},
                   {"warmup_steps", sched.warmup_steps},
                   {"total_steps", sched.total_steps}};
  // Every random stream of this version is a pure function of the seed and a position (parameter
  // name at init, epoch for the data order), so there is no generator state to carry; stateful
  // generators (dropout) add theirs under "states".
  m.rng = {{"seed", cfg_.run.seed},
           {"streams", {{"init", "seed XOR hash(parameter name)"}, {"data_order", "seed XOR epoch"}}},
           {"states", json::object()}};
  m.params = params_;
  return m;
}

void Checkpointer::commit() {
  TETRA_CHECK(pending_ != nullptr, "Checkpointer::commit without a pending save");
  Pending& p = *pending_;
  const double c0 = now();
  if (p.writer.joinable()) p.writer.join();
  const std::string name = step_dir_name(p.progress.step);

  // Every rank's outcome, size and checksum, in rank order.
  const int world = world_.size(), rank = world_.rank();
  std::vector<double> v(static_cast<size_t>(3 * world), 0.0);
  v[static_cast<size_t>(3 * rank)] = p.ok ? 1.0 : 0.0;
  v[static_cast<size_t>(3 * rank + 1)] = static_cast<double>(p.digest.bytes);
  v[static_cast<size_t>(3 * rank + 2)] = static_cast<double>(p.digest.crc32);
  world_.all_reduce_host(v, ReduceOp::Sum);
  std::string failed;
  for (int r = 0; r < world; ++r)
    if (v[static_cast<size_t>(3 * r)] != 1.0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  if (!failed.empty()) {
    const std::string first = first_problem(world_, p.ok ? std::string() : p.error);
    const std::string tmp = p.tmp_dir;
    pending_.reset();
    // Every rank's writer finished (and closed its file) before the all-reduce above: rank 0
    // frees the room the incomplete files took.
    std::error_code ec;
    if (is_rank0()) fs::remove_all(tmp, ec);
    fail_on_every_rank(ErrorKind::Checkpoint,
                       "checkpoint " + name + ": rank(s) " + failed + " could not write their file (" + first + "); " +
                           (is_rank0() && !ec ? "removed " + tmp : tmp + " stays incomplete and resume will ignore it") +
                           " (check free space and permissions of " + dir_ + ")");
  }
  if (!index_) index_ = gather_index(p.saved);
  std::vector<RankFileInfo> files = *index_;
  double total_bytes = 0;
  for (int r = 0; r < world; ++r) {
    files[static_cast<size_t>(r)].bytes = static_cast<uint64_t>(v[static_cast<size_t>(3 * r + 1)]);
    files[static_cast<size_t>(r)].crc32 = static_cast<uint32_t>(v[static_cast<size_t>(3 * r + 2)]);
    total_bytes += v[static_cast<size_t>(3 * r + 1)];
  }

  std::string error;
  if (is_rank0()) {
    try {
      commit_on_rank0(p, files);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  std::vector<double> ok{error.empty() ? 1.0 : 0.0};
  world_.all_reduce_host(ok, ReduceOp::Min);
  if (ok[0] != 1.0) {
    pending_.reset();
    fail_on_every_rank(ErrorKind::Checkpoint, "checkpoint " + name + ": rank 0 could not commit it" +
                                                  (is_rank0() ? ": " + error : std::string(" (rank 0 prints why)")));
  }

  const double c1 = now();
  const int64_t step = p.progress.step;
  if (ledger_) {
    if (p.async) {
      // What blocked training: the snapshot, then the commit (and any wait for the writer).
      ledger_->ckpt_save(p.start, p.blocked_end, step, std::max(0.0, p.write_end - p.start));
      if (c1 > c0)
        ledger_->append({{"event", goodput_event::kCkptSave},
                         {"start", c0},
                         {"end", c1},
                         {"step", step},
                         {"async", true},
                         {"part", "commit"}},
                        /*durable=*/true);
    } else {
      ledger_->ckpt_save(p.start, c1, step);
    }
  }
  std::string line = "checkpoint " + name + ": " + mib(total_bytes) + " in " + std::to_string(world) +
                     " rank files, training blocked " +
                     seconds((p.async ? p.blocked_end - p.start + (c1 - c0) : c1 - p.start));
  if (p.async) line += ", written in the background in " + seconds(p.write_end - p.start);
  print_rank0(world_, line);
  last_committed_ = step;
  pending_.reset();
}

void Checkpointer::commit_on_rank0(Pending& p, const std::vector<RankFileInfo>& files) {
  CheckpointMeta meta = make_meta(p);
  meta.files = files;
  // meta.json last: its presence marks the files complete. write_file_durably also fsyncs the
  // directory, which makes the other ranks' new file entries durable with it.
  write_file_durably((fs::path(p.tmp_dir) / kMetaFile).string(), to_json(meta).dump(1));
  std::error_code ec;
  const std::string replaced = p.final_dir + ".replaced";
  const bool existed = fs::exists(p.final_dir, ec);
  if (existed) {  // the same step from an abandoned timeline (a resume from an earlier step)
    fs::remove_all(replaced, ec);
    fs::rename(p.final_dir, replaced, ec);
    if (ec) TETRA_FAIL(Checkpoint, "cannot move the earlier ", p.final_dir, " aside: ", ec.message());
  }
  fs::rename(p.tmp_dir, p.final_dir, ec);
  if (ec) TETRA_FAIL(Checkpoint, "cannot rename ", p.tmp_dir, " to ", p.final_dir, ": ", ec.message());
  fsync_path(dir_);
  if (existed) fs::remove_all(replaced, ec);
  apply_retention();
}

void Checkpointer::apply_retention() {
  std::error_code ec;
  int kept = 0;
  for (const CheckpointDir& d : list_checkpoint_dirs(dir_)) {
    if (!d.has_meta) continue;
    if (cfg_.checkpoint.keep == 0 || kept < cfg_.checkpoint.keep) {
      ++kept;
      continue;
    }
    fs::remove_all(d.path, ec);
    if (ec) std::cerr << "tetra: warning: cannot delete old checkpoint " << d.path << ": " << ec.message() << "\n";
  }
  remove_incomplete_saves(dir_);  // no save is in flight now
}

void Checkpointer::finish() {
  if (!pending_) return;
  if (pending_->writer.joinable()) pending_->writer.join();
  commit();
}

// Resume: launch/checkpoint/resume.cpp (choosing and loading), resume_checks.cpp (whether the
// chosen checkpoint belongs to this run).

}  // namespace tetra::launch
