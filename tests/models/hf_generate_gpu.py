#!/usr/bin/env python3
"""Generation and export against transformers itself (the GPU machine's Python: torch, transformers,
tokenizers; no download). Random GPT-2 and Llama (grouped-query attention) folders are made with
save_pretrained; then
  - greedy: `tetra generate FOLDER --prompt-ids ... --max-new-tokens 12` equals transformers'
    generate(do_sample=False) token for token: tetra on the CPU (fp32) against transformers fp32 on
    the CPU, and tetra on the GPU (bf16) against transformers bf16 on the GPU (a difference is
    reported with transformers' own top-2 logit margin at that position);
  - export: a short run from the folder (model.init_from; the folder also holds a tokenizer made with
    the tokenizers library), `tetra ckpt consolidate --format hf` (and once with a small
    --max-shard-size), then AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained read
    the export: the tokenizer encodes as the source's, and the loaded model's greedy continuation is
    tetra's from the same folder.
Skips (77) without a GPU or without the Python modules.

usage: hf_generate_gpu.py TETRA_BIN WORK_DIR"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # tests/: shared helpers
from script_util import SKIP, require_modules  # noqa: E402

require_modules("torch", "transformers", "tokenizers", "numpy", "h5py")
import torch  # noqa: E402

if not torch.cuda.is_available():
    print("skipped: no GPU visible to torch", flush=True)
    sys.exit(SKIP)
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, LlamaConfig  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders  # noqa: E402

from tetra_runs import Workspace, check, LICENCE_TEXTS  # noqa: E402

tetra, work = sys.argv[1], os.path.abspath(sys.argv[2])
os.makedirs(work, exist_ok=True)
ws = Workspace(tetra, work, steps=2, every=2)  # a 256-token byte dataset, 32-token windows
PROMPT = [1, 5, 9, 13, 17]
NEW = 12
print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)


def make_tokenizer(folder):
    """A byte-level BPE over the licence texts with 256 entries (the model's vocabulary), saved as
    transformers saves a fast tokenizer (tokenizer.json, tokenizer_config.json, special_tokens_map.json)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(LICENCE_TEXTS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    return fast


def make_folder(arch):
    torch.manual_seed(0)
    if arch == "gpt2":
        cfg = GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=2, n_head=2, initializer_range=0.2,
                         bos_token_id=255, eos_token_id=255)
        sets = []
    else:
        cfg = LlamaConfig(vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=64, max_position_embeddings=32,
                          rms_norm_eps=1e-5, initializer_range=0.2, tie_word_embeddings=False,
                          bos_token_id=255, eos_token_id=255)
        sets = ["model.arch=llama", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=64"]
    model = AutoModelForCausalLM.from_config(cfg).float()
    folder = os.path.join(work, arch + "_src")
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder)
    return folder, model, sets


def hf_greedy(model, device, dtype):
    m = model.to(device=device, dtype=dtype).eval()
    ids = torch.tensor([PROMPT], device=device)
    with torch.no_grad():
        out = m.generate(ids, do_sample=False, max_new_tokens=NEW, attention_mask=torch.ones_like(ids),
                         pad_token_id=0)
    return out[0].tolist()


def margin_at(model, ids, pos):
    """transformers' fp32 top-2 logit gap at the position that chose ids[pos]."""
    m = model.to(device="cpu", dtype=torch.float32)
    with torch.no_grad():
        logits = m(torch.tensor([ids[:pos]])).logits[0, -1]
    top = logits.topk(2).values
    return float(top[0] - top[1])


def tetra_greedy(folder, device):
    r = subprocess.run([tetra, "generate", folder, "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens",
                        str(NEW), "--greedy", "--json", "--device", device], env=ws.env, capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        check(False, f"tetra generate {folder} --device {device} exited {r.returncode}")
    return json.loads(r.stdout)["ids"]


def same_or_report(got, want, model, what):
    if got == want:
        check(True, what)
        return
    pos = next(i for i in range(min(len(got), len(want))) if got[i] != want[i]) if got[:len(want)] != want else 0
    check(False, f"{what}: tetra {got} vs transformers {want}; first difference at {pos}, transformers' fp32 "
                 f"top-2 margin there {margin_at(model, want, pos):.4g}")


for arch in ("gpt2", "llama"):
    folder, model, sets = make_folder(arch)
    fast = make_tokenizer(folder)
    same_or_report(tetra_greedy(folder, "cpu"), hf_greedy(model, "cpu", torch.float32), model,
                   f"{arch}: tetra CPU fp32 greedy = transformers fp32 generate(do_sample=False), {NEW} tokens")
    same_or_report(tetra_greedy(folder, "cuda"), hf_greedy(model, "cuda", torch.bfloat16), model,
                   f"{arch}: tetra GPU bf16 greedy = transformers bf16 generate(do_sample=False), {NEW} tokens")

    # ---- export: a run from the folder, consolidated, read by transformers -------------------------
    ws.train(arch + "_run", 1, sets + [f"model.init_from={folder}", "train.device=cpu"])
    step = os.path.join(ws.run_dir(arch + "_run"), "checkpoints", "step_2")
    for label, extra in (("single", []), ("sharded", ["--max-shard-size", "40KB"])):
        out = os.path.join(work, f"{arch}_export_{label}")
        shutil.rmtree(out, ignore_errors=True)
        ws.tetra_cmd("ckpt", "consolidate", step, "--out", out, "--format", "hf", *extra)
        names = os.listdir(out)
        check(("model.safetensors.index.json" in names) == (label == "sharded"), f"{arch} {label}: the shard index")
        loaded = AutoModelForCausalLM.from_pretrained(out)
        tok = AutoTokenizer.from_pretrained(out)
        text = "the licence"
        check(tok(text)["input_ids"] == fast(text)["input_ids"], f"{arch} {label}: AutoTokenizer reads the export")
        same_or_report(tetra_greedy(out, "cpu"), hf_greedy(loaded, "cpu", torch.float32), loaded,
                       f"{arch} {label}: from_pretrained(export) continues as tetra generate (fp32, CPU)")
print("PASS")
