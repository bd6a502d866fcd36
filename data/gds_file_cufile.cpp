// GPUDirect Storage through cuFile (compiled only where libcufile was found; CMakeLists.txt picks
// this file or gds_file_stub.cpp).
// Calls used: cuFileDriverOpen / cuFileDriverGetProperties (once per process), open(O_DIRECT) +
// cuFileHandleRegister (CU_FILE_HANDLE_TYPE_OPAQUE_FD) per file, cuFileBufRegister per device
// buffer, cuFileRead(handle, dev_base, size, file_offset, dev_offset) per run of windows.
// cuFileRead returns the bytes read, -1 with errno set for a system error, or the negative
// CUfileOpError code; cuFile status structs carry .err (CUfileOpError) and .cu_err (CUresult).
#include <cufile.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "data/gds_file.h"
#include "runtime/error.h"

namespace tetra::data {

namespace {

std::string cufile_error(CUfileError_t e) {
  std::string s = cufileop_status_error(e.err);
  s += " (cuFile error " + std::to_string(static_cast<int>(e.err));
  if (IS_CUDA_ERR(e)) s += ", CUDA driver error " + std::to_string(static_cast<int>(e.cu_err));
  return s + ")";
}

// Which storage the nvidia-fs driver can serve with direct DMA (CUfileDrvProps_t::nvfs.dstatusflags).
std::string direct_targets(unsigned int flags) {
  static const struct {
    int bit;
    const char* name;
  } kTargets[] = {{CU_FILE_NVME_SUPPORTED, "nvme"},       {CU_FILE_NVMEOF_SUPPORTED, "nvmeof"},
                  {CU_FILE_SCSI_SUPPORTED, "scsi"},       {CU_FILE_LUSTRE_SUPPORTED, "lustre"},
                  {CU_FILE_WEKAFS_SUPPORTED, "wekafs"},   {CU_FILE_NFS_SUPPORTED, "nfs"},
                  {CU_FILE_GPFS_SUPPORTED, "gpfs"},       {CU_FILE_BEEGFS_SUPPORTED, "beegfs"},
                  {CU_FILE_NVMESH_SUPPORTED, "nvmesh"},   {CU_FILE_SCALEFLUX_CSD_SUPPORTED, "scaleflux"}};
  std::string out;
  for (const auto& t : kTargets)
    if (flags & (1u << t.bit)) out += (out.empty() ? "" : ",") + std::string(t.name);
  return out.empty() ? "none" : out;
}

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  return v && (std::strcmp(v, "true") == 0 || std::strcmp(v, "1") == 0);
}

}  // namespace

GdsProbe gds_probe() {
  static std::once_flag once;
  static GdsProbe probe;
  std::call_once(once, [] {
    const CUfileError_t opened = cuFileDriverOpen();  // kept open for the process: files come and go
    if (opened.err != CU_FILE_SUCCESS) {
      probe.detail = "cuFileDriverOpen failed: " + cufile_error(opened);
      return;
    }
    probe.available = true;
    CUfileDrvProps_t props;
    std::memset(&props, 0, sizeof props);
    const CUfileError_t got = cuFileDriverGetProperties(&props);
    if (got.err != CU_FILE_SUCCESS) {
      // Without the properties the direct path cannot be confirmed: report it as compatibility mode.
      probe.compat_mode = true;
      probe.detail = "cuFile driver open, but cuFileDriverGetProperties failed: " + cufile_error(got) +
                     "; assuming compatibility mode";
      return;
    }
    const unsigned major = props.nvfs.major_version, minor = props.nvfs.minor_version;
    const bool allow_compat = props.nvfs.dcontrolflags & (1u << CU_FILE_ALLOW_COMPAT_MODE);
    // nvidia-fs version 0.0: the kernel driver is not loaded, so every read is a compatibility-mode
    // read (pread into host bounce buffers, then a copy). CUFILE_FORCE_COMPAT_MODE forces the same.
    if ((major == 0 && minor == 0) || env_true("CUFILE_FORCE_COMPAT_MODE")) {
      probe.compat_mode = true;
      probe.detail = std::string("cuFile in compatibility mode only (") +
                     (major == 0 && minor == 0 ? "the nvidia-fs kernel driver is not loaded"
                                               : "CUFILE_FORCE_COMPAT_MODE is set") +
                     "): reads go through host bounce buffers, not direct DMA";
      return;
    }
    probe.detail = "nvidia-fs " + std::to_string(major) + "." + std::to_string(minor) + ", direct DMA for: " +
                   direct_targets(props.nvfs.dstatusflags) + (allow_compat ? ", compatibility fallback allowed" : "") +
                   ", max direct I/O " + std::to_string(props.nvfs.max_direct_io_size) + " KiB";
  });
  return probe;
}

