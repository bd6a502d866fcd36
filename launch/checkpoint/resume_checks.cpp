// Checkpointer::check_resumable: what a resume from a checkpoint written under another config
// refuses (another model, other data) and what it warns of (settings that make the resumed run
// differ from an uninterrupted one).
#include <array>
#include <charconv>
#include <iostream>
#include <sstream>
#include <utility>
#include <vector>

#include "launch/checkpoint/checkpointer.h"
#include "launch/checkpoint/reader.h"
#include "launch/config/schema.h"
#include "launch/train/lr_schedule.h"

namespace tetra::launch {

// The checkpoint must hold this model — the same parameters, and the same model.* keys, since a
// change that keeps every shape (heads, norm epsilon, an architecture variant) would load weights
// that mean something else — and, unless checkpoint.allow_data_change, be read on the same data.
// Other differences that make the resumed run differ from an uninterrupted one are warnings.
void Checkpointer::check_resumable(const CheckpointReader& chosen) const {
  const CheckpointMeta& meta = chosen.meta();
  const std::string where = "checkpoint.resume: " + chosen.dir();
  for (const ParamInfo& p : params_) {
    const ParamInfo* q = chosen.param(p.name);
    if (!q)
      TETRA_FAIL(Config, where, " has no parameter '", p.name,
                 "': it holds another model (compare model.* with the config in its meta.json; to start over use "
                 "checkpoint.resume: none or another run.name)");
    if (q->full_shape != p.full_shape)
      TETRA_FAIL(Config, where, ": '", p.name, "' is ", shape_str(q->full_shape), " there but ",
                 shape_str(p.full_shape), " in this model (model.* changed since it was written?)");
  }
  if (meta.params.size() != params_.size())
    TETRA_FAIL(Config, where, " holds ", meta.params.size(), " parameters, this model ", params_.size(),
               " (model.n_layers changed since it was written?)");

  Config old;
  try {
    old = parse_config(meta.config_yaml, chosen.dir() + "/meta.json");
  } catch (const Error& e) {
    if (is_rank0())
      std::cout << "tetra: warning: cannot compare the checkpoint's config with this one (only its parameter names "
                   "and shapes were checked): "
                << e.what() << "\n";
    return;
  }
  // Every key of the model section, whatever the family defines (config_schema.h), but
  // model.init_from: the weights come from the checkpoint.
  std::string changed;
  for (const schema::Field& f : schema::fields()) {
    if (std::string(f.section) != "model" || f.path() == "model.init_from") continue;
    const std::string was = schema::value_text(f, old), is = schema::value_text(f, cfg_);
    if (was != is) changed += (changed.empty() ? "" : ", ") + f.path() + " " + was + " then, " + is + " now";
  }
  if (!changed.empty())
    TETRA_FAIL(Config, where, " was written by another model: ", changed,
               ". Its parameter shapes fit, but the weights would mean something else; set these keys back, or "
               "start a new run (checkpoint.resume: none, or another run.name)");

  const std::string then = meta.sampler.is_object() ? meta.sampler.value("data_fingerprint", "") : "";
  if (!then.empty() && !data_fingerprint_.empty() && then != data_fingerprint_) {
    const std::string what = "the training data changed since step " + std::to_string(meta.step) +
                             " was saved: corpus fingerprint " + then + " then, " + data_fingerprint_ +
                             " now (data.train: shards added, removed, renamed or resized, other weights, or another "
                             "train.seq_len), so the resumed run reads other tokens than the original would have";
    if (!cfg_.checkpoint.allow_data_change)
      TETRA_FAIL(Config, where, ": ", what,
                 "; restore the data, or set checkpoint.allow_data_change: true to continue on the new data");
    if (is_rank0()) std::cout << "tetra: warning: " << what << " (checkpoint.allow_data_change is true)\n";
  }

  if (!is_rank0()) return;
  // What would make the resumed run differ from an uninterrupted one.
  auto differs = [&](const std::string& key, const auto& was, const auto& now_value) {
    if (was == now_value) return;
    std::ostringstream os;
    os << "tetra: warning: " << key << " was " << was << " when step " << meta.step << " was saved, now " << now_value
       << ": the resumed run will not continue exactly as the original would have\n";
    std::cout << os.str();
  };
  differs("run.seed", old.run.seed, cfg_.run.seed);
  differs("train.global_batch", old.train.global_batch, cfg_.train.global_batch);
  differs("train.seq_len", old.train.seq_len, cfg_.train.seq_len);
  differs("data.train", old.data.train, cfg_.data.train);
  differs("data.shuffle", old.data.shuffle, cfg_.data.shuffle);
  check_schedule(old, meta.step);
  differs("optimizer.name", std::string(choice_name(old.optimizer.name)), std::string(choice_name(cfg_.optimizer.name)));
  auto pair = [](const std::array<double, 2>& b) {  // shortest text that reads back the same
    char buf[64];
    char* end = buf;
    *end++ = '[';
    end = std::to_chars(end, buf + 30, b[0]).ptr;
    *end++ = ',';
    *end++ = ' ';
    end = std::to_chars(end, buf + 62, b[1]).ptr;
    *end++ = ']';
    return std::string(buf, end);
  };
  differs("optimizer.betas", pair(old.optimizer.betas), pair(cfg_.optimizer.betas));
  differs("optimizer.eps", old.optimizer.eps, cfg_.optimizer.eps);
  differs("optimizer.weight_decay", old.optimizer.weight_decay, cfg_.optimizer.weight_decay);
  // The moments are saved in fp32 whatever the run kept (launch/checkpoint/shard.h): a run resumes
  // under either setting, its moments rounded to bf16 (or widened exactly) as they load.
  differs("optimizer.state_dtype", std::string(choice_name(old.optimizer.state_dtype)),
          std::string(choice_name(cfg_.optimizer.state_dtype)));
}

// The LR schedule's keys and train.steps. When the steps run so far had, step by step, the
// learning rates the new schedule gives them — a wsd run extended while still in its stable phase,
// a constant schedule run longer — the change is one a run started with this config would have
// made alike: a note, not a warning. Otherwise a warning per changed key.
void Checkpointer::check_schedule(const Config& old, int64_t steps_run) const {
  std::vector<std::pair<std::string, std::string>> changed;  // key, "was ..., now ..."
  for (const schema::Field& f : schema::fields()) {
    const std::string key = f.path();
    if (key != "train.steps" && (std::string(f.section) != "optimizer" || key == "optimizer.name" ||
                                 key == "optimizer.betas" || key == "optimizer.eps" ||
                                 key == "optimizer.weight_decay" || key == "optimizer.state_dtype"))
      continue;
    const std::string was = schema::value_text(f, old), is = schema::value_text(f, cfg_);
    if (was != is) changed.emplace_back(key, was + " when step " + std::to_string(steps_run) + " was saved, now " + is);
  }
  if (changed.empty()) return;
  const LrSchedule before = LrSchedule::of(old), after = LrSchedule::of(cfg_);
  bool same = true;
  for (int64_t s = 0; s < steps_run && same; ++s) same = before.at(s) == after.at(s);
  std::ostringstream os;
  for (const auto& [key, what] : changed) {
    if (!same) {
      os << "tetra: warning: " << key << " was " << what
         << ": the resumed run will not continue exactly as the original would have\n";
      continue;
    }
    os << "tetra: note: " << key << " was " << what << "; the " << steps_run
       << " steps run so far had the learning rates this schedule gives them";
    if (after.kind == LrDecay::Wsd)
      os << " (wsd: lr " << after.lr << " until step " << after.decay_start() << ", then the decay to min_lr "
         << after.min_lr << " at step " << after.total_steps << ")";
    os << "\n";
  }
  std::cout << os.str();
}

}  // namespace tetra::launch
