// The device half of the loader's ring on a CUDA GPU (compiled only with CUDA: device_ring_cuda.cpp).
// Per ring slot: a device staging buffer of raw ids (filled by cuFile, or by a copy from host
// staging), its row table, the int32 inputs/targets [micro_batch, seq_len] handed to the trainer,
// and four events that order them:
//   staged    (copy stream) the host staging and row table of the slot have been copied
//   checked   (copy stream) the device-side id check of a GDS read has landed in host memory
//   consumed  (compute stream) the trainer issued its last work on the slot's inputs/targets
//   ready     (copy stream) inputs/targets hold the slot's new micro-batch
// The copy stream waits for `consumed` before widening into a slot, and the trainer's stream
// waits for `ready` before using it: neither side blocks the host unless the data is truly late.
// Nothing is allocated after construction.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "data/token_widen.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace tetra::data {

class DeviceRing {
 public:
  struct Options {
    Device device;
    int slots = 1;
    size_t staging_bytes = 0;   // per slot, a multiple of 4096
    int64_t micro_batch = 1;
    int64_t seq_len = 1;
    bool host_staging = true;   // readers fill host memory (pinned/posix); false: cuFile fills the device
    bool pinned = true;         // host staging page-locked (pinned path) or pageable (posix path)
  };
  explicit DeviceRing(const Options& o);
  ~DeviceRing();
  DeviceRing(const DeviceRing&) = delete;
  DeviceRing& operator=(const DeviceRing&) = delete;

  // ---- reader side (any reader thread; one thread per slot at a time) ----
  void* host_staging(int s) const;  // null without host staging
  StagedRow* host_rows(int s) const;  // pinned, micro_batch entries
  // Device staging: one allocation for all slots (registered with cuFile as one buffer).
  void* device_staging_base() const { return dev_staging_; }
  size_t device_staging_bytes() const { return slot_bytes_ * static_cast<size_t>(slots_); }
  int64_t device_staging_offset(int s) const { return static_cast<int64_t>(slot_bytes_) * s; }
  // Blocks the calling host thread until slot s's staging may be rewritten: its last copy from host
  // staging is done and, without host staging (cuFile writes device memory outside any stream),
  // its last widening too.
  void wait_writable(int s);
  // Enqueues on the copy stream: host staging[0, staged_bytes) and the row table → device; with
  // check_on_device, the id check (result to host memory, event `checked`); the wait for
  // `consumed`; the widening into inputs/targets; event `ready`.
  void submit(int s, size_t staged_bytes, int64_t n_rows, int width, bool check_on_device);
  // Waits for the check of slot s's last submit: the smallest bad flat index, or -1.
  int64_t device_check(int s);
  // Copies `bytes` of slot s's device staging at byte `offset` to dst (blocking; error messages).
  void read_back(int s, int64_t offset, void* dst, size_t bytes);

  // ---- trainer side (the thread that computes, on its current stream) ----
  void release(int s);  // records `consumed` after the work issued so far
  bool acquire(int s);  // the current stream waits for `ready`; true if it was not complete yet
  const Tensor& inputs(int s) const;
  const Tensor& targets(int s) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int slots_ = 0;
  size_t slot_bytes_ = 0;
  void* dev_staging_ = nullptr;
};

}  // namespace tetra::data
