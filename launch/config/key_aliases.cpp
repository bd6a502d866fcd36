// The names other trainers (Megatron-LM, torchtitan, nanoGPT/llm.c, DeepSpeed) use for tetra's config
// keys, for the "did you mean" of an unknown key (launch/config/schema.h: known_alias).
#include <string>
#include <utility>
#include <vector>

#include "launch/config/schema.h"

namespace tetra::launch::schema {

std::string known_alias(const std::string& name) {
  // Names that other trainers (Megatron-LM, torchtitan, nanoGPT/llm.c, DeepSpeed) use for our keys.
  static const std::vector<std::pair<std::vector<const char*>, const char*>> aliases = {
      {{"batch_size", "train_batch_size"}, "train.global_batch (sequences per step) or train.micro_batch"},
      {{"global_batch_size"}, "train.global_batch"},
      {{"micro_batch_size", "local_batch_size", "train_micro_batch_size_per_gpu"}, "train.micro_batch"},
      {{"train_iters", "max_steps", "max_iters", "num_steps", "training_steps", "total_steps"}, "train.steps"},
      {{"seq_length", "max_seq_len", "max_position_embeddings", "block_size", "n_positions", "n_ctx",
        "context_length"}, "model.seq_len (and train.seq_len)"},
      {{"hidden_size", "n_embd", "dim", "d_embd", "embed_dim"}, "model.d_model"},
      {{"num_layers", "n_layer", "num_hidden_layers"}, "model.n_layers"},
      {{"num_attention_heads", "n_head", "num_heads"}, "model.n_heads"},
      {{"padded_vocab_size", "n_vocab"}, "model.vocab_size"},
      {{"layernorm_epsilon", "layer_norm_epsilon"}, "model.ln_eps"},
      {{"rms_norm_eps"}, "model.norm_eps"},
      {{"num_key_value_heads", "num_query_groups", "n_kv_head", "kv_heads"}, "model.n_kv_heads"},
      {{"intermediate_size", "ffn_hidden_size", "hidden_dim", "ffn_size"}, "model.ffn_dim"},
      {{"rope_base", "rotary_base", "rotary_emb_base"}, "model.rope_theta"},
      {{"rope_parameters", "rope_type", "rotary_scaling"}, "model.rope_scaling (its type: none, linear, llama3)"},
      {{"tie_word_embeddings", "untie_embeddings_and_output_weights", "weight_tying"}, "model.tie_embeddings"},
      {{"num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"}, "model.moe.n_experts"},
      {{"num_experts_per_tok", "moe_router_topk", "moe_top_k", "top_k"}, "model.moe.top_k"},
      {{"n_shared_experts", "num_shared_experts", "moe_shared_expert_count"}, "model.moe.n_shared"},
      {{"moe_intermediate_size", "moe_ffn_hidden_size", "moe_inter_dim"}, "model.moe.ffn_dim"},
      {{"first_k_dense_replace", "n_dense_layers"}, "model.moe.first_k_dense"},
      {{"routed_scaling_factor", "route_scale", "moe_router_topk_scaling_factor"}, "model.moe.route_scale"},
      {{"moe_router_num_groups", "n_expert_groups"}, "model.moe.n_group"},
      {{"moe_router_group_topk", "n_limited_groups"}, "model.moe.topk_group"},
      {{"moe_router_bias_update_rate", "bias_update_speed"}, "model.moe.bias_update_rate"},
      {{"moe_aux_loss_coeff", "aux_loss_alpha", "load_balance_coeff", "router_aux_loss_coef"}, "model.moe.aux_loss_coef"},
      {{"force_load_balancing", "moe_router_force_load_balancing"}, "model.moe.force_balance"},
      {{"moe_a2a_overlap", "overlap_moe_expert_parallel_comm", "moe_comm_overlap"}, "parallel.moe_overlap"},
      {{"tensor_model_parallel_size", "tensor_parallel_degree"}, "parallel.tp"},
      {{"pipeline_model_parallel_size", "pipeline_parallel_degree"}, "parallel.pp"},
      {{"expert_model_parallel_size", "expert_parallel_degree"}, "parallel.ep"},
      {{"data_parallel_size", "data_parallel_shard_degree", "data_parallel_replicate_degree"}, "parallel.dp"},
      {{"zero", "zero_optimization", "stage"}, "parallel.zero_stage"},
      {{"pipeline_parallel_schedule", "pipeline_schedule"}, "parallel.schedule"},
      {{"num_microbatches", "n_microbatches"}, "parallel.micro_batches"},
      {{"learning_rate", "max_lr"}, "optimizer.lr"},
      {{"lr_min", "min_learning_rate", "final_lr"}, "optimizer.min_lr"},
      {{"warmup", "warmup_iters", "lr_warmup_iters", "lr_warmup_steps"}, "optimizer.warmup_steps"},
      {{"lr_decay_style", "lr_scheduler", "decay_type"}, "optimizer.schedule"},
      {{"adam_beta1", "adam_beta2", "beta1", "beta2"}, "optimizer.betas"},
      {{"adam_eps"}, "optimizer.eps"},
      {{"clip_grad", "max_norm", "max_grad_norm", "gradient_clipping"}, "train.grad_clip"},
      {{"activation_checkpoint", "activation_checkpointing", "recompute_granularity", "ac"}, "train.recompute"},
      {{"mixed_precision", "dtype", "mixed_precision_param", "bf16", "fp16"}, "train.precision"},
      {{"fp32_residual_connection", "residual_in_fp32"}, "train.residual_dtype"},
      {{"eval_interval", "eval_iters"}, "train.eval_every / train.eval_batches"},
      {{"save_interval", "interval", "checkpoint_interval"}, "checkpoint.every"},
      {{"keep_latest_k"}, "checkpoint.keep"},
      {{"load", "resume_from"}, "checkpoint.resume"},
      {{"log_interval", "log_freq"}, "log.every"},
      {{"dataset_path", "data_path", "train_data"}, "data.train"},
      {{"num_workers"}, "data.loader_threads"},
  };
  for (const auto& [names, target] : aliases)
    for (const char* n : names)
      if (name == n) return target;
  return "";
}

}  // namespace tetra::launch::schema
