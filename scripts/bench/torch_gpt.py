# PyTorch peer for throughput: GPT-2 style decoder trained with bf16 autocast, fused AdamW, SDPA flash
# attention, on random tokens; --fp8 tensorwise runs the blocks' linear layers (qkv, proj, fc, out) in
# float8 (torch_fp8.py); the embedding and the tied output layer stay bf16.
#   python3 torch_gpt.py --mode eager|compile [--layers 12 --dim 768 --heads 12 --batch 16 --seq 1024 --steps 30] [--fp8 tensorwise]
# Under torchrun it wraps the model in DDP (or FSDP2 with --fsdp). Prints one JSON line: ms/step
# (median after warm-up), tokens/s over all GPUs, MFU of 989 TFLOP/s with FLOPs per token
# 6·N + 12·L·d·T (tied head counted once), the same count with --fp8.
import torch, torch.nn as nn, torch.nn.functional as F

import torch_peer

a = torch_peer.parser(layers=12, dim=768, heads=12, vocab=50304, batch=16, seq=1024).parse_args()
ddp, rank, world = torch_peer.init_dist()
dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = True

class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__(); s.h = h
        s.ln1 = nn.LayerNorm(d); s.qkv = nn.Linear(d, 3 * d); s.proj = nn.Linear(d, d)
        s.ln2 = nn.LayerNorm(d); s.fc = nn.Linear(d, 4 * d); s.out = nn.Linear(4 * d, d)
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = [t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v)]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + s.proj(y)
        return x + s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte = nn.Embedding(a.vocab, a.dim); s.wpe = nn.Embedding(a.seq, a.dim)
        s.blocks = nn.ModuleList([Block(a.dim, a.heads) for _ in range(a.layers)])
        s.lnf = nn.LayerNorm(a.dim); s.head = nn.Linear(a.dim, a.vocab, bias=False); s.head.weight = s.wte.weight
    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.blocks: x = b(x)
        logits = s.head(s.lnf(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))

torch.manual_seed(0)
model = GPT().to(dev)
for n, w in model.named_parameters():  # GPT-2 initialisation: N(0, 0.02), zero biases, unit norms
    if n.endswith("bias"): nn.init.zeros_(w)
    elif "ln" in n: nn.init.ones_(w)
    else: nn.init.normal_(w, std=0.02)
nparams = sum(p.numel() for p in model.parameters())
blocks = model.blocks
model, fp8 = torch_peer.wrap(model, blocks, a, ddp)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
g = torch.Generator(device=dev).manual_seed(rank)
def batch():
    x = torch.randint(0, 50257, (a.batch, a.seq + 1), device=dev, generator=g)
    return x[:, :-1].contiguous(), x[:, 1:].contiguous()
ms, loss = torch_peer.train(model, opt, batch, a, dev)
flops_tok = 6 * nparams + 12 * a.layers * a.dim * a.seq  # tied head counted once, plus attention
out = torch_peer.report({"impl": torch_peer.impl_name("torch-", a, ddp), "world": world, "params": nparams,
                         "batch": a.batch, "seq": a.seq, "loss": round(loss, 4)}, a, world, ms, flops_tok, fp8, dev)
torch_peer.emit(out, rank, ddp)
