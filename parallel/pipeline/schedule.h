// A pipeline schedule as data (ARCHITECTURE.md §3): per pipeline rank, the ordered list of
// instructions that rank runs in one step — F, B, B-input-only, W, overlapped FB pairs, and the
// batched point-to-point transfers they need. Generators write the lists
// (parallel/pipeline/generators.h), the simulator replays them with costs
// (parallel/pipeline/simulator.h), and the executor runs the same lists on devices.
// Plain values: a Schedule owns its lists; nothing refers to a model or a device.
#pragma once
#include <string>
#include <vector>

namespace tetra {

// Where a stage lives: the pipeline rank and the chunk (model piece) on that rank.
struct StageSlot {
  int rank = 0;
  int chunk = 0;
};

// How a schedule places the model's stages on pipeline ranks. A flow is one path of micro-batches
// through every stage, in stage order; all schedules have one, except DualPipe, which feeds half
// the micro-batches from each end (flow 0 enters at rank 0, flow 1 at the last rank) through two
// copies of the stages. Chunk c of rank r holds the layers of model stage stage_of(r, c).
class PipelineLayout {
 public:
  // The layout of a schedule by name (parallel/pipeline/generators.h lists them) on pp ranks.
  // pp = 1 is the trivial layout: one chunk holding the whole model, whatever the schedule.
  static PipelineLayout for_schedule(const std::string& schedule, int pp, int micro_batches);

  int ranks() const { return ranks_; }
  int chunks() const { return chunks_; }  // chunks per rank
  int stages() const { return stages_; }  // pieces the model is cut into
  int flows() const { return static_cast<int>(flows_.size()); }
  int micro_batches() const { return micro_batches_; }  // per step, over all flows
  int flow_micro_batches() const { return micro_batches_ / flows(); }
  // The flow the micro-batches of a chunk belong to (DualPipe: the chunk is the direction).
  int flow_of_chunk(int chunk) const { return flows() == 1 ? 0 : chunk; }
  // The model stage whose layers chunk `chunk` of rank `rank` holds.
  int stage_of(int rank, int chunk) const { return stage_of_[static_cast<size_t>(rank)][static_cast<size_t>(chunk)]; }
  // Where stage `stage` of flow `flow` runs.
  StageSlot slot(int flow, int stage) const { return flows_[static_cast<size_t>(flow)][static_cast<size_t>(stage)]; }
  // The step's micro-batch number (0 … micro_batches − 1) of micro-batch `mb` of a flow.
  int global_micro_batch(int flow, int mb) const { return flow * flow_micro_batches() + mb; }

 private:
  int ranks_ = 1, chunks_ = 1, stages_ = 1, micro_batches_ = 1;
  std::vector<std::vector<StageSlot>> flows_;  // [flow][stage]
  std::vector<std::vector<int>> stage_of_;     // [rank][chunk]
};

// A micro-batch of a chunk: c and m of the op syntax F<c>.<m> (m counts within the chunk's flow).
struct ChunkMb {
  int chunk = 0;
  int mb = 0;
  bool operator==(const ChunkMb&) const = default;
};

enum class OpType {
  F,       // forward of f
  B,       // full backward of b (input and weight gradients)
  BInput,  // backward of b for the input gradient only; its weight gradient is a later W
  W,       // weight gradient of b, after its BInput
  FB,      // forward of f overlapped with the full backward of b (two micro-batches in flight)
  P2P,     // a batch of sends and receives, posted together and waited for together
};

// What a transfer carries: a stage's output activation (to the next stage) or its input gradient
// (to the previous one). A message is named by the stage that produces it.
enum class Payload { Activation, Gradient };

struct P2POp {
  bool send = false;
  int peer = 0;  // pipeline rank
  Payload payload = Payload::Activation;
  int flow = 0;
  int stage = 0;  // the producing stage
  int mb = 0;     // micro-batch within the flow
  bool operator==(const P2POp&) const = default;
};

struct Instruction {
  OpType type = OpType::F;
  ChunkMb f;                // F, FB: the forward
  ChunkMb b;                // B, BInput, W, FB: the backward
  std::vector<P2POp> p2p;   // P2P: the batch

  static Instruction forward(int chunk, int mb) { return {OpType::F, {chunk, mb}, {}, {}}; }
  static Instruction backward(int chunk, int mb) { return {OpType::B, {}, {chunk, mb}, {}}; }
  static Instruction backward_input(int chunk, int mb) { return {OpType::BInput, {}, {chunk, mb}, {}}; }
  static Instruction weight(int chunk, int mb) { return {OpType::W, {}, {chunk, mb}, {}}; }
  static Instruction forward_backward(ChunkMb f, ChunkMb b) { return {OpType::FB, f, b, {}}; }
  bool is_compute() const { return type != OpType::P2P; }
  bool has_forward() const { return type == OpType::F || type == OpType::FB; }
  // B, BInput or the backward half of FB: the instruction that sends the input gradient on.
  bool has_backward() const { return type == OpType::B || type == OpType::BInput || type == OpType::FB; }
  bool operator==(const Instruction&) const = default;
};

// The op syntax of `tetra plan --print-schedule`: F0.3, B1.2, B1.2w (input
// gradient only), W1.2, FB(F0.3,B1.2); a P2P batch prints as P2P[send act s2.m3>1, recv grad s4.m1<1].
std::string to_string(const Instruction& op);
// The inverse for compute instructions; throws a Usage error naming the text otherwise.
Instruction parse_instruction(const std::string& text);

struct Schedule {
  std::string name;
  PipelineLayout layout;
  bool forward_only = false;  // evaluation: forwards only, nothing kept for a backward
  std::vector<std::vector<Instruction>> ranks;  // [pipeline rank] → instructions in order

  // The compute instructions of a rank in op syntax (P2P batches left out).
  std::vector<std::string> compute_ops(int rank) const;
};

// Inserts the point-to-point batches: before each compute instruction, one batch with the sends
// of the previous compute instruction and the receives this one needs (stages on other ranks;
// stages on the same rank hand over without a transfer); the last sends in a batch at the end.
// Within a batch, sends come before receives, each in (payload, flow, stage, micro-batch) order,
// so both ends of a rank pair post their operations in the same order.
void add_p2p(Schedule& schedule);

// Problems of a schedule's content, one line each (empty when sound): every micro-batch of every
// chunk forwarded once and backwarded once (B, or BInput and then W), each W after its BInput, FB
// pairs whose halves are valid; with P2P batches, every transfer posted at both ends, before its
// consumer and after its producer, and, between two ranks, the transfers of one payload posted
// in the same order at both ends (a channel per direction and payload delivers in order: NCCL
// and MPI match a pair's messages in the order they were posted). Order between ranks is the
// simulator's business (deadlocks).
std::vector<std::string> check_schedule(const Schedule& schedule);

// Peak number of (chunk, micro-batch) activations a rank's list holds at once: one is held from
// the start of its forward to the end of its full backward or of its W (forward_only: to the end
// of its forward). It depends on the order of the list only, not on timing.
int peak_activations(const std::vector<Instruction>& ops, bool forward_only = false);
// The same weighted: each activation counts the bytes of its stage (stage_bytes[stage]).
double peak_activation_bytes(const Schedule& schedule, int rank, const std::vector<double>& stage_bytes);

}  // namespace tetra
