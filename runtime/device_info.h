// What a device can do, for MFU: its name and peak dense FLOP/s at a precision. GPUs by name
// (Hopper: 989 TFLOP/s bf16, 67 fp32 non-tensor); CPUs estimated as cores × clock × 32 fp32
// FLOP/cycle (two 8-wide FMA units), shared among the ranks on the host.
#pragma once
#include <string>

#include "runtime/device.h"
#include "runtime/dtype.h"

namespace tetra {

std::string device_name(Device d);
// ranks_on_host: processes sharing this host's CPU cores (CPU devices only).
double peak_flops(Device d, DType compute, int ranks_on_host = 1);

}  // namespace tetra
