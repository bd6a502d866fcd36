// The read path of the loader (data.io: auto | gds | pinned | posix) and why it was chosen.
//   gds     cuFile reads the file straight into GPU memory (GPUDirect Storage); uint16/uint32 ids
//           are widened to int32 on the device. Needs a CUDA device, cuFile, and raw-readable files
//           (llm.c .bin, or HDF5 whose /tokens are contiguous, uncompressed, little-endian), all with
//           the same token width.
//   pinned  pread (or HDF5 for files it must decode) into page-locked host memory, then an
//           asynchronous copy to the device on the loader's copy stream and the same widening.
//   posix   plain reads into pageable memory: the CPU backend's path (widened on the host), and a
//           CUDA run's when asked for (its copy to the device goes through the driver's own pinned
//           buffer: one more host copy per byte than pinned, the reason it stays below pinned).
// auto = gds where cuFile is present with its direct path and every file is raw-readable and the
// device is CUDA, else pinned on CUDA, else posix.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "data/gds_file.h"
#include "runtime/device.h"

namespace tetra::data {

enum class IoPath { Gds, Pinned, Posix };
const char* io_path_name(IoPath p);

// What the choice needs to know about each file.
struct FileLayout {
  std::string path;
  bool raw = false;  // raw-readable at a byte offset (Shard::raw())
  int width = 2;     // bytes per token
};

struct IoChoice {
  IoPath path = IoPath::Posix;
  std::string reason;       // one line for the log and the goodput ledger
  bool compat_mode = false;  // gds, but cuFile only offers its compatibility mode
};

// Decides the path for data.io = `requested` on `device` over `files`. `probe` is called only when
// GDS is in question (it opens the cuFile driver). Throws a Config error when an explicit request
// cannot be served (gds without cuFile, or with a file that is not raw-readable).
IoChoice choose_io(const std::string& requested, Device device, const std::vector<FileLayout>& files,
                   const std::function<GdsProbe()>& probe);

// The file system type holding `path` ("xfs", "ext4", "nfs", "lustre", "tmpfs", "overlay", ... or
// "0x<magic>"), for the log line of the GDS path (cuFile's direct DMA depends on it).
std::string filesystem_of(const std::string& path);

}  // namespace tetra::data
