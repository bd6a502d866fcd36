#include "runtime/dtype.h"

#include "runtime/error.h"

namespace tetra {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U16: return 2;
    case DType::U32: return 4;
    case DType::U8: return 1;
    case DType::F64: return 8;
    case DType::F8E4M3: return 1;
    case DType::F8E5M2: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U16: return "uint16";
    case DType::U32: return "uint32";
    case DType::U8: return "uint8";
    case DType::F64: return "fp64";
    case DType::F8E4M3: return "fp8_e4m3";
    case DType::F8E5M2: return "fp8_e5m2";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::F32, DType::BF16, DType::I32, DType::I64, DType::U16, DType::U32, DType::U8, DType::F64,
                  DType::F8E4M3, DType::F8E5M2})
    if (name == dtype_name(t)) return t;
  TETRA_FAIL(Usage, "unknown dtype '", name, "' (valid: fp32, bf16, int32, int64, uint16, uint32, uint8, fp64, fp8_e4m3, fp8_e5m2)");
}

}  // namespace tetra
