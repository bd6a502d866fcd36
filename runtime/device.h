// Where a tensor lives and where its ops run: the host CPU, or CUDA device n.
#pragma once
#include <string>

namespace tetra {

enum class DeviceKind { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static Device cpu() { return {DeviceKind::CPU, 0}; }
  static Device cuda(int i) { return {DeviceKind::CUDA, i}; }
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

// True when this binary has the CUDA backend and at least one GPU is visible.
bool cuda_available();
int cuda_device_count();
// Whether this binary has the CUDA backend at all (GPUs visible or not).
bool built_with_cuda();

}  // namespace tetra
