// The subcommands of the tetra executable (launch/main.cpp parses the command line).
// Each returns the process exit code; errors are thrown as tetra::Error.
#pragma once
#include <string>
#include <vector>

namespace tetra::launch {

int train_command(const std::string& config_path, const std::vector<std::string>& overrides);
int plan_command(const std::string& config_path, const std::vector<std::string>& overrides, int world);
// format: hdf5 (one consolidated file) or hf (a Hugging Face folder); dtype: fp32, or bf16 for hf.
int consolidate_command(const std::string& checkpoint_dir, const std::string& out_path,
                        const std::string& format = "hdf5", const std::string& dtype = "fp32");
int report_command(const std::string& run_dir);

}  // namespace tetra::launch
