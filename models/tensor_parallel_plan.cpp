#include "models/tensor_parallel_plan.h"

#include <map>

#include "parallel/param_placement.h"

namespace tetra {

const char* tp_style_name(TpStyle s) {
  switch (s) {
    case TpStyle::Replicated: return "replicated";
    case TpStyle::ColumnParallel: return "column-parallel";
    case TpStyle::RowParallel: return "row-parallel";
    case TpStyle::VocabParallelEmbedding: return "vocab-parallel embedding";
    case TpStyle::VocabParallelOutput: return "vocab-parallel output";
    case TpStyle::SequenceParallel: return "sequence-parallel";
    case TpStyle::PerHead: return "per-head";
  }
  return "?";
}

const char* tp_layout_name(TpLayout l) {
  switch (l) {
    case TpLayout::Replicated: return "replicated";
    case TpLayout::SequenceShard: return "sequence-sharded";
    case TpLayout::VocabShard: return "vocab-sharded";
  }
  return "?";
}

int TpParamPlan::split_dim() const {
  switch (style) {
    case TpStyle::ColumnParallel:
    case TpStyle::VocabParallelEmbedding:
    case TpStyle::VocabParallelOutput: return 0;
    case TpStyle::RowParallel: return 1;
    case TpStyle::Replicated:
    case TpStyle::SequenceParallel:
    case TpStyle::PerHead: return -1;
  }
  return -1;
}

const TpParamPlan* TensorParallelPlan::find(const std::string& param) const {
  for (const TpParamPlan& p : params)
    if (p.param == param) return &p;
  return nullptr;
}

std::vector<std::string> tensor_parallel_plan_problems(const TensorParallelPlan& plan, Model& model, int tp) {
  std::vector<std::string> out;
  std::map<std::string, int> entries;
  for (const TpParamPlan& p : plan.params) ++entries[p.param];
  for (Param* p : model.params()) {
    auto it = entries.find(p->name);
    if (it == entries.end()) {
      out.push_back(p->name + ": no entry in the plan");
      continue;
    }
    if (it->second > 1) out.push_back(p->name + ": " + std::to_string(it->second) + " entries in the plan");
    entries.erase(it);
    if (!p->parts.empty()) {
      int64_t next = 0;
      for (const ParamPart& part : p->parts) {
        if (part.row_begin != next) out.push_back(p->name + ": its parts do not cover its rows in order");
        next = part.row_begin + part.rows;
      }
      if (next != p->full_shape[0]) out.push_back(p->name + ": its parts cover " + std::to_string(next) + " of " +
                                                  std::to_string(p->full_shape[0]) + " rows");
    }
    const TpParamPlan& e = *plan.find(p->name);
    const int dim = e.split_dim();
    if (dim < 0) continue;
    if (dim >= static_cast<int>(p->full_shape.size())) {
      out.push_back(p->name + ": " + tp_style_name(e.style) + " splits dim " + std::to_string(dim) + " of a " +
                    std::to_string(p->full_shape.size()) + "-d tensor");
      continue;
    }
    if (!p->parts.empty() && dim == 0) {
      for (size_t i = 0; i < p->parts.size(); ++i) {
        const ParamPart& part = p->parts[i];
        const int64_t unit = part.unit_rows > 0 ? part.unit_rows : 1;
        if (part.rows % unit != 0 || part_replicas_for(part.rows / unit, tp, e.replicate_parts) == 0)
          out.push_back(p->name + ": part " + std::to_string(i) + " (" + (part.name.empty() ? "unnamed" : part.name) +
                        ") has " + std::to_string(part.rows) + " rows in units of " + std::to_string(unit) +
                        ", which do not split over tp = " + std::to_string(tp) +
                        (e.replicate_parts ? " (nor is tp a multiple of its units)" : ""));
      }
    } else if (p->full_shape[static_cast<size_t>(dim)] % tp != 0) {
      out.push_back(p->name + ": dim " + std::to_string(dim) + " of " + shape_str(p->full_shape) +
                    " is not divisible by tp = " + std::to_string(tp));
    }
  }
  for (const auto& [name, n] : entries) out.push_back(name + ": in the plan but not a parameter of the model");
  std::vector<Layer*> layers = model.layers();
  if (plan.layers.size() != layers.size()) {
    out.push_back("the plan has " + std::to_string(plan.layers.size()) + " layers, the model " +
                  std::to_string(layers.size()));
  } else {
    for (size_t i = 0; i < layers.size(); ++i)
      if (plan.layers[i].layer != layers[i]->name())
        out.push_back("layer " + std::to_string(i) + " is " + layers[i]->name() + ", the plan says " +
                      plan.layers[i].layer);
  }
  return out;
}

void apply_tensor_parallel_plan(const TensorParallelPlan& plan, Model& model, int tp, int rank,
                                bool sequence_parallel) {
  if (tp <= 1) return;
  const std::vector<std::string> problems = tensor_parallel_plan_problems(plan, model, tp);
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += "\n  " + p;
    TETRA_FAIL(Config, "parallel.tp: the ", model.arch(), " model does not split over tp = ", tp, ":", all);
  }
  for (Param* p : model.params()) {
    const TpParamPlan& e = *plan.find(p->name);
    switch (e.style) {
      case TpStyle::ColumnParallel:
      case TpStyle::RowParallel:
      case TpStyle::VocabParallelEmbedding:
      case TpStyle::VocabParallelOutput: shard_over_tp(*p, e.split_dim(), tp, rank, e.replicate_parts); break;
      case TpStyle::Replicated: replicate_over_tp(*p, tp, rank, /*grad_over_tp=*/false); break;
      case TpStyle::SequenceParallel: replicate_over_tp(*p, tp, rank, /*grad_over_tp=*/sequence_parallel); break;
      case TpStyle::PerHead: replicate_over_tp(*p, tp, rank, /*grad_over_tp=*/true); break;
    }
  }
}

