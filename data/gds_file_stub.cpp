// GPUDirect Storage where tetra was built without cuFile (without CUDA, or where libcufile was not
// found; CMakeLists.txt picks this file or gds_file_cufile.cpp): the probe says so, nothing opens.
#include "data/gds_file.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace tetra::data {

GdsProbe gds_probe() {
  GdsProbe p;
  p.detail = built_with_cuda()
                 ? "tetra was built without cuFile (libcufile was not found next to the CUDA toolkit at build time)"
                 : "tetra was built without CUDA";
  return p;
}

GdsFile::GdsFile(const std::string& path) : path_(path) {
  TETRA_FAIL(Data, "cannot read ", path, " with GPUDirect Storage: ", gds_probe().detail);
}
GdsFile::~GdsFile() = default;
int64_t GdsFile::read(void*, size_t, int64_t, int64_t) { return 0; }

GdsBufferRegistration::GdsBufferRegistration(void* dev_ptr, size_t) : ptr_(dev_ptr), detail_(gds_probe().detail) {}
GdsBufferRegistration::~GdsBufferRegistration() = default;

}  // namespace tetra::data
