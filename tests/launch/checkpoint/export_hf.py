#!/usr/bin/env python3
"""`tetra ckpt consolidate --format hf` writes a complete folder: a run started from a Hugging Face
folder (model.init_from) that holds tokenizer files is exported with those files copied byte for
byte, generation_config.json and config.json carrying the begin/end-of-text ids (here from
tokenizer_config.json through tokenizer.json's vocabulary), and, under a tiny --max-shard-size, the
weights in model-0000i-of-0000n.safetensors shards with model.safetensors.index.json as
transformers writes them (weight_map over every tensor, metadata.total_size their bytes); the
sharded folder loads back bit for bit. --tokenizer DIR takes the files from elsewhere. Bad
arguments exit 2 with a message, and an export never writes over a folder that holds files.

usage: export_hf.py TETRA_BIN WORK_DIR"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # tests/: shared helpers
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
from tetra_runs import Workspace, check, state_of  # noqa: E402
from safetensors_reference import load  # noqa: E402

tetra, work = sys.argv[1], sys.argv[2]
ws = Workspace(tetra, work, steps=2, every=2)
llama = ["model.arch=llama", "model.n_heads=4", "model.n_kv_heads=2", "model.ffn_dim=64"]
noop = ["optimizer.lr=1e-30", "optimizer.min_lr=0", "optimizer.warmup_steps=0", "optimizer.weight_decay=0",
        "train.steps=1", "checkpoint.every=1"]


def fresh(name):
    path = os.path.join(ws.work, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


def consolidate(step, out, *args, expect=0):
    return ws.tetra_cmd("ckpt", "consolidate", step, "--out", out, "--format", "hf", *args, expect=expect)


# A folder to start from: a run's export, plus tokenizer files as a Hub folder has them.
ws.train("src", 1, llama)
src_step = os.path.join(ws.run_dir("src"), "checkpoints", "step_2")
hub = fresh("hub")
out, _, _ = consolidate(src_step, hub)
check("note: no tokenizer files" in out, "a run not started from a folder: the export says it has no tokenizer")
check(not any(n.startswith("tokenizer") for n in os.listdir(hub)), "... and copies none")
with open(os.path.join(hub, "generation_config.json")) as f:
    check("eos_token_id" not in json.load(f), "generation_config.json without an end-of-text id it does not know")
tokenizer_files = {
    "tokenizer.json": json.dumps({"version": "1.0", "added_tokens": [{"id": 2, "content": "<s>", "special": True},
                                                                     {"id": 3, "content": "</s>", "special": True}],
                                  "model": {"type": "BPE", "vocab": {"a": 97, "b": 98}}}),
    "tokenizer_config.json": json.dumps({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
                                         "tokenizer_class": "PreTrainedTokenizerFast"}),
    "special_tokens_map.json": json.dumps({"bos_token": "<s>", "eos_token": "</s>"}),
    "tokenizer.model": "\x00\x01 not a real sentencepiece model, copied as bytes \xff",
}
for name, text in tokenizer_files.items():
    with open(os.path.join(hub, name), "w", encoding="latin-1") as f:
        f.write(text)

# A run from that folder, exported in shards of at most 20 kB.
ws.train("tuned", 1, llama + [f"model.init_from={hub}"] + noop)
step = os.path.join(ws.run_dir("tuned"), "checkpoints", "step_1")
out_dir = fresh("exported")
stdout, _, _ = consolidate(step, out_dir, "--max-shard-size", "20KB")
files = sorted(os.listdir(out_dir))
for name, text in tokenizer_files.items():
    with open(os.path.join(out_dir, name), "rb") as f:
        check(f.read() == text.encode("latin-1"), f"{name} copied byte for byte from model.init_from")
with open(os.path.join(out_dir, "generation_config.json")) as f:
    gen = json.load(f)
check(gen.get("bos_token_id") == 2 and gen.get("eos_token_id") == 3,
      "generation_config.json: bos/eos ids from tokenizer_config.json's tokens")
with open(os.path.join(out_dir, "config.json")) as f:
    config = json.load(f)
check(config.get("bos_token_id") == 2 and config.get("eos_token_id") == 3, "config.json carries the same ids")
check("model.safetensors" not in files, "a sharded folder has no model.safetensors")
with open(os.path.join(out_dir, "model.safetensors.index.json")) as f:
    index = json.load(f)
shards = sorted(n for n in files if n.endswith(".safetensors"))
n = len(shards)
check(n > 2 and shards == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)],
      f"{n} shards named model-0000i-of-{n:05d}.safetensors")
tensors, total = {}, 0
for shard in shards:
    got, _, meta = load(os.path.join(out_dir, shard))
    check(meta.get("format") == "pt", f"{shard}: metadata format pt")
    size = sum(v.nbytes for v in got.values())
    check(size <= 20_000 or len(got) == 1, f"{shard}: {size} bytes within 20 kB, or one tensor larger than that")
    total += size
    for name in got:
        tensors[name] = shard
check(index["weight_map"] == tensors, "the index maps every tensor to the shard that holds it")
check(index["metadata"]["total_size"] == total, "metadata.total_size: the tensors' bytes")
check(not any(n.startswith(".") for n in os.listdir(ws.work)), "no temporary folder left beside the export")

# The sharded export loads back bit for bit (a run from it saves the same weights).
_, want = state_of(step)
ws.train("back", 1, llama + [f"model.init_from={out_dir}"] + noop)
_, got = state_of(os.path.join(ws.run_dir("back"), "checkpoints", "step_1"))
check(all(got[k]["master"].tobytes() == want[k]["master"].tobytes() for k in want),
      "model.init_from reads the sharded export back bit for bit")

# --tokenizer DIR: the files of another folder.
other = fresh("other_tok")
os.makedirs(other)
with open(os.path.join(other, "tokenizer.model"), "wb") as f:
    f.write(b"other")
out2 = fresh("exported2")
consolidate(step, out2, "--tokenizer", other, "--max-shard-size", "1000000000")
check(sorted(n for n in os.listdir(out2) if n.startswith(("tokenizer", "special"))) == ["tokenizer.model"],
      "--tokenizer DIR: its tokenizer files only")
check("model.safetensors" in os.listdir(out2) and "model.safetensors.index.json" not in os.listdir(out2),
      "below the shard size: one model.safetensors, no index")

# Bad arguments: exit 2, a message naming the option, nothing written.
for args, words in ((["--max-shard-size", "5XB"], "--max-shard-size 5XB: not a size"),
                    (["--max-shard-size", "0"], "--max-shard-size 0: not a size"),
                    (["--tokenizer", os.path.join(ws.work, "nowhere")], "not a folder"),
                    (["--tokenizer", ws.runs], "holds none of tokenizer.json")):
    target = fresh("bad")
    _, err, _ = consolidate(step, target, *args, expect=2)
    check(words in err and not os.path.exists(target), f"{' '.join(args)}: exit 2, '{words}', nothing written")
_, err, _ = ws.tetra_cmd("ckpt", "consolidate", step, "--out", fresh("x.h5"), "--tokenizer", other, expect=2)
check("only with --format hf" in err, "--tokenizer with --format hdf5: exit 2")
_, err, _ = consolidate(step, out_dir, expect=2)
check("not empty" in err and sorted(os.listdir(out_dir)) == files, "an export onto a folder with files: exit 2, "
      "the folder untouched")
print("PASS")
