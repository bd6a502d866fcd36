// The subcommands of the tetra executable (launch/main.cpp parses the command line).
// Each returns the process exit code; errors are thrown as tetra::Error.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tetra::launch {

int train_command(const std::string& config_path, const std::vector<std::string>& overrides);
// `tetra train CONFIG --dry-run [--world N]`: resolves and validates the config as `tetra train`
// would at `world` ranks (0: the launcher's world size, 1 without one), plans it as `tetra plan`
// does, prints the resolved config and the plan from rank 0, and exits 0; it touches no device,
// starts no MPI and writes nothing. A bad config throws as in train (exit 2).
int train_dry_run(const std::string& config_path, const std::vector<std::string>& overrides, int world);
// `tetra plan`: the ranks planned for, and which form of the pipeline to print (docs/pipeline.md).
struct PlanOptions {
  int world = 1;
  bool print_schedule = false;  // one JSON line per pipeline rank: {"rank": r, "ops": [...]}
  bool json = false;            // one JSON object whose "pipeline" holds the simulated step
  std::string costs;            // F=…,B=…,W=…,FB=…,P2P=… ("" = from the model's FLOPs)
  std::string trace;            // write the simulated timeline here as a Chrome trace
};
int plan_command(const std::string& config_path, const std::vector<std::string>& overrides, const PlanOptions& options);
struct Config;
// The body of `tetra plan` for a resolved config planned at options.world ranks.
void print_plan(const Config& cfg, const PlanOptions& options);
// --format hf only: where the tokenizer files come from ("" = model.init_from's folder, if any) and
// the shard size limit (launch/cli/hf_export.h).
struct HfExportOptions {
  std::string tokenizer_dir;
  std::string max_shard_size;  // "" = 5GB
};
// format: hdf5 (one consolidated file) or hf (a Hugging Face folder); dtype: fp32, or bf16 for hf.
int consolidate_command(const std::string& checkpoint_dir, const std::string& out_path,
                        const std::string& format = "hdf5", const std::string& dtype = "fp32",
                        const HfExportOptions& hf = {});
// `tetra generate MODEL ...` (launch/cli/generate.cpp; docs/models.md "Generation").
struct GenerateCommand {
  std::string model;               // a Hugging Face folder, a consolidated .h5 file or RUN_DIR/checkpoints/step_N
  std::string prompt;              // text, encoded by the tokenizer ...
  std::string prompt_ids;          // ... or ids "1,2,3"; exactly one of the two
  std::string tokenizer;           // make_tokenizer's spec; "" = MODEL's tokenizer.json, if any
  int64_t max_new_tokens = 32;
  bool greedy = false;             // the default unless a sampling option is given
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  bool json = false;               // {"ids": [...], "text": ..., ...} on one line
  std::string device = "auto";     // cpu, cuda, or auto (cuda where a GPU is visible)
};
int generate_command(const GenerateCommand& c);
// html: also write the report page, to html_path (RUN_DIR/report.html when empty).
int report_command(const std::string& run_dir, bool html = false, const std::string& html_path = "");

}  // namespace tetra::launch
