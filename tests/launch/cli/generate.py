#!/usr/bin/env python3
"""`tetra generate` end to end on the CPU: a tiny Llama (grouped-query attention) and a GPT-2 trained a
few steps, generated from greedily by the checkpoint directory, the consolidated HDF5 file and the
exported Hugging Face folder alike (the same ids from all three); --prompt with the byte tokenizer
(the text round-trips); the folder's eos_token_id (a number or a list) ends generation at that token;
sampling is reproducible from --seed and --top-k 1 is greedy; --json prints the ids and the text;
`tetra train` with log.sample_every prints samples on rank 0, and refuses a mesh it cannot sample
from. Bad arguments exit 2 with a message naming the option.

usage: generate.py TETRA_BIN WORK_DIR"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
from tetra_runs import Workspace, check  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=6, every=6)
PROMPT = "1,2,3,4"


def gen(model, *args, expect=0):
    out, err, rc = ws.tetra_cmd("generate", model, "--device", "cpu", *args, expect=expect)
    return (json.loads(out) if "--json" in args and rc == 0 else out), err


for arch, sets in (("llama", ["model.arch=llama", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=64"]),
                   ("gpt2", [])):
    ws.train(arch, 1, sets)
    step = os.path.join(ws.run_dir(arch), "checkpoints", "step_6")
    h5 = os.path.join(ws.work, arch + ".h5")
    hf = os.path.join(ws.work, arch + "_hf")
    shutil.rmtree(hf, ignore_errors=True)
    ws.tetra_cmd("ckpt", "consolidate", step, "--out", h5)
    ws.tetra_cmd("ckpt", "consolidate", step, "--out", hf, "--format", "hf")
    runs = {}
    for label, model in (("checkpoint", step), ("hdf5", h5), ("hf", hf)):
        j, _ = gen(model, "--prompt-ids", PROMPT, "--max-new-tokens", "10", "--json")
        runs[label] = j["ids"]
    ids = runs["checkpoint"]
    check(len(ids) == 14 and ids[:4] == [1, 2, 3, 4], f"{arch}: 4 prompt ids and 10 new ones")
    check(runs["hdf5"] == ids and runs["hf"] == ids, f"{arch}: checkpoint, HDF5 file and HF folder generate alike")
    # The byte tokenizer: the prompt's bytes, the text decoded.
    j, _ = gen(step, "--prompt", "The licence", "--tokenizer", "byte", "--max-new-tokens", "5", "--json")
    check(j["ids"][:11] == list(b"The licence") and j["text"].startswith("The licence") and len(j["ids"]) == 16,
          f"{arch}: --prompt through the byte tokenizer, text and ids")
    out, _ = gen(step, "--prompt", "The licence", "--tokenizer", "byte", "--max-new-tokens", "5")
    check(out.startswith("The licence"), f"{arch}: plain output is the text")
    # Sampling: the same seed, the same ids; top-k 1 is greedy.
    a, _ = gen(hf, "--prompt-ids", PROMPT, "--temperature", "1.3", "--seed", "7", "--max-new-tokens", "12", "--json")
    b, _ = gen(hf, "--prompt-ids", PROMPT, "--temperature", "1.3", "--seed", "7", "--max-new-tokens", "12", "--json")
    check(a["ids"] == b["ids"], f"{arch}: sampling with --seed is reproducible")
    k1, _ = gen(hf, "--prompt-ids", PROMPT, "--top-k", "1", "--seed", "3", "--max-new-tokens", "10", "--json")
    check(k1["ids"] == ids, f"{arch}: --top-k 1 is greedy")
    # eos_token_id in config.json (a list, as Llama 3's) ends generation at that token, included.
    stop = ids[4 + 5]
    with open(os.path.join(hf, "config.json")) as f:
        config = json.load(f)
    config["eos_token_id"] = [1000, stop]
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(config, f)
    os.remove(os.path.join(hf, "generation_config.json"))
    j, _ = gen(hf, "--prompt-ids", PROMPT, "--max-new-tokens", "10", "--json")
    first = ids.index(stop, 4)
    check(j["ids"] == ids[:first + 1], f"{arch}: generation stops at config.json's eos_token_id ({stop})")

# ---- bad arguments: exit 2, a message --------------------------------------------------------------
step = os.path.join(ws.run_dir("gpt2"), "checkpoints", "step_6")
hf = os.path.join(ws.work, "gpt2_hf")
for args, words in (([step], "--prompt TEXT"),
                    ([step, "--prompt", "a", "--prompt-ids", "1"], "one of the two"),
                    ([step, "--prompt-ids", "1,x"], "'x' is not a token id"),
                    ([step, "--prompt-ids", "1,,2"], "'' is not a token id"),
                    ([step, "--prompt-ids", "999"], "outside the model's vocabulary of 256"),
                    ([step, "--prompt-ids", ",".join(["1"] * 32)], "leaving none to generate"),
                    ([step, "--prompt-ids", "1", "--greedy", "--temperature", "0.7"], "choose greedy decoding or"),
                    ([step, "--prompt-ids", "1", "--temperature", "0"], "--temperature 0: must be > 0"),
                    ([step, "--prompt-ids", "1", "--top-p", "1.5"], "--top-p 1.5"),
                    ([step, "--prompt-ids", "1", "--max-new-tokens", "0"], "--max-new-tokens 0"),
                    ([hf, "--prompt", "hello"], "needs a tokenizer"),
                    ([os.path.join(ws.work, "nowhere"), "--prompt-ids", "1"], "no such file or folder"),
                    ([step, "--prompt-ids", "1", "--device", "tpu"], "--device tpu")):
    _, err, rc = ws.tetra_cmd("generate", *args, expect=2)
    check(words in err, f"generate {' '.join(args[1:])}: exit 2, '{words}'")

# ---- tetra train: log.sample_every ----------------------------------------------------------------
out, _, _ = ws.train("samples", 2, ["log.sample_every=3", "log.sample_prompt=The licence", "log.sample_tokens=8",
                                   "train.steps=6", "checkpoint.every=0"])
lines = [l for l in out.splitlines() if l.startswith("sample at step")]
check([l.split(":")[0] for l in lines] == ["sample at step 3", "sample at step 6"],
      "log.sample_every 3: rank 0 prints a sample after steps 3 and 6, once each")
check(all(l.split(": ", 1)[1].startswith("The licence") and len(l.split(": ", 1)[1]) > len("The licence")
          for l in lines), "each sample is the prompt and its continuation")
_, err, _ = ws.train("samples_tp", 2, ["log.sample_every=3", "log.sample_prompt=x", "parallel.tp=2"], expect=2)
check("log.sample_every" in err and "parallel.tp 2" in err, "log.sample_every with tp 2: refused, naming both")
_, err, _ = ws.train("samples_noprompt", 1, ["log.sample_every=3"], expect=2)
check("log.sample_prompt" in err, "log.sample_every without a prompt: refused")
print("PASS")
