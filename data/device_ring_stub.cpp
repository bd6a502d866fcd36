// DeviceRing where tetra is built without CUDA: the loader cannot feed a GPU, so making one is an
// error and the other members are never reached; they exist so that the loader links.
#include "data/device_ring.h"
#include "runtime/error.h"

namespace tetra::data {

struct DeviceRing::Impl {};

namespace {
const Tensor& no_tensor() {
  static const Tensor none;
  return none;
}
}  // namespace

DeviceRing::DeviceRing(const Options& o) {
  TETRA_FAIL(Device, "the data loader cannot feed ", o.device.str(), ": tetra was built without CUDA");
}
DeviceRing::~DeviceRing() = default;

void* DeviceRing::host_staging(int) const { return nullptr; }
StagedRow* DeviceRing::host_rows(int) const { return nullptr; }
void DeviceRing::wait_writable(int) {}
void DeviceRing::submit(int, size_t, int64_t, int, bool) {}
int64_t DeviceRing::device_check(int) { return -1; }
void DeviceRing::read_back(int, int64_t, void*, size_t) {}
void DeviceRing::release(int) {}
bool DeviceRing::acquire(int) { return false; }
const Tensor& DeviceRing::inputs(int) const { return no_tensor(); }
const Tensor& DeviceRing::targets(int) const { return no_tensor(); }

}  // namespace tetra::data
