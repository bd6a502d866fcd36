#include "data/io_path.h"

#include <sys/vfs.h>

#include <cstdio>

#include "runtime/error.h"

namespace tetra::data {

const char* io_path_name(IoPath p) {
  switch (p) {
    case IoPath::Gds: return "gds";
    case IoPath::Pinned: return "pinned";
    case IoPath::Posix: return "posix";
  }
  return "?";
}

namespace {

// Why GDS cannot read these files ("" when it can): the first file that is not raw, or mixed widths.
std::string gds_file_obstacle(const std::vector<FileLayout>& files) {
  for (const FileLayout& f : files)
    if (!f.raw)
      return f.path + " is not raw-readable (HDF5 with chunked, compressed or big-endian /tokens, or a Megatron "
             "dataset of a dtype other than uint16/int32): it is decoded on the host (rewrite it with `tetra data "
             "prepare` for a contiguous layout)";
  for (const FileLayout& f : files)
    if (f.width != files.front().width)
      return "the files mix uint16 (" + (f.width == 2 ? f.path : files.front().path) + ") and uint32 (" +
             (f.width == 4 ? f.path : files.front().path) + ") tokens";
  return "";
}

}  // namespace

IoChoice choose_io(const std::string& requested, Device device, const std::vector<FileLayout>& files,
                   const std::function<GdsProbe()>& probe) {
  if (requested != "auto" && requested != "gds" && requested != "pinned" && requested != "posix")
    TETRA_FAIL(Config, "data.io: ", requested, " is not one of auto, gds, pinned, posix");
  IoChoice c;
  if (device.is_cpu()) {
    if (requested == "gds")
      TETRA_FAIL(Config, "data.io: gds reads straight into GPU memory, but the run is on the CPU; use auto, pinned "
                 "or posix");
    c.path = IoPath::Posix;
    c.reason = requested == "pinned" ? "data.io: pinned, but on the CPU backend there is no device copy to pin for"
                                     : requested == "posix" ? "data.io: posix"
                                                            : "auto: the CPU backend reads into host memory";
    return c;
  }
  if (requested == "posix") {
    c.path = IoPath::Posix;
    c.reason = "data.io: posix";
    return c;
  }
  if (requested == "pinned") {
    c.path = IoPath::Pinned;
    c.reason = "data.io: pinned";
    return c;
  }
  const std::string obstacle = gds_file_obstacle(files);
  if (requested == "gds") {
    if (!obstacle.empty()) TETRA_FAIL(Config, "data.io: gds cannot read these files: ", obstacle, "; or use data.io: auto");
    const GdsProbe p = probe();
    if (!p.available) TETRA_FAIL(Config, "data.io: gds, but GPUDirect Storage is not available: ", p.detail,
                                 "; use data.io: auto or pinned");
    c.path = IoPath::Gds;
    c.compat_mode = p.compat_mode;
    c.reason = "data.io: gds (" + p.detail + ")";
    return c;
  }
  // auto on CUDA.
  c.path = IoPath::Pinned;
  if (!obstacle.empty()) {
    c.reason = "auto: pinned, not gds: " + obstacle;
    return c;
  }
  const GdsProbe p = probe();
  if (!p.available) {
    c.reason = "auto: pinned, not gds: " + p.detail;
  } else if (p.compat_mode) {
    c.reason = "auto: pinned, not gds: " + p.detail + " (no faster than pinned reads; data.io: gds forces it)";
  } else {
    c.path = IoPath::Gds;
    c.reason = "auto: gds (" + p.detail + ")";
  }
  return c;
}

std::string filesystem_of(const std::string& path) {
  struct statfs s {};
  if (::statfs(path.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x6969: return "nfs";
    case 0x0BD00BD0: return "lustre";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlay";
    case 0x9123683E: return "btrfs";
    case 0x47504653: return "gpfs";
    case 0x19830326: return "beegfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(s.f_type));
      return buf;
    }
  }
}

}  // namespace tetra::data
