#include "launch/job/rank_agreement.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <vector>

#include "runtime/tensor.h"

namespace tetra::launch {

namespace {
// The failing rank's kind (1 byte) and message (cut at this length) travel in one broadcast.
constexpr int64_t kMessageBytes = 2048;
}  // namespace

void agree(Communicator& world, const std::function<void()>& work) {
  bool failed = false;
  ErrorKind kind = ErrorKind::Internal;
  std::string message;
  try {
    work();
  } catch (const Error& e) {
    failed = true;
    kind = e.kind();
    message = e.what();
  } catch (const std::exception& e) {  // bad_alloc, filesystem_error, ...
    failed = true;
    message = e.what();
  }
  const int rank = world.rank(), size = world.size();
  if (size == 1) {
    if (failed) throw AgreedError(kind, message, rank);
    return;
  }
  // Success costs one all-reduce of one number: the lowest failing rank, or `size` for none.
  std::vector<double> lowest{static_cast<double>(failed ? rank : size)};
  world.all_reduce_host(lowest, ReduceOp::Min);
  const int origin = static_cast<int>(lowest[0]);
  if (origin >= size) return;
  Tensor buf = Tensor::zeros({1 + kMessageBytes}, DType::U8);
  auto* p = static_cast<unsigned char*>(buf.data_ptr());
  if (rank == origin) {
    p[0] = static_cast<unsigned char>(kind);
    std::memcpy(p + 1, message.data(), std::min<size_t>(message.size(), kMessageBytes - 1));
  }
  world.broadcast(buf, origin)->wait();
  if (rank != origin) {
    kind = static_cast<ErrorKind>(p[0]);
    const char* text = reinterpret_cast<const char*>(p + 1);
    message.assign(text, strnlen(text, kMessageBytes));
  }
  throw AgreedError(kind, message, origin);
}

void fail_on_every_rank(ErrorKind kind, const std::string& message, int origin_rank) {
  throw AgreedError(kind, message, origin_rank);
}

}  // namespace tetra::launch
