#include "data/hdf5_handle.h"

#include <mutex>

#include "runtime/error.h"

namespace tetra::data {

bool H5Handle::close() {
  if (id_ < 0) return true;
  hid_t id = id_;
  id_ = H5I_INVALID_HID;
  herr_t status = -1;
  switch (H5Iget_type(id)) {
    case H5I_FILE: status = H5Fclose(id); break;
    case H5I_DATASET: status = H5Dclose(id); break;
    case H5I_DATASPACE: status = H5Sclose(id); break;
    case H5I_DATATYPE: status = H5Tclose(id); break;
    case H5I_ATTR: status = H5Aclose(id); break;
    case H5I_GENPROP_LST: status = H5Pclose(id); break;
    case H5I_GROUP: status = H5Gclose(id); break;
    default: status = H5Idec_ref(id) < 0 ? -1 : 0; break;
  }
  return status >= 0;
}

void silence_hdf5_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

namespace {
// H5Ewalk2 visits the stack from the API call down to where the error was detected; the last
// frame visited carries the most specific description.
herr_t keep_innermost(unsigned, const H5E_error2_t* err, void* client) {
  auto* out = static_cast<std::string*>(client);
  if (err && err->desc && err->desc[0]) *out = err->desc;
  return 0;
}
}  // namespace

std::string hdf5_error_detail() {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, &keep_innermost, &detail);
  H5Eclear2(H5E_DEFAULT);
  return detail;
}

H5Handle h5_check_id(hid_t id, const std::string& what, const std::string& file) {
  if (id < 0) {
    std::string detail = hdf5_error_detail();
    TETRA_FAIL(Data, "HDF5 file ", file, ": ", what, detail.empty() ? "" : ": ", detail);
  }
  return H5Handle(id);
}

void h5_check(herr_t status, const std::string& what, const std::string& file) {
  if (status < 0) {
    std::string detail = hdf5_error_detail();
    TETRA_FAIL(Data, "HDF5 file ", file, ": ", what, detail.empty() ? "" : ": ", detail);
  }
}

}  // namespace tetra::data
