#include "runtime/hdf5_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tetra {

namespace {

// Silences HDF5's automatic error stack printing once per process.
void silence_hdf5() {
  static bool done = false;
  if (!done) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    done = true;
  }
}

// Why the last write failed, as the system said (HDF5's own errors are silenced): ": No space left
// on device", ": File too large" (a file-size limit), or nothing when errno names no I/O error.
std::string io_reason() {
  const int e = errno;
  if (e == ENOSPC || e == EFBIG || e == EDQUOT || e == EIO || e == EROFS) return std::string(": ") + std::strerror(e);
  return "";
}

hid_t native_type(DType t) {
  switch (t) {
    case DType::F32: return H5T_NATIVE_FLOAT;
    case DType::F64: return H5T_NATIVE_DOUBLE;
    case DType::I32: return H5T_NATIVE_INT32;
    case DType::I64: return H5T_NATIVE_INT64;
    case DType::U16: return H5T_NATIVE_UINT16;
    case DType::U32: return H5T_NATIVE_UINT32;
    case DType::U8: return H5T_NATIVE_UINT8;
    case DType::F8E4M3:
    case DType::F8E5M2: return H5T_NATIVE_UINT8;  // stored as raw codes
    case DType::BF16: return H5T_NATIVE_UINT16;  // stored as raw bits
  }
  return H5T_NATIVE_FLOAT;
}

// Closes an HDF5 handle of any kind at scope exit.
struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() {
    if (id >= 0) close(id);
  }
};

}  // namespace

#define H5_CHECK(expr, ...)                                                                   \
  do {                                                                                        \
    if ((expr) < 0) TETRA_FAIL(Checkpoint, path_, ": ", __VA_ARGS__);                          \
  } while (0)

void hdf5_no_cleanup_at_exit() { H5dont_atexit(); }

Hdf5File::Hdf5File(const std::string& path, Mode mode) : path_(path) {
  silence_hdf5();
  if (mode == Mode::Read) {
    if (!std::filesystem::exists(path)) TETRA_FAIL(Checkpoint, path, ": no such file");
    if (H5Fis_hdf5(path.c_str()) <= 0) TETRA_FAIL(Checkpoint, path, ": not an HDF5 file (or truncated)");
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) TETRA_FAIL(Checkpoint, path, ": cannot open as HDF5 (corrupt or unreadable)");
  } else {
    file_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file_ < 0) TETRA_FAIL(Checkpoint, path, ": cannot create (directory missing or not writable?)");
  }
}

Hdf5File::~Hdf5File() {
  if (file_ >= 0) H5Fclose(file_);
}

bool Hdf5File::has(const std::string& name) const {
  // Check each path component so a missing parent group is "absent", not an error.
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    size_t next = name.find('/', pos);
    partial = name.substr(0, next);
    if (!partial.empty() && H5Lexists(file_, partial.c_str(), H5P_DEFAULT) <= 0) return false;
    pos = next == std::string::npos ? next : next + 1;
  }
  return true;
}