GdsFile::GdsFile(const std::string& path) : path_(path) {
  const GdsProbe probe = gds_probe();
  if (!probe.available) TETRA_FAIL(Data, "cannot read ", path, " with GPUDirect Storage: ", probe.detail);
  fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd_ < 0)
    TETRA_FAIL(Data, "cannot open ", path, " with O_DIRECT for GPUDirect Storage: ", std::strerror(errno),
               " (the file system may not support direct I/O; use data.io: pinned)");
  CUfileDescr_t descr;
  std::memset(&descr, 0, sizeof descr);
  descr.handle.fd = fd_;
  descr.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  CUfileHandle_t handle = nullptr;
  const CUfileError_t st = cuFileHandleRegister(&handle, &descr);
  if (st.err != CU_FILE_SUCCESS) {
    ::close(fd_);
    fd_ = -1;
    TETRA_FAIL(Data, "cuFileHandleRegister failed for ", path, ": ", cufile_error(st),
               " (is its file system supported by GPUDirect Storage? see `gdscheck -p`; or use data.io: pinned)");
  }
  handle_ = handle;
}

GdsFile::~GdsFile() {
  if (handle_) cuFileHandleDeregister(static_cast<CUfileHandle_t>(handle_));
  if (fd_ >= 0) ::close(fd_);
}

int64_t GdsFile::read(void* dev_base, size_t bytes, int64_t file_offset, int64_t dev_offset) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t got = cuFileRead(static_cast<CUfileHandle_t>(handle_), dev_base, bytes - done,
                                   static_cast<off_t>(file_offset + static_cast<int64_t>(done)),
                                   static_cast<off_t>(dev_offset + static_cast<int64_t>(done)));
    if (got == -1) {
      if (errno == EINTR) continue;
      TETRA_FAIL(Data, "cuFileRead of ", bytes, " bytes at byte ", file_offset, " of ", path_, " failed: ",
                 std::strerror(errno));
    }
    if (got < 0)
      TETRA_FAIL(Data, "cuFileRead of ", bytes, " bytes at byte ", file_offset, " of ", path_, " failed: ",
                 cufileop_status_error(static_cast<CUfileOpError>(-got)), " (cuFile error ", -got, ")");
    if (got == 0) break;  // end of file: the caller checks that the bytes it needs arrived
    done += static_cast<size_t>(got);
  }
  return static_cast<int64_t>(done);
}

GdsBufferRegistration::GdsBufferRegistration(void* dev_ptr, size_t bytes) : ptr_(dev_ptr) {
  const CUfileError_t st = cuFileBufRegister(dev_ptr, bytes, 0);
  registered_ = st.err == CU_FILE_SUCCESS;
  detail_ = registered_ ? "registered" : "cuFileBufRegister failed (" + cufile_error(st) + "): cuFile bounce buffers";
}

GdsBufferRegistration::~GdsBufferRegistration() {
  if (registered_) cuFileBufDeregister(ptr_);
}

}  // namespace tetra::data
