#include "runtime/device_info.h"

#include <fstream>
#include <string>
#include <thread>

#include "runtime/cuda/cuda_backend.h"

namespace tetra {

namespace {
double cpu_mhz() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("cpu MHz", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return std::stod(line.substr(pos + 1));
    }
  return 2000.0;
}
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  return "cpu";
}
}  // namespace

std::string device_name(Device d) { return d.is_cuda() ? cuda::device_name(d) : cpu_model(); }

double peak_flops(Device d, DType compute, int ranks_on_host) {
  if (d.is_cuda()) {
    std::string name = device_name(d);
    bool hopper = name.find("H100") != std::string::npos || name.find("H200") != std::string::npos ||
                  name.find("H800") != std::string::npos || name.find("GH200") != std::string::npos;
    bool ampere = name.find("A100") != std::string::npos || name.find("A800") != std::string::npos;
    if (hopper) return compute == DType::F32 ? 67e12 : 989e12;
    if (ampere) return compute == DType::F32 ? 19.5e12 : 312e12;
    return compute == DType::F32 ? 20e12 : 300e12;  // unknown GPU: set log.peak_tflops
  }
  unsigned cores = std::thread::hardware_concurrency();
  if (cores == 0) cores = 1;
  double per_rank_cores = static_cast<double>(cores) / static_cast<double>(ranks_on_host > 0 ? ranks_on_host : 1);
  return per_rank_cores * cpu_mhz() * 1e6 * 32.0;
}

}  // namespace tetra
