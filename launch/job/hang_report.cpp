#include "launch/job/hang_report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ranges>
#include <thread>

#include "launch/checkpoint/files.h"
#include "runtime/text_join.h"

namespace tetra::launch {

namespace fs = std::filesystem;

namespace {
constexpr int64_t kHostBytes = 64;

std::string report_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d", rank);
  return buf;
}
}  // namespace

std::vector<RankIdentity> exchange_identities(Communicator& world) {
  // Fixed-size records: pid (8 bytes) then the host name (kHostBytes, NUL padded).
  const int64_t rec = 8 + kHostBytes;
  Tensor in = Tensor::zeros({rec}, DType::U8);
  auto* p = static_cast<unsigned char*>(in.data_ptr());
  const int64_t pid = static_cast<int64_t>(::getpid());
  std::memcpy(p, &pid, 8);
  char host[kHostBytes] = {0};
  ::gethostname(host, kHostBytes - 1);
  std::memcpy(p + 8, host, kHostBytes);
  Tensor out = Tensor::zeros({rec * world.size()}, DType::U8);
  if (world.size() > 1)
    world.all_gather(out, in)->wait();
  else
    std::memcpy(out.data_ptr(), in.data_ptr(), static_cast<size_t>(rec));
  std::vector<RankIdentity> ids;
  const auto* o = static_cast<const unsigned char*>(out.data_ptr());
  for (int r = 0; r < world.size(); ++r) {
    RankIdentity id;
    id.rank = r;
    std::memcpy(&id.pid, o + r * rec, 8);
    const char* h = reinterpret_cast<const char*>(o + r * rec + 8);
    id.host.assign(h, strnlen(h, kHostBytes));
    ids.push_back(std::move(id));
  }
  return ids;
}

HangDiagnosis diagnose_hang(const std::string& run_dir, const std::vector<RankIdentity>& ranks, int rank,
                            const std::string& what, double grace_s) {
  HangDiagnosis d;
  if (ranks.empty() || run_dir.empty()) return d;
  const std::string launch = ranks[0].host + "-" + std::to_string(ranks[0].pid);
  const fs::path dir = fs::path(run_dir) / "hangs" / launch;
  std::error_code ec;
  fs::create_directories(dir, ec);
  {
    std::ofstream out(dir / report_name(rank));
    out << what << "\n";
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  std::vector<int> present;
  for (;;) {
    present.clear();
    for (const RankIdentity& id : ranks)
      if (fs::exists(dir / report_name(id.rank), ec)) present.push_back(id.rank);
    if (present.size() == ranks.size() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  d.reporter = !present.empty() && present.front() == rank;
  for (const RankIdentity& id : ranks)
    if (std::find(present.begin(), present.end(), id.rank) == present.end()) d.missing.push_back(id.rank);
  if (d.missing.empty()) return d;
  std::string names = join_text(d.missing | std::views::take(16), ", ", [&](int missing) {
    const RankIdentity& id = ranks[static_cast<size_t>(missing)];
    return "rank " + std::to_string(id.rank) + " (pid " + std::to_string(id.pid) + " on " + id.host + ")";
  });
  if (d.missing.size() > 16) names += " and " + std::to_string(d.missing.size() - 16) + " more";
  d.message = names + " did not reach the timeout within " +
              std::to_string(static_cast<int>(grace_s + 0.5)) + " s of the others: " +
              (d.missing.size() == 1 ? "it is" : "they are") +
              " the unresponsive peer (stopped, dead, or stuck outside communication); reports in " + dir.string();
  return d;
}

}  // namespace tetra::launch
