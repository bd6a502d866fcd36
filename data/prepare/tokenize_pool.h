// Worker threads that tokenize batches of documents and hand the results back in the order the
// batches were submitted, so the output does not depend on the number of workers. The caller
// bounds memory by taking results before submitting more (in_flight()).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "data/prepare/document_source.h"

namespace tetra::data {

// The tokens of one batch: the documents' ids back to back, and each document's length.
struct TokenizedBatch {
  std::vector<uint32_t> ids;
  std::vector<int64_t> lengths;  // one per document kept
  int64_t skipped_empty = 0;     // documents whose text was empty (JSONL "text": "")
};

class TokenizePool {
 public:
  using Work = std::function<void(const std::vector<RawDocument>&, TokenizedBatch&)>;

  TokenizePool(int workers, Work work);
  ~TokenizePool();  // stops the workers (batches not taken are dropped)
  TokenizePool(const TokenizePool&) = delete;
  TokenizePool& operator=(const TokenizePool&) = delete;

  void submit(std::vector<RawDocument> docs);
  // The result of the oldest batch not yet taken, once done; rethrows the error `work` threw on it.
  TokenizedBatch take_next();
  size_t in_flight() const { return submitted_ - taken_; }

 private:
  struct Slot {
    bool done = false;
    TokenizedBatch result;
    std::exception_ptr error;
  };
  void run();

  Work work_;
  std::mutex mu_;
  std::condition_variable job_ready_, result_ready_;
  std::deque<std::pair<uint64_t, std::vector<RawDocument>>> jobs_;
  std::map<uint64_t, Slot> slots_;
  uint64_t submitted_ = 0, taken_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tetra::data
