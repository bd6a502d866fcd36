#!/usr/bin/env python3
"""The body of scripts/bench/generate_throughput.sh: makes the random Llama-1B-shaped folder (once),
runs `tetra generate` on it and transformers' generate in this process, and prints one JSON line per
implementation and a summary line (see the shell script's header)."""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig

p = argparse.ArgumentParser()
p.add_argument("--tetra", required=True)
p.add_argument("--work", required=True)
p.add_argument("--prompt", type=int, default=128)
p.add_argument("--new", type=int, default=256)
p.add_argument("--json", default="")
a = p.parse_args()
if not torch.cuda.is_available():
    sys.exit("PyTorch sees no GPU")
folder = os.path.join(a.work, "llama-1b-random")
V = 128256
if not os.path.exists(os.path.join(folder, "config.json")):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                      num_key_value_heads=8, intermediate_size=8192, max_position_embeddings=4096,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      bos_token_id=V + 1, eos_token_id=V + 1)  # ids no token has: nothing stops early
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    del model
    torch.cuda.empty_cache()
gen = torch.Generator().manual_seed(1)
prompt = torch.randint(0, V, (1, a.prompt), generator=gen).tolist()[0]
lines = []

# ---- tetra ----------------------------------------------------------------------------------------
r = subprocess.run([a.tetra, "generate", folder, "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens",
                    str(a.new), "--greedy", "--json", "--device", "cuda"], capture_output=True, text=True)
if r.returncode != 0:
    sys.exit(f"tetra generate failed ({r.returncode}): {r.stderr[-2000:]}")
t = json.loads(r.stdout)
tetra_ids = t["ids"][a.prompt:]
lines.append({"impl": "tetra", "prompt_tokens": a.prompt, "new_tokens": t["new_tokens"], "seconds": t["seconds"],
              "tokens_per_s": t["new_tokens"] / t["seconds"]})

# ---- transformers ---------------------------------------------------------------------------------
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).cuda().eval()
ids = torch.tensor([prompt], device="cuda")
kw = dict(do_sample=False, max_new_tokens=a.new, min_new_tokens=a.new, attention_mask=torch.ones_like(ids),
          pad_token_id=0)
with torch.no_grad():
    model.generate(ids, **dict(kw, max_new_tokens=8, min_new_tokens=8))  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = model.generate(ids, **kw)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
hf_ids = out[0, a.prompt:].tolist()
lines.append({"impl": "transformers", "version": transformers.__version__, "torch": torch.__version__,
              "prompt_tokens": a.prompt, "new_tokens": len(hf_ids), "seconds": seconds,
              "tokens_per_s": len(hf_ids) / seconds})
same = next((i for i in range(min(len(hf_ids), len(tetra_ids))) if hf_ids[i] != tetra_ids[i]), None)
summary = {"summary": True, "gpu": torch.cuda.get_device_name(0), "dtype": "bf16", "batch": 1,
           "tetra_over_transformers": lines[0]["tokens_per_s"] / lines[1]["tokens_per_s"],
           "greedy_identical": same is None and len(hf_ids) == len(tetra_ids),
           "first_difference": same}
lines.append(summary)
for line in lines:
    print(json.dumps(line), flush=True)
if a.json:
    with open(a.json, "w") as f:
        json.dump({"lines": lines}, f, indent=1)
