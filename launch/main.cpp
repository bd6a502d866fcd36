// The tetra executable: one binary, subcommands as in ARCHITECTURE.md §5.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "data/data_tools.h"
#include "launch/cli/commands.h"
#include "launch/cli/version.h"
#include "runtime/error.h"
#include "runtime/hdf5_file.h"

namespace {

// What the command line set: one field per option, and the subcommands to tell which one ran.
struct Cli {
  CLI::App* train = nullptr;
  CLI::App* plan = nullptr;
  CLI::App* prepare = nullptr;
  CLI::App* inspect = nullptr;
  CLI::App* consolidate = nullptr;
  CLI::App* generate = nullptr;
  CLI::App* report = nullptr;
  std::string config_path;
  std::vector<std::string> overrides;
  bool dry_run = false;
  int dry_run_world = 0;
  tetra::launch::PlanOptions plan_options;
  tetra::data::PrepareOptions prep;
  std::string eos_token, bos_token;  // unset flags keep the tokenizer's own (PrepareOptions::eos/bos)
  CLI::Option* eos_opt = nullptr;
  CLI::Option* bos_opt = nullptr;
  std::string inspect_path, inspect_tokenizer;
  std::string ckpt_dir, ckpt_out, ckpt_format = "hdf5", ckpt_dtype = "fp32";
  tetra::launch::HfExportOptions hf_export;
  tetra::launch::GenerateCommand gen;
  std::string run_dir, html_path;
  CLI::Option* html = nullptr;
};

void add_train(CLI::App& app, Cli& c) {
  c.train = app.add_subcommand("train", "train a model described by a YAML config (under mpirun/srun or alone)");
  c.train->add_option("config", c.config_path, "experiment config (YAML)")->required();
  c.train->add_option("--set", c.overrides, "override a config key: --set train.steps=100 (repeatable)");
  c.train->add_flag("--dry-run", c.dry_run,
                    "resolve and validate the config, plan the mesh, model and memory, print them and exit; no device");
  c.train->add_option("--world", c.dry_run_world, "with --dry-run: the ranks to plan for (default: the launcher's, or 1)")
      ->check(CLI::PositiveNumber);
}

void add_plan(CLI::App& app, Cli& c) {
  tetra::launch::PlanOptions& o = c.plan_options;
  c.plan = app.add_subcommand("plan", "print the mesh, groups, per-GPU memory and pipeline bubble; no GPUs needed");
  c.plan->add_option("config", c.config_path, "experiment config (YAML)")->required();
  c.plan->add_option("--world", o.world, "number of ranks to plan for")->required()->check(CLI::PositiveNumber);
  c.plan->add_option("--set", c.overrides, "override a config key (repeatable)");
  c.plan->add_flag("--print-schedule", o.print_schedule, "print each pipeline rank's instructions, one JSON line per rank");
  c.plan->add_flag("--json", o.json, "print the simulated pipeline step as one JSON object");
  c.plan->add_option("--costs", o.costs,
                     "per stage and micro-batch: F=1,B=2,W=1,FB=2.5,P2P=0 (a list per stage joined by ':'); "
                     "default from the model's FLOPs");
  c.plan->add_option("--trace", o.trace, "write the simulated timeline as a Chrome trace (Perfetto)");
}

void add_data(CLI::App& app, Cli& c) {
  auto* data = app.add_subcommand("data", "prepare and inspect token datasets");
  data->require_subcommand(1);
  tetra::data::PrepareOptions& p = c.prep;
  c.prepare = data->add_subcommand("prepare", "tokenize text or JSONL files into a token dataset (HDF5 or Megatron)");
  c.prepare->add_option("--input", p.inputs, "input files or globs (.gz and .zst are decompressed)")->required();
  c.prepare->add_option("--format", p.format, "text (a file is one document) or jsonl (one object per line)")
      ->check(CLI::IsMember({"text", "jsonl"}))
      ->default_val("text");
  c.prepare->add_option("--field", p.field, "the JSONL member holding the text")->default_val("text");
  c.prepare
      ->add_option("--tokenizer", p.tokenizer,
                   "tokenizer: byte, PATH/tokenizer.json (Hugging Face) or PATH/tokenizer.model (SentencePiece)")
      ->default_val("byte");
  c.eos_opt = c.prepare->add_option("--eos", c.eos_token, "end-of-document token, or none (default: the tokenizer's own)");
  c.bos_opt = c.prepare->add_option("--bos", c.bos_token,
                                    "begin-of-document token, or none (default: as the tokenizer config says)");
  c.prepare->add_option("--workers", p.workers, "tokenizing threads (default: the machine's cores)")
      ->check(CLI::PositiveNumber);
  c.prepare->add_option("--out", p.out, "output HDF5 file, or PREFIX with --out-format megatron")->required();
  c.prepare->add_option("--out-format", p.out_format, "hdf5 or megatron (PREFIX.bin + PREFIX.idx)")
      ->check(CLI::IsMember({"hdf5", "megatron"}))
      ->default_val("hdf5");
  c.inspect = data->add_subcommand("inspect", "print a dataset's size, documents, ids used and its start");
  c.inspect->add_option("path", c.inspect_path, "HDF5 file, llm.c .bin shard, or Megatron PREFIX (.idx, .bin)")
      ->required();
  c.inspect->add_option("--tokenizer", c.inspect_tokenizer, "decode the first document's start with this tokenizer");
}

void add_ckpt(CLI::App& app, Cli& c) {
  auto* ckpt = app.add_subcommand("ckpt", "checkpoint tools");
  ckpt->require_subcommand(1);
  c.consolidate = ckpt->add_subcommand("consolidate",
                                       "merge a sharded checkpoint into one HDF5 file or a Hugging Face model folder");
  c.consolidate->add_option("dir", c.ckpt_dir, "RUN_DIR/checkpoints/step_N")->required();
  c.consolidate->add_option("--out", c.ckpt_out, "output HDF5 file (--format hdf5) or folder (--format hf)")->required();
  c.consolidate->add_option("--format", c.ckpt_format, "hdf5 (one file) or hf (config.json + model.safetensors)")
      ->check(CLI::IsMember({"hdf5", "hf"}))
      ->default_val("hdf5");
  c.consolidate->add_option("--dtype", c.ckpt_dtype, "fp32 or bf16 (bf16: --format hf only)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->default_val("fp32");
  c.consolidate->add_option("--tokenizer", c.hf_export.tokenizer_dir,
                            "--format hf: copy the tokenizer files from this folder (default: model.init_from's)");
  c.consolidate->add_option("--max-shard-size", c.hf_export.max_shard_size,
                            "--format hf: split the weights into shards of at most this size (default 5GB; "
                            "500MB, 2GiB, bytes)");
}

void add_generate(CLI::App& app, Cli& c) {
  tetra::launch::GenerateCommand& g = c.gen;
  c.generate = app.add_subcommand("generate", "continue a prompt with a model (Hugging Face folder, "
                                              "consolidated file or checkpoint)");
  c.generate->add_option("model", g.model, "Hugging Face folder, consolidated .h5 file or RUN_DIR/checkpoints/step_N")
      ->required();
  c.generate->add_option("--prompt", g.prompt, "the prompt as text (needs a tokenizer)");
  c.generate->add_option("--prompt-ids", g.prompt_ids, "the prompt as token ids: 1,2,3");
  c.generate->add_option("--tokenizer", g.tokenizer,
                         "byte, a tokenizer.json or a SentencePiece .model (default: MODEL's tokenizer.json)");
  c.generate->add_option("--max-new-tokens", g.max_new_tokens, "at most this many new tokens (default 32)");
  c.generate->add_flag("--greedy", g.greedy, "the most likely token each time (the default)");
  c.generate->add_option("--temperature", g.temperature, "sampling: divide the logits by this");
  c.generate->add_option("--top-k", g.top_k, "sampling: keep the k most likely tokens");
  c.generate->add_option("--top-p", g.top_p, "sampling: keep the most likely tokens up to this probability");
  c.generate->add_option("--seed", g.seed, "sampling: the random seed (default 0)");
  c.generate->add_flag("--json", g.json, "print {\"ids\": [...], \"text\": ...} on one line");
  c.generate->add_option("--device", g.device, "cpu, cuda or auto (default: cuda when a GPU is visible)");
}

void add_report(CLI::App& app, Cli& c) {
  c.report = app.add_subcommand("report", "print the goodput report of a run (finished or not)");
  c.report->add_option("run_dir", c.run_dir, "run directory")->required();
  c.html = c.report
               ->add_option("--html", c.html_path,
                            "also write the run as one self-contained page: OUT.html, or RUN_DIR/report.html "
                            "when no path is given")
               ->expected(0, 1);
}

// Runs the subcommand the command line chose; its exit code.
int run(Cli& c) {
  namespace launch = tetra::launch;
  if (*c.train && c.dry_run) return launch::train_dry_run(c.config_path, c.overrides, c.dry_run_world);
  if (*c.train && c.dry_run_world > 0) {
    std::cerr << "tetra: error: --world is read only with --dry-run (a run takes its ranks from the launcher)\n";
    return 2;
  }
  if (*c.train) return launch::train_command(c.config_path, c.overrides);
  if (*c.plan) return launch::plan_command(c.config_path, c.overrides, c.plan_options);
  if (*c.prepare) {
    if (c.eos_opt->count() > 0) c.prep.eos = c.eos_token;
    if (c.bos_opt->count() > 0) c.prep.bos = c.bos_token;
    tetra::data::prepare_dataset(c.prep, std::cout);
    return 0;
  }
  if (*c.inspect) {
    tetra::data::inspect_dataset(c.inspect_path, std::cout, c.inspect_tokenizer);
    return 0;
  }
  if (*c.consolidate)
    return launch::consolidate_command(c.ckpt_dir, c.ckpt_out, c.ckpt_format, c.ckpt_dtype, c.hf_export);
  if (*c.generate) return launch::generate_command(c.gen);
  if (*c.report) return launch::report_command(c.run_dir, c.html->count() > 0, c.html_path);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tetra::hdf5_no_cleanup_at_exit();
  CLI::App app{"tetra: train large language models on many GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return tetra::launch::version_text(tetra::launch::build_git_commit()); },
                       "print the version, the git commit built from and the CUDA, NCCL and cuDNN versions "
                       "compiled in, and exit");
  Cli cli;
  add_train(app, cli);
  add_plan(app, cli);
  add_data(app, cli);
  add_ckpt(app, cli);
  add_generate(app, cli);
  add_report(app, cli);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    return run(cli);
  } catch (const tetra::Error& e) {
    std::fflush(stdout);
    std::cerr << "tetra: error: " << e.what() << std::endl;
    return e.kind() == tetra::ErrorKind::Config || e.kind() == tetra::ErrorKind::Usage ? 2 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "tetra: error: " << e.what() << std::endl;
    return 1;
  }
}
