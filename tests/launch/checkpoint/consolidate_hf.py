#!/usr/bin/env python3
"""Consolidated checkpoints and Hugging Face folders, both ways, for one model family: a ZeRO-1
run on 2 ranks is consolidated into an HDF5 file, an fp32 and a bf16 Hugging Face folder; each
holds Hugging Face's names and layouts (read here by an independent safetensors reader), the
checkpoint's master weights exactly (bf16: rounded to nearest even), and config.json the model's
config; model.init_from reads each back to the very same weights (a one-step run at a learning
rate too small to change an fp32 weight saves them again). A folder whose config or files do not
fit the model is refused with a message that names what differs.

usage: consolidate_hf.py TETRA_BIN WORK_DIR ARCH [--set overrides for the model...]"""
import json
import os
import shutil
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
from tetra_runs import Workspace, check, state_of  # noqa: E402
from safetensors_reference import bf16_bits, bf16_values, load, save  # noqa: E402

tetra, work, arch = sys.argv[1], sys.argv[2], sys.argv[3]
model_sets = sys.argv[4:]
ws = Workspace(tetra, work, steps=4, every=4)
sets = ["parallel.zero_stage=1"] + model_sets
ws.train("src", 2, sets)
step = os.path.join(ws.run_dir("src"), "checkpoints", "step_4")
meta, state = state_of(step)
shapes = {p["name"]: p["shape"] for p in meta["params"]}

# ---- the expected stored tensors, from the checkpoint's fused master weights ----------------------
GPT2_TRANSPOSED = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def expected_tensors(config):
    out = {}
    for name, shape in shapes.items():
        w = state[name]["master"].reshape(shape)
        if arch == "gpt2":
            out[name] = w.T if name.endswith(GPT2_TRANSPOSED) else w
        elif ".self_attn.qkv_proj." in name:  # the weight, and qwen2's bias
            H, Hkv = config["num_attention_heads"], config["num_key_value_heads"]
            D = config.get("head_dim") or config["hidden_size"] // H
            base, kind = name.split("qkv_proj.")
            out[base + "q_proj." + kind] = w[: H * D]
            out[base + "k_proj." + kind] = w[H * D: (H + Hkv) * D]
            out[base + "v_proj." + kind] = w[(H + Hkv) * D:]
            check(w.shape[0] == (H + 2 * Hkv) * D, f"{name}: (H + 2·Hkv)·D rows")
        elif name.endswith(".mlp.gate_up_proj.weight"):
            F = config["intermediate_size"]
            base = name[: -len("gate_up_proj.weight")]
            out[base + "gate_proj.weight"] = w[:F]
            out[base + "up_proj.weight"] = w[F:]
            check(w.shape[0] == 2 * F, f"{name}: 2·F rows")
        else:
            out[name] = w
    return out


def consolidate(out, *args):
    stdout, _, _ = ws.tetra_cmd("ckpt", "consolidate", step, "--out", out, *args)
    check(stdout.startswith("wrote " + out), f"consolidate {' '.join(args)} says what it wrote")


# ---- HF folder, fp32 ---------------------------------------------------------------------------
hf32 = os.path.join(ws.work, "hf32")
shutil.rmtree(hf32, ignore_errors=True)
consolidate(hf32, "--format", "hf")
with open(os.path.join(hf32, "config.json")) as f:
    config = json.load(f)
check(config["torch_dtype"] == "float32", "config.json: torch_dtype float32")
if arch == "gpt2":
    check(config["architectures"] == ["GPT2LMHeadModel"] and config["model_type"] == "gpt2",
          "config.json: GPT2LMHeadModel, model_type gpt2")
    check((config["n_layer"], config["n_embd"], config["n_head"], config["vocab_size"], config["n_positions"]) ==
          (2, 32, 2, 256, 32), "config.json: GPT-2's fields hold the model's shape")
else:
    cls = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
           "mistral": "MistralForCausalLM"}[arch]
    check(config["architectures"] == [cls] and config["model_type"] == arch, f"config.json: {cls}, model_type {arch}")
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "vocab_size", "rope_theta", "rms_norm_eps", "tie_word_embeddings",
                "max_position_embeddings", "hidden_act"):
        check(key in config, f"config.json has {key}")
    check(config["hidden_act"] == "silu", "config.json: SwiGLU (silu)")
    if arch == "llama":
        check(config["attention_bias"] is False and config["mlp_bias"] is False, "config.json: no biases")
    if arch == "qwen2":
        check(config["use_sliding_window"] is False, "config.json: no sliding window")
        check(any(n.endswith("self_attn.qkv_proj.bias") for n in shapes), "qwen2 has q/k/v biases")
    if arch == "qwen3":
        check(config["attention_bias"] is False and config["head_dim"] == 24, "config.json: no biases, head_dim 24")
        check(any(n.endswith("self_attn.q_norm.weight") for n in shapes), "qwen3 has q/k norms")
    if arch == "mistral":
        check("sliding_window" in config, "config.json: Mistral's sliding_window")
want = expected_tensors(config)
got, dtypes, st_meta = load(os.path.join(hf32, "model.safetensors"))
check(st_meta.get("format") == "pt", "model.safetensors: metadata format pt (transformers requires it)")
check(sorted(got) == sorted(want), f"model.safetensors holds exactly Hugging Face's tensor names ({len(want)})")
if arch != "gpt2":
    check(("lm_head.weight" in got) != bool(config["tie_word_embeddings"]),
          "lm_head.weight is there exactly when the embedding is untied")