TpTraffic tensor_parallel_traffic(const TensorParallelPlan& plan, Model& model, int64_t tokens, int tp,
                                  bool sequence_parallel, int64_t value_bytes, int64_t grad_bytes,
                                  bool recompute_forward) {
  TpTraffic t;
  if (tp <= 1) return t;
  const double share = static_cast<double>(tp - 1) / tp;  // of a whole tensor, sent by each rank
  const double N = static_cast<double>(tokens), b = static_cast<double>(value_bytes);
  const int fwd = recompute_forward ? 2 : 1;
  auto gather = [&](double width, int times) {
    t.all_gathers += times;
    t.all_gather_bytes += times * share * N * width * b;
  };
  auto scatter = [&](double width, int times) {
    t.reduce_scatters += times;
    t.reduce_scatter_bytes += times * share * N * width * b;
  };
  auto reduce = [&](double width, int times) {
    t.all_reduces += times;
    t.all_reduce_bytes += times * 2.0 * share * N * width * b;
  };
  double vocab_width = 0;  // the embedding's C (the output layer's input)
  for (Param* p : model.params()) {
    const TpParamPlan* e = plan.find(p->name);
    if (!e) continue;
    if ((e->style == TpStyle::SequenceParallel && sequence_parallel) || e->style == TpStyle::PerHead)
      t.step_all_reduce_bytes += 2.0 * share * static_cast<double>(shape_numel(p->full_shape)) * grad_bytes;
    if (e->replicate_parts && !p->parts.empty()) {
      // A part of u < tp units: each rank's block of rows/u summed over the tp/u ranks holding it.
      const int64_t row_elems = shape_numel(p->full_shape) / std::max<int64_t>(1, p->full_shape[0]);
      for (const ParamPart& part : p->parts) {
        const int64_t units = part.rows / std::max<int64_t>(1, part.unit_rows);
        const int r = part_replicas_for(units, tp, true);
        if (r > 1)
          t.step_all_reduce_bytes += 2.0 * (r - 1.0) / r * static_cast<double>(part.rows / units * row_elems) *
                                     static_cast<double>(grad_bytes);
      }
    }
    if (p->full_shape.size() != 2) continue;  // biases travel with their weights
    const double out = static_cast<double>(p->full_shape[0]), in = static_cast<double>(p->full_shape[1]);
    switch (e->style) {
      case TpStyle::ColumnParallel:  // input gathered (forward), input gradient reduced (backward)
        if (sequence_parallel) {
          gather(in, fwd);
          scatter(in, 1);
        } else {
          reduce(in, 1);
        }
        break;
      case TpStyle::RowParallel:  // output reduced (forward), output gradient gathered (backward)
        if (sequence_parallel) {
          scatter(out, fwd);
          gather(out, 1);
        } else {
          reduce(out, fwd);
        }
        break;
      case TpStyle::VocabParallelEmbedding:  // the partial lookups summed; the gradient gathered
        vocab_width = in;
        if (sequence_parallel) {
          scatter(in, 1);
          gather(in, 1);
        } else {
          reduce(in, 1);
        }
        break;
      case TpStyle::VocabParallelOutput: vocab_width = in; break;
      case TpStyle::Replicated:
      case TpStyle::SequenceParallel:
      case TpStyle::PerHead: break;
    }
  }
  // The output layer (its weight may be the embedding's): input gathered, input gradient reduced,
  // and the loss statistics (3 fp32 per token) of every rank gathered.
  for (const TpLayerPlan& l : plan.layers) {
    if (l.output != TpLayout::VocabShard) continue;
    if (sequence_parallel) {
      gather(vocab_width, 1);
      scatter(vocab_width, 1);
    } else {
      reduce(vocab_width, 1);
    }
    t.all_gathers += 1;
    t.all_gather_bytes += (tp - 1) * 3.0 * 4.0 * N;
  }
  return t;
}

}  // namespace tetra
