// GPUDirect Storage: reads from a file straight into GPU memory through cuFile (the NVMe or
// network storage DMA-writes into the GPU, no host copy). This header is plain C++; the cuFile
// calls live in gds_file_cufile.cpp, compiled only where libcufile was found at build time
// (CMakeLists.txt); elsewhere gds_file_stub.cpp says that GDS is not available.
//
// Alignment: O_DIRECT and the direct DMA path want 4 KiB aligned file offsets, sizes and buffer
// offsets; the loader reads the 4 KiB-aligned superset of each run of windows (kGdsAlign) into
// buffers whose offsets are multiples of 4 KiB, and skips the extra bytes on the device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tetra::data {

inline constexpr int64_t kGdsAlign = 4096;

// What cuFile offers this process. The driver is opened once (on the first probe) and stays open.
struct GdsProbe {
  bool available = false;    // cuFile compiled in and cuFileDriverOpen succeeded
  bool compat_mode = false;  // only cuFile's compatibility mode: the nvidia-fs driver is not loaded,
                             // reads go through the host (POSIX + bounce buffers), not direct DMA
  std::string detail;        // for the log: versions and flags, or why it is not available
};
GdsProbe gds_probe();

// One file opened with O_DIRECT and registered with cuFile (CU_FILE_HANDLE_TYPE_OPAQUE_FD).
class GdsFile {
 public:
  explicit GdsFile(const std::string& path);  // fails naming the file and the cuFile error
  ~GdsFile();
  GdsFile(const GdsFile&) = delete;
  GdsFile& operator=(const GdsFile&) = delete;

  // cuFileRead of `bytes` at `file_offset` into device memory dev_base + dev_offset (dev_base is
  // the start of a registered buffer). Returns the bytes read, fewer only at the end of the file;
  // fails naming the file, the offset and the cuFile or system error. Thread-safe.
  int64_t read(void* dev_base, size_t bytes, int64_t file_offset, int64_t dev_offset);

 private:
  std::string path_;
  int fd_ = -1;
  void* handle_ = nullptr;  // CUfileHandle_t
};

// Registers [dev_ptr, dev_ptr + bytes) with cuFile for direct DMA (cuFileBufRegister) for the
// object's lifetime. A failed registration is not an error: cuFile then reads through its own
// bounce buffers; registered() says which (and why in detail()).
class GdsBufferRegistration {
 public:
  GdsBufferRegistration(void* dev_ptr, size_t bytes);
  ~GdsBufferRegistration();
  GdsBufferRegistration(const GdsBufferRegistration&) = delete;
  GdsBufferRegistration& operator=(const GdsBufferRegistration&) = delete;
  bool registered() const { return registered_; }
  const std::string& detail() const { return detail_; }

 private:
  void* ptr_ = nullptr;
  bool registered_ = false;
  std::string detail_;
};

}  // namespace tetra::data