for name, w in want.items():
    if got[name].shape != w.shape or got[name].tobytes() != np.ascontiguousarray(w).tobytes():
        check(False, f"{name} equals the checkpoint's master weights")
check(all(d == "F32" for d in dtypes.values()), "every tensor of the fp32 folder equals the master weights, in F32")

# ---- HF folder, bf16 -----------------------------------------------------------------------------
hf16 = os.path.join(ws.work, "hf16")
shutil.rmtree(hf16, ignore_errors=True)
consolidate(hf16, "--format", "hf", "--dtype", "bf16")
got16, dtypes16, _ = load(os.path.join(hf16, "model.safetensors"))
check(all(d == "BF16" for d in dtypes16.values()) and sorted(got16) == sorted(want), "bf16 folder: the same names, BF16")
for name, w in want.items():
    if not np.array_equal(got16[name], bf16_values(bf16_bits(w)).reshape(w.shape)):
        check(False, f"{name}: bf16 rounding to nearest even of the master weights")
with open(os.path.join(hf16, "config.json")) as f:
    check(json.load(f)["torch_dtype"] == "bfloat16", "config.json: torch_dtype bfloat16")

# ---- HDF5 consolidated: the same names and values ------------------------------------------------
h5 = os.path.join(ws.work, "full.h5")
consolidate(h5)
import h5py  # noqa: E402
with h5py.File(h5, "r") as f:
    check(sorted(f.keys()) == sorted(want), "the HDF5 file holds the same tensor names")
    check(all(f[n][()].tobytes() == np.ascontiguousarray(w).tobytes() for n, w in want.items()),
          "the HDF5 file holds the same values")
    attr_arch = f.attrs["arch"]
    check((attr_arch.decode() if isinstance(attr_arch, bytes) else attr_arch) == arch, "HDF5 attribute arch")

# ---- model.init_from: each of them loads back to the same weights --------------------------------
noop = ["optimizer.lr=1e-30", "optimizer.min_lr=0", "optimizer.warmup_steps=0", "optimizer.weight_decay=0",
        "train.steps=1", "checkpoint.every=1"]


def init_state(name, source):
    ws.train(name, 1, sets + [f"model.init_from={source}"] + noop)
    return state_of(os.path.join(ws.run_dir(name), "checkpoints", "step_1"))[1]


for label, source in (("hf32", hf32), ("h5", h5)):
    s = init_state("init_" + label, source)
    check(all(s[n]["master"].tobytes() == state[n]["master"].tobytes() for n in state),
          f"model.init_from {label} loads the weights bit for bit")
# A folder of two shards and their index, as Hugging Face writes large models (written here).
sharded = os.path.join(ws.work, "sharded")
shutil.rmtree(sharded, ignore_errors=True)
os.makedirs(sharded)
shutil.copy(os.path.join(hf32, "config.json"), sharded)
names = sorted(want)
files = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
weight_map = {}
for file, part in files.items():
    save(os.path.join(sharded, file), {n: got[n] for n in part}, {"format": "pt"})
    weight_map.update({n: file for n in part})
with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": sum(v.nbytes for v in got.values())}, "weight_map": weight_map}, f)
s = init_state("init_sharded", sharded)
check(all(s[n]["master"].tobytes() == state[n]["master"].tobytes() for n in state),
      "model.init_from a sharded folder (index + 2 shards) loads the weights bit for bit")
s = init_state("init_hf16", hf16)
check(all(np.array_equal(s[n]["master"], bf16_values(bf16_bits(state[n]["master"]))) for n in state),
      "model.init_from the bf16 folder loads the bf16-rounded weights")

# ---- what init_from refuses ----------------------------------------------------------------------
layers_key = "n_layer" if arch == "gpt2" else "num_hidden_layers"
# The folder's config.json gives the shape: a YAML key that differs stops the run before any work.
_, err, _ = ws.train("wrong_layers", 1, sets + [f"model.init_from={hf32}", "model.n_layers=4"], expect=2)
check(f"model.n_layers: 4 here, but {hf32}/config.json gives 2 ({layers_key})" in err,
      "a folder of another depth: exit 2, names the key, the field and both values")
other = "llama" if arch == "gpt2" else "gpt2"
bad = os.path.join(ws.work, "bad")
shutil.rmtree(bad, ignore_errors=True)
shutil.copytree(hf32, bad)
with open(os.path.join(bad, "config.json")) as f:
    c = json.load(f)
c["model_type"] = other
with open(os.path.join(bad, "config.json"), "w") as f:
    json.dump(c, f)
_, err, _ = ws.train("wrong_family", 1, sets + [f"model.init_from={bad}", f"model.arch={arch}"], expect=2)
check(f"model.arch: {arch} here, but {bad}/config.json gives {other} (model_type)" in err,
      "a folder of another family: exit 2, says so")
c["model_type"] = arch
with open(os.path.join(bad, "config.json"), "w") as f:
    json.dump(c, f)
with open(os.path.join(bad, "model.safetensors"), "r+b") as f:
    f.truncate(os.path.getsize(os.path.join(bad, "model.safetensors")) - 4)
_, err, _ = ws.train("truncated", 1, sets + [f"model.init_from={bad}"], expect=1)
check("not a valid safetensors file" in err, "a truncated model.safetensors: exit 1, says the file is not valid")
os.remove(os.path.join(bad, "config.json"))
_, err, _ = ws.train("no_config", 1, sets + [f"model.init_from={bad}"], expect=2)
check("model.init_from: " in err and "not a Hugging Face model folder" in err,
      "a folder without config.json: exit 2, says so")
print("PASS")
