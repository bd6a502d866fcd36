#include "launch/checkpoint/shard.h"

#include <nlohmann/json.hpp>
#include <ranges>

#include "runtime/hdf5_file.h"
#include "runtime/text_join.h"

namespace tetra::launch {

std::string piece_group(const std::string& name, const TensorBox& box, int64_t begin, int64_t end) {
  std::string g = name;
  if (!box.shape.empty()) {
    g += "{";
    g += join_text(std::views::iota(size_t{0}, box.shape.size()), ",", [&](size_t d) {
      return std::to_string(box.offset[d]) + ":" + std::to_string(box.offset[d] + box.shape[d]);
    });
    g += "}";
  }
  return g + "[" + std::to_string(begin) + ":" + std::to_string(end) + "]";
}

void write_shard(const std::string& path, const ShardHeader& h, const std::vector<StatePiece>& pieces,
                 const std::function<void()>& halfway) {
  Hdf5File file(path, Hdf5File::Mode::Create);
  file.set_attr("format", std::string("tetra-checkpoint-shard"));
  file.set_attr("version", int64_t{2});
  file.set_attr("step", h.step);
  file.set_attr("rank", int64_t{h.rank});
  file.set_attr("world_size", int64_t{h.world_size});
  file.set_attr("dp_rank", int64_t{h.dp_rank});
  file.set_attr("tp_rank", int64_t{h.tp_rank});
  file.set_attr("pp_rank", int64_t{h.pp_rank});
  file.set_attr("zero_stage", int64_t{h.zero_stage});
  const size_t half = pieces.size() / 2;
  for (size_t i = 0; i <= pieces.size(); ++i) {
    if (i == half && halfway) {
      file.flush();  // what was written so far reaches the file, as a crash would leave it
      halfway();
    }
    if (i == pieces.size()) break;
    const StatePiece& p = pieces[i];
    const int64_t n = p.end - p.begin;
    for (const Tensor* t : {&p.master, &p.exp_avg, &p.exp_avg_sq})
      TETRA_CHECK(t->defined() && t->device().is_cpu() && t->dtype() == DType::F32 && t->numel() == n,
                  "write_shard: piece ", p.name, "[", p.begin, ":", p.end, "] needs host fp32 tensors of ", n,
                  " elements, got ", t->defined() ? t->describe() : std::string("undefined"));
    const std::string g = piece_group(p.name, p.box, p.begin, p.end);
    file.write(g + "/master", p.master.view({n}));
    file.write(g + "/exp_avg", p.exp_avg.view({n}));
    file.write(g + "/exp_avg_sq", p.exp_avg_sq.view({n}));
    file.set_attr("name", p.name, g);
    file.set_attr("full_shape", nlohmann::json(p.full_shape).dump(), g);
    file.set_attr("begin", p.begin, g);
    file.set_attr("end", p.end, g);
    if (!p.box.shape.empty()) {
      file.set_attr("box_offset", nlohmann::json(p.box.offset).dump(), g);
      file.set_attr("box_shape", nlohmann::json(p.box.shape).dump(), g);
    }
  }
  file.flush();
}

}  // namespace tetra::launch
