# What the PyTorch peers (torch_gpt.py, torch_llama.py) share: the common options, process group,
# float8 conversion, compile/FSDP/DDP wrapping, the timed training loop and the JSON line.
import argparse, json, os, time
import torch

import torch_fp8


def parser(layers, dim, heads, vocab, batch, seq):
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="eager", choices=["eager", "compile"])
    p.add_argument("--layers", type=int, default=layers); p.add_argument("--dim", type=int, default=dim)
    p.add_argument("--heads", type=int, default=heads); p.add_argument("--vocab", type=int, default=vocab)
    p.add_argument("--batch", type=int, default=batch); p.add_argument("--seq", type=int, default=seq)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--fsdp", action="store_true")
    p.add_argument("--fp8", default="none", choices=["none", "tensorwise"],
                   help="tensorwise: the blocks' linear layers in float8 on torch._scaled_mm (scripts/bench/torch_fp8.py)")
    p.add_argument("--emulate", action="store_true",
                   help="float8 GEMMs as fp32 matmuls of the dequantised operands (no Hopper GPU needed)")
    return p


def init_dist():
    """(ddp, rank, world): DDP under torchrun (RANK set), else one process."""
    if "RANK" not in os.environ:
        return False, 0, 1
    torch.distributed.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    return True, torch.distributed.get_rank(), torch.distributed.get_world_size()


def wrap(model, blocks, a, ddp):
    """The blocks' linears to float8 (--fp8), then FSDP2, torch.compile, DDP as asked. Returns
    (model, number of float8 linears)."""
    # bf16 operands into the casts, as autocast would give nn.Linear (a constant, not an autocast
    # query: nothing for torch.compile to trace around)
    fp8 = torch_fp8.convert_linears(blocks, emulate=a.emulate, compute_dtype=torch.bfloat16) if a.fp8 != "none" else 0
    if a.fp8 != "none" and fp8 == 0:
        raise SystemExit("--fp8: the blocks hold no nn.Linear to convert")
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard
        for b in blocks: fully_shard(b)
        fully_shard(model)
    if a.mode == "compile": model = torch.compile(model)
    if ddp and not a.fsdp: model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    return model, fp8


def train(model, opt, batch, a, dev, after_step=None):
    """a.steps steps of bf16 autocast, clipping at 1.0 and opt; (median ms/step after warm-up, last loss)."""
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    times = []
    for step in range(a.steps):
        x, y = batch()
        sync(); t0 = time.perf_counter()
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); opt.zero_grad(set_to_none=True)
        if after_step is not None: after_step()
        sync(); times.append(time.perf_counter() - t0)
    warm = times[10:] if len(times) > 15 else times[len(times) // 2:]
    return sorted(warm)[len(warm) // 2] * 1000, loss.item()


def impl_name(prefix, a, ddp):
    return (prefix + a.mode + ("-fsdp" if a.fsdp else "-ddp" if ddp else "")
            + ("-fp8-" + a.fp8 + ("-emulated" if a.emulate else "") if a.fp8 != "none" else ""))


def report(fields, a, world, ms, flops_tok, fp8, dev):
    """The JSON line: tokens/s over all ranks, MFU of 989 TFLOP/s on the model FLOPs (float8 GEMMs
    counted as the bf16 ones: the same FLOPs, no float8 peak)."""
    tok = a.batch * a.seq * world / (ms / 1000)
    out = dict(fields, ms_per_step=round(ms, 2), tokens_per_s=round(tok),
               mfu_vs_989=round(flops_tok * tok / world / 989e12, 4))
    if a.fp8 != "none": out.update(fp8=a.fp8, fp8_linears=fp8)
    if dev == "cuda": out["mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return out


def emit(out, rank, ddp):
    if rank == 0: print(json.dumps(out), flush=True)
    if ddp: torch.distributed.destroy_process_group()