std::vector<std::string> Hdf5File::dataset_names() const {
  std::vector<std::string> names;
  auto visit = [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
    if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
#if H5_VERSION_GE(1, 12, 0)
  H5_CHECK(H5Ovisit(file_, H5_INDEX_NAME, H5_ITER_NATIVE, visit, &names, H5O_INFO_BASIC), "cannot list datasets");
#else
  H5_CHECK(H5Ovisit(file_, H5_INDEX_NAME, H5_ITER_NATIVE, visit, &names), "cannot list datasets");
#endif
  return names;
}

hid_t Hdf5File::open_dataset(const std::string& name) const {
  if (!has(name)) TETRA_FAIL(Checkpoint, path_, ": missing dataset '", name, "'");
  hid_t d = H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  if (d < 0) TETRA_FAIL(Checkpoint, path_, ": '", name, "' is not a readable dataset");
  return d;
}

Shape Hdf5File::shape(const std::string& name) const {
  Handle d{open_dataset(name), H5Dclose};
  Handle s{H5Dget_space(d.id), H5Sclose};
  H5_CHECK(s.id, "cannot read the shape of '", name, "'");
  int nd = H5Sget_simple_extent_ndims(s.id);
  H5_CHECK(nd, "cannot read the rank of '", name, "'");
  std::vector<hsize_t> dims(static_cast<size_t>(nd));
  H5_CHECK(H5Sget_simple_extent_dims(s.id, dims.data(), nullptr), "cannot read the dims of '", name, "'");
  return Shape(dims.begin(), dims.end());
}

DType Hdf5File::stored_dtype(const std::string& name) const {
  Handle d{open_dataset(name), H5Dclose};
  Handle t{H5Dget_type(d.id), H5Tclose};
  H5T_class_t cls = H5Tget_class(t.id);
  size_t size = H5Tget_size(t.id);
  if (cls == H5T_FLOAT) return size == 8 ? DType::F64 : DType::F32;
  if (cls == H5T_INTEGER) {
    bool is_signed = H5Tget_sign(t.id) == H5T_SGN_2;
    if (size == 1) return DType::U8;
    if (size == 2) return is_signed ? DType::I32 : DType::U16;
    if (size == 4) return is_signed ? DType::I32 : DType::U32;
    return DType::I64;
  }
  TETRA_FAIL(Checkpoint, path_, ": dataset '", name, "' has a type tetra cannot read");
}

Tensor Hdf5File::read(const std::string& name, DType as) const {
  Shape sh = shape(name);
  Tensor t = Tensor::empty(sh, as, Device::cpu());
  Handle d{open_dataset(name), H5Dclose};
  if (t.numel() > 0)
    H5_CHECK(H5Dread(d.id, native_type(as), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()), "cannot read '", name,
             "' (truncated file?)");
  return t;
}

void Hdf5File::read_range(const std::string& name, int64_t offset, int64_t count, DType as, void* out) const {
  Handle d{open_dataset(name), H5Dclose};
  Handle fs{H5Dget_space(d.id), H5Sclose};
  hsize_t off = static_cast<hsize_t>(offset), cnt = static_cast<hsize_t>(count);
  H5_CHECK(H5Sselect_hyperslab(fs.id, H5S_SELECT_SET, &off, nullptr, &cnt, nullptr), "bad range [", offset, ", ",
           offset + count, ") of '", name, "'");
  Handle ms{H5Screate_simple(1, &cnt, nullptr), H5Sclose};
  H5_CHECK(H5Dread(d.id, native_type(as), ms.id, fs.id, H5P_DEFAULT, out), "cannot read [", offset, ", ",
           offset + count, ") of '", name, "'");
}

void Hdf5File::write(const std::string& name, const Tensor& host) {
  TETRA_CHECK(host.device().is_cpu(), "Hdf5File::write needs a host tensor, got ", host.describe());
  std::vector<hsize_t> dims(host.shape().begin(), host.shape().end());
  Handle space{H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose};
  Handle lcpl{H5Pcreate(H5P_LINK_CREATE), H5Pclose};
  H5_CHECK(H5Pset_create_intermediate_group(lcpl.id, 1), "property list");
  hid_t type = native_type(host.dtype());
  Handle d{H5Dcreate2(file_, name.c_str(), type, space.id, lcpl.id, H5P_DEFAULT, H5P_DEFAULT), H5Dclose};
  H5_CHECK(d.id, "cannot create dataset '", name, "' (exists already?)");
  if (host.numel() > 0)
    H5_CHECK(H5Dwrite(d.id, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, host.data_ptr()), "cannot write '", name,
             "' (disk full?)");
}

namespace {
hid_t open_object(hid_t file, const std::string& path, const std::string& object) {
  hid_t o = H5Oopen(file, object.c_str(), H5P_DEFAULT);
  if (o < 0) TETRA_FAIL(Checkpoint, path, ": no object '", object, "' for attributes");
  return o;
}
}  // namespace

void Hdf5File::set_attr(const std::string& name, int64_t value, const std::string& object) {
  Handle o{open_object(file_, path_, object), H5Oclose};
  if (H5Aexists(o.id, name.c_str()) > 0) H5Adelete(o.id, name.c_str());
  Handle s{H5Screate(H5S_SCALAR), H5Sclose};
  Handle a{H5Acreate2(o.id, name.c_str(), H5T_NATIVE_INT64, s.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  H5_CHECK(a.id, "cannot create attribute '", name, "'");
  H5_CHECK(H5Awrite(a.id, H5T_NATIVE_INT64, &value), "cannot write attribute '", name, "'");
}

void Hdf5File::set_attr(const std::string& name, double value, const std::string& object) {
  Handle o{open_object(file_, path_, object), H5Oclose};
  if (H5Aexists(o.id, name.c_str()) > 0) H5Adelete(o.id, name.c_str());
  Handle s{H5Screate(H5S_SCALAR), H5Sclose};
  Handle a{H5Acreate2(o.id, name.c_str(), H5T_NATIVE_DOUBLE, s.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  H5_CHECK(a.id, "cannot create attribute '", name, "'");
  H5_CHECK(H5Awrite(a.id, H5T_NATIVE_DOUBLE, &value), "cannot write attribute '", name, "'");
}

void Hdf5File::set_attr(const std::string& name, const std::string& value, const std::string& object) {
  Handle o{open_object(file_, path_, object), H5Oclose};
  if (H5Aexists(o.id, name.c_str()) > 0) H5Adelete(o.id, name.c_str());
  Handle t{H5Tcopy(H5T_C_S1), H5Tclose};
  H5_CHECK(H5Tset_size(t.id, value.empty() ? 1 : value.size()), "string type");
  Handle s{H5Screate(H5S_SCALAR), H5Sclose};
  Handle a{H5Acreate2(o.id, name.c_str(), t.id, s.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  H5_CHECK(a.id, "cannot create attribute '", name, "'");
  std::string v = value.empty() ? std::string(1, '\0') : value;
  H5_CHECK(H5Awrite(a.id, t.id, v.data()), "cannot write attribute '", name, "'");
}

bool Hdf5File::has_attr(const std::string& name, const std::string& object) const {
  Handle o{open_object(file_, path_, object), H5Oclose};
  return H5Aexists(o.id, name.c_str()) > 0;
}

int64_t Hdf5File::attr_int(const std::string& name, const std::string& object) const {
  Handle o{open_object(file_, path_, object), H5Oclose};
  if (H5Aexists(o.id, name.c_str()) <= 0) TETRA_FAIL(Checkpoint, path_, ": missing attribute '", name, "'");
  Handle a{H5Aopen(o.id, name.c_str(), H5P_DEFAULT), H5Aclose};
  int64_t v = 0;
  H5_CHECK(H5Aread(a.id, H5T_NATIVE_INT64, &v), "attribute '", name, "' is not an integer");
  return v;
}

double Hdf5File::attr_double(const std::string& name, const std::string& object) const {
  Handle o{open_object(file_, path_, object), H5Oclose};
  if (H5Aexists(o.id, name.c_str()) <= 0) TETRA_FAIL(Checkpoint, path_, ": missing attribute '", name, "'");
  Handle a{H5Aopen(o.id, name.c_str(), H5P_DEFAULT), H5Aclose};
  double v = 0;
  H5_CHECK(H5Aread(a.id, H5T_NATIVE_DOUBLE, &v), "attribute '", name, "' is not a number");
  return v;
}

std::string Hdf5File::attr_string(const std::string& name, const std::string& object) const {
  Handle o{open_object(file_, path_, object), H5Oclose};
  if (H5Aexists(o.id, name.c_str()) <= 0) TETRA_FAIL(Checkpoint, path_, ": missing attribute '", name, "'");
  Handle a{H5Aopen(o.id, name.c_str(), H5P_DEFAULT), H5Aclose};
  Handle t{H5Aget_type(a.id), H5Tclose};
  if (H5Tget_class(t.id) != H5T_STRING) TETRA_FAIL(Checkpoint, path_, ": attribute '", name, "' is not a string");
  if (H5Tis_variable_str(t.id) > 0) {
    char* buf = nullptr;
    Handle mt{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mt.id, H5T_VARIABLE);
    H5Tset_cset(mt.id, H5Tget_cset(t.id));  // h5py writes UTF-8; HDF5 converts no charsets
    H5_CHECK(H5Aread(a.id, mt.id, &buf), "cannot read attribute '", name, "'");
    std::string s = buf ? buf : "";
    H5free_memory(buf);
    return s;
  }
  size_t n = H5Tget_size(t.id);
  std::string s(n, '\0');
  H5_CHECK(H5Aread(a.id, t.id, s.data()), "cannot read attribute '", name, "'");
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

void Hdf5File::flush() {
  errno = 0;
  if (H5Fflush(file_, H5F_SCOPE_GLOBAL) < 0) TETRA_FAIL(Checkpoint, path_, ": flush failed", io_reason());
}

}  // namespace tetra
