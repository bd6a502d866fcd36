// Return-code check for MPI calls: a failure names the call and MPI's own error string.
#pragma once
#include <mpi.h>

#include <string>

#include "runtime/error.h"

#define TETRA_MPI_CHECK(call)                                                                       \
  do {                                                                                              \
    int tetra_rc_ = (call);                                                                         \
    if (tetra_rc_ != MPI_SUCCESS) {                                                                 \
      char tetra_msg_[MPI_MAX_ERROR_STRING];                                                        \
      int tetra_len_ = 0;                                                                           \
      MPI_Error_string(tetra_rc_, tetra_msg_, &tetra_len_);                                         \
      TETRA_FAIL(Comm, #call " failed: ", std::string(tetra_msg_, static_cast<size_t>(tetra_len_))); \
    }                                                                                               \
  } while (0)
