// Config helpers shared by loading, validation and the run: key origins, equality, mesh arithmetic.
#include "launch/config/config.h"

#include <algorithm>
#include <cmath>

#include "launch/config/schema.h"

namespace tetra::launch {

std::string KeyOrigins::where(const std::string& key) const {
  if (overridden.count(key)) return "--set " + key;
  if (auto it = from_folder.find(key); it != from_folder.end()) return it->second;
  std::string f = file.empty() ? "config" : file;
  auto it = line.find(key);
  if (it != line.end() && it->second > 0) return f + ":" + std::to_string(it->second);
  return f;
}

bool Config::operator==(const Config& other) const {
  // Compared key by key through the schema, so a key added there is compared too.
  for (const schema::Field& f : schema::fields())
    if (schema::value_text(f, *this) != schema::value_text(f, other)) return false;
  return true;
}

int data_parallel_size(const ParallelConfig& p, int world_size) {
  if (p.dp > 0) return p.dp;
  int tp_pp = p.tp * p.pp;
  return tp_pp > 0 ? world_size / tp_pp : 0;
}

int pipeline_chunks_per_rank(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::Interleaved1F1B || schedule == PipelineSchedule::DualPipeV ? 2 : 1;
}

int64_t wsd_decay_steps(const OptimizerConfig& o, int64_t steps) {
  if (o.decay_steps > 0) return o.decay_steps;
  const double fraction = o.decay_fraction > 0 ? o.decay_fraction : 0.2;
  return std::max<int64_t>(1, std::llround(fraction * static_cast<double>(steps)));
}

int pipeline_stages(const ParallelConfig& p) {
  return p.pp == 1 ? 1 : p.pp * pipeline_chunks_per_rank(p.schedule);
}

}  // namespace tetra::launch
