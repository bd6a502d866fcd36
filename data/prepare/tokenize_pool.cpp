#include "data/prepare/tokenize_pool.h"

namespace tetra::data {

TokenizePool::TokenizePool(int workers, Work work) : work_(std::move(work)) {
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { run(); });
}

TokenizePool::~TokenizePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  job_ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void TokenizePool::submit(std::vector<RawDocument> docs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[submitted_];
    jobs_.emplace_back(submitted_++, std::move(docs));
  }
  job_ready_.notify_one();
}

TokenizedBatch TokenizePool::take_next() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t seq = taken_;
  result_ready_.wait(lock, [&] { return slots_[seq].done; });
  Slot slot = std::move(slots_[seq]);
  slots_.erase(seq);
  ++taken_;
  if (slot.error) std::rethrow_exception(slot.error);
  return std::move(slot.result);
}

void TokenizePool::run() {
  for (;;) {
    std::pair<uint64_t, std::vector<RawDocument>> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      job_ready_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    TokenizedBatch result;
    std::exception_ptr error;
    try {
      work_(job.second, result);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      Slot& slot = slots_[job.first];
      slot.result = std::move(result);
      slot.error = error;
      slot.done = true;
    }
    result_ready_.notify_all();
  }
}

}  // namespace tetra::data
