// The CPU backend's op table (runtime/op_table.h).
#include "runtime/op_table.h"

#include "runtime/cpu/cpu_ops.h"

namespace tetra::cpu {

#define TETRA_CPU_OP(name) .name = &cpu::name,
const OpTable op_table = {TETRA_OPS(TETRA_CPU_OP).adamw_update_multi = &cpu::adamw_update_multi};
#undef TETRA_CPU_OP

}  // namespace tetra::cpu
