// A small checked wrapper over the HDF5 C API for tetra's own files (checkpoints, consolidated
// weights, test fixtures). Every HDF5 call is checked; errors name the file and the object.
// HDF5's own error printing is silenced: tetra reports the error itself.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace tetra {

// Call first in main(), before any other HDF5 call: the library then installs no exit handler that
// closes what is still open. A write that failed (a full disk, a file-size limit) makes H5Fclose
// fail half-way and leaves the file's id behind with its shared state freed; HDF5's shutdown at
// exit would close it again and crash (a segfault in H5F__close_cb). Every file tetra opens is
// closed by its owner; what a failed close leaves is the kernel's to release at exit.
void hdf5_no_cleanup_at_exit();

class Hdf5File {
 public:
  enum class Mode { Read, Create };  // Create truncates
  Hdf5File(const std::string& path, Mode mode);
  ~Hdf5File();
  Hdf5File(const Hdf5File&) = delete;
  Hdf5File& operator=(const Hdf5File&) = delete;

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const;        // dataset or group at this path
  std::vector<std::string> dataset_names() const; // every dataset, recursively, "/a/b" → "a/b"
  Shape shape(const std::string& name) const;
  DType stored_dtype(const std::string& name) const;

  // Whole dataset into a host tensor of dtype `as` (fp32, fp64, int32, int64, uint16, uint32);
  // HDF5 converts types.
  Tensor read(const std::string& name, DType as = DType::F32) const;
  // Elements [offset, offset+count) of a 1-D dataset.
  void read_range(const std::string& name, int64_t offset, int64_t count, DType as, void* out) const;
  // Writes a host tensor as a new dataset (contiguous, uncompressed), creating parent groups.
  void write(const std::string& name, const Tensor& host);

  void set_attr(const std::string& name, int64_t value, const std::string& object = "/");
  void set_attr(const std::string& name, double value, const std::string& object = "/");
  void set_attr(const std::string& name, const std::string& value, const std::string& object = "/");
  bool has_attr(const std::string& name, const std::string& object = "/") const;
  int64_t attr_int(const std::string& name, const std::string& object = "/") const;
  double attr_double(const std::string& name, const std::string& object = "/") const;
  std::string attr_string(const std::string& name, const std::string& object = "/") const;

  void flush();

 private:
  hid_t open_dataset(const std::string& name) const;
  std::string path_;
  hid_t file_ = -1;
};

}  // namespace tetra
