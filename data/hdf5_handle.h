// HDF5 identifiers that close themselves, and HDF5 failures turned into tetra errors.
// The data layer never lets HDF5 print its error stack: every call is checked here and the
// innermost HDF5 message is appended to a tetra::Error that names the file and what was tried.
#pragma once
#include <hdf5.h>

#include <string>

namespace tetra::data {

// Owns one HDF5 identifier (file, dataset, dataspace, datatype, attribute or property list) and
// closes it with the matching H5?close. Move-only.
class H5Handle {
 public:
  H5Handle() = default;
  explicit H5Handle(hid_t id) : id_(id) {}
  ~H5Handle() { reset(); }
  H5Handle(H5Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  H5Handle& operator=(H5Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and reports whether HDF5 closed it cleanly (a file close flushes: check it).
  bool close();
  void reset() { (void)close(); }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Turns off HDF5's automatic printing of its error stack (process-wide, idempotent).
void silence_hdf5_errors();

// The most specific message on HDF5's current error stack (e.g. "unable to open file: ... No such
// file or directory"), or "" if the stack is empty; clears the stack.
std::string hdf5_error_detail();

// Throws a Data error "HDF5 file <file>: <what>: <HDF5 detail>" if id < 0; returns a handle owning id.
H5Handle h5_check_id(hid_t id, const std::string& what, const std::string& file);
// Throws a Data error "HDF5 file <file>: <what>: <HDF5 detail>" if status < 0.
void h5_check(herr_t status, const std::string& what, const std::string& file);

}  // namespace tetra::data
