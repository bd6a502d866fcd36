// The tetra executable: one binary, subcommands as in ARCHITECTURE.md §5.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "data/data_tools.h"
#include "launch/cli/commands.h"
#include "launch/cli/version.h"
#include "runtime/error.h"
#include "runtime/hdf5_file.h"

int main(int argc, char** argv) {
  tetra::hdf5_no_cleanup_at_exit();
  CLI::App app{"tetra: train large language models on many GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return tetra::launch::version_text(tetra::launch::build_git_commit()); },
                       "print the version, the git commit built from and the CUDA, NCCL and cuDNN versions "
                       "compiled in, and exit");

  std::string config_path;
  std::vector<std::string> overrides;
  auto* train = app.add_subcommand("train", "train a model described by a YAML config (under mpirun/srun or alone)");
  train->add_option("config", config_path, "experiment config (YAML)")->required();
  train->add_option("--set", overrides, "override a config key: --set train.steps=100 (repeatable)");
  bool dry_run = false;
  int dry_run_world = 0;
  train->add_flag("--dry-run", dry_run,
                  "resolve and validate the config, plan the mesh, model and memory, print them and exit; no device");
  train->add_option("--world", dry_run_world, "with --dry-run: the ranks to plan for (default: the launcher's, or 1)")
      ->check(CLI::PositiveNumber);

  tetra::launch::PlanOptions plan_options;
  auto* plan = app.add_subcommand("plan", "print the mesh, groups, per-GPU memory and pipeline bubble; no GPUs needed");
  plan->add_option("config", config_path, "experiment config (YAML)")->required();
  plan->add_option("--world", plan_options.world, "number of ranks to plan for")->required()->check(CLI::PositiveNumber);
  plan->add_option("--set", overrides, "override a config key (repeatable)");
  plan->add_flag("--print-schedule", plan_options.print_schedule,
                 "print each pipeline rank's instructions, one JSON line per rank");
  plan->add_flag("--json", plan_options.json, "print the simulated pipeline step as one JSON object");
  plan->add_option("--costs", plan_options.costs,
                   "per stage and micro-batch: F=1,B=2,W=1,FB=2.5,P2P=0 (a list per stage joined by ':'); "
                   "default from the model's FLOPs");
  plan->add_option("--trace", plan_options.trace, "write the simulated timeline as a Chrome trace (Perfetto)");

  auto* data = app.add_subcommand("data", "prepare and inspect token datasets");
  data->require_subcommand(1);
  tetra::data::PrepareOptions prep;
  auto* prepare = data->add_subcommand("prepare", "tokenize text or JSONL files into a token dataset (HDF5 or Megatron)");
  prepare->add_option("--input", prep.inputs, "input files or globs (.gz and .zst are decompressed)")->required();
  prepare->add_option("--format", prep.format, "text (a file is one document) or jsonl (one object per line)")
      ->check(CLI::IsMember({"text", "jsonl"}))
      ->default_val("text");
  prepare->add_option("--field", prep.field, "the JSONL member holding the text")->default_val("text");
  prepare->add_option("--tokenizer", prep.tokenizer, "tokenizer: byte, PATH/tokenizer.json (Hugging Face) or PATH/tokenizer.model (SentencePiece)")
      ->default_val("byte");
  std::string eos_token, bos_token;  // unset flags keep the tokenizer's own (PrepareOptions::eos/bos)
  auto* eos_opt = prepare->add_option("--eos", eos_token, "end-of-document token, or none (default: the tokenizer's own)");
  auto* bos_opt =
      prepare->add_option("--bos", bos_token, "begin-of-document token, or none (default: as the tokenizer config says)");
  prepare->add_option("--workers", prep.workers, "tokenizing threads (default: the machine's cores)")
      ->check(CLI::PositiveNumber);
  prepare->add_option("--out", prep.out, "output HDF5 file, or PREFIX with --out-format megatron")->required();
  prepare->add_option("--out-format", prep.out_format, "hdf5 or megatron (PREFIX.bin + PREFIX.idx)")
      ->check(CLI::IsMember({"hdf5", "megatron"}))
      ->default_val("hdf5");
  std::string inspect_path, inspect_tokenizer;
  auto* inspect = data->add_subcommand("inspect", "print a dataset's size, documents, ids used and its start");
  inspect->add_option("path", inspect_path, "HDF5 file, llm.c .bin shard, or Megatron PREFIX (.idx, .bin)")
      ->required();
  inspect->add_option("--tokenizer", inspect_tokenizer, "decode the first document's start with this tokenizer");

  auto* ckpt = app.add_subcommand("ckpt", "checkpoint tools");
  ckpt->require_subcommand(1);
  std::string ckpt_dir, ckpt_out, ckpt_format = "hdf5", ckpt_dtype = "fp32";
  auto* consolidate = ckpt->add_subcommand(
      "consolidate", "merge a sharded checkpoint into one HDF5 file or a Hugging Face model folder");
  consolidate->add_option("dir", ckpt_dir, "RUN_DIR/checkpoints/step_N")->required();
  consolidate->add_option("--out", ckpt_out, "output HDF5 file (--format hdf5) or folder (--format hf)")->required();
  consolidate->add_option("--format", ckpt_format, "hdf5 (one file) or hf (config.json + model.safetensors)")
      ->check(CLI::IsMember({"hdf5", "hf"}))
      ->default_val("hdf5");
  consolidate->add_option("--dtype", ckpt_dtype, "fp32 or bf16 (bf16: --format hf only)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->default_val("fp32");
  tetra::launch::HfExportOptions hf_export;
  consolidate->add_option("--tokenizer", hf_export.tokenizer_dir,
                          "--format hf: copy the tokenizer files from this folder (default: model.init_from's)");
  consolidate->add_option("--max-shard-size", hf_export.max_shard_size,
                          "--format hf: split the weights into shards of at most this size (default 5GB; "
                          "500MB, 2GiB, bytes)");

  tetra::launch::GenerateCommand gen;
  auto* generate = app.add_subcommand("generate", "continue a prompt with a model (Hugging Face folder, "
                                                  "consolidated file or checkpoint)");
  generate->add_option("model", gen.model, "Hugging Face folder, consolidated .h5 file or RUN_DIR/checkpoints/step_N")
      ->required();
  generate->add_option("--prompt", gen.prompt, "the prompt as text (needs a tokenizer)");
  generate->add_option("--prompt-ids", gen.prompt_ids, "the prompt as token ids: 1,2,3");
  generate->add_option("--tokenizer", gen.tokenizer,
                       "byte, a tokenizer.json or a SentencePiece .model (default: MODEL's tokenizer.json)");
  generate->add_option("--max-new-tokens", gen.max_new_tokens, "at most this many new tokens (default 32)");
  generate->add_flag("--greedy", gen.greedy, "the most likely token each time (the default)");
  generate->add_option("--temperature", gen.temperature, "sampling: divide the logits by this");
  generate->add_option("--top-k", gen.top_k, "sampling: keep the k most likely tokens");
  generate->add_option("--top-p", gen.top_p, "sampling: keep the most likely tokens up to this probability");
  generate->add_option("--seed", gen.seed, "sampling: the random seed (default 0)");
  generate->add_flag("--json", gen.json, "print {\"ids\": [...], \"text\": ...} on one line");
  generate->add_option("--device", gen.device, "cpu, cuda or auto (default: cuda when a GPU is visible)");

  std::string run_dir;
  std::string html_path;
  auto* report = app.add_subcommand("report", "print the goodput report of a run (finished or not)");
  report->add_option("run_dir", run_dir, "run directory")->required();
  auto* html = report->add_option("--html", html_path,
                                  "also write the run as one self-contained page: OUT.html, or RUN_DIR/report.html "
                                  "when no path is given")
                   ->expected(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  try {
    if (*train && dry_run) return tetra::launch::train_dry_run(config_path, overrides, dry_run_world);
    if (*train && dry_run_world > 0) {
      std::cerr << "tetra: error: --world is read only with --dry-run (a run takes its ranks from the launcher)\n";
      return 2;
    }
    if (*train) return tetra::launch::train_command(config_path, overrides);
    if (*plan) return tetra::launch::plan_command(config_path, overrides, plan_options);
    if (*prepare) {
      if (eos_opt->count() > 0) prep.eos = eos_token;
      if (bos_opt->count() > 0) prep.bos = bos_token;
      tetra::data::prepare_dataset(prep, std::cout);
      return 0;
    }
    if (*inspect) {
      tetra::data::inspect_dataset(inspect_path, std::cout, inspect_tokenizer);
      return 0;
    }
    if (*consolidate) return tetra::launch::consolidate_command(ckpt_dir, ckpt_out, ckpt_format, ckpt_dtype, hf_export);
    if (*generate) return tetra::launch::generate_command(gen);
    if (*report) return tetra::launch::report_command(run_dir, html->count() > 0, html_path);
  } catch (const tetra::Error& e) {
    std::fflush(stdout);
    std::cerr << "tetra: error: " << e.what() << std::endl;
    return e.kind() == tetra::ErrorKind::Config || e.kind() == tetra::ErrorKind::Usage ? 2 : 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "tetra: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
