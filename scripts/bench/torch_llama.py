# PyTorch peer for throughput: a Llama-style decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU,
# untied output layer), optionally with DeepSeek-V3-style mixture-of-experts layers (sigmoid router with
# an auxiliary-loss-free balancing bias, top-k routing, shared experts, dropless experts run as one
# grouped GEMM per projection, the way torchtitan runs them). bf16 autocast, fused AdamW, clipping 1.0,
# flash attention. Random tokens. Prints one JSON line.
#   python3 torch_llama.py --mode eager|compile [shape flags] [--fp8 tensorwise]
#   torchrun --standalone --nproc_per_node 2 torch_llama.py ...   # DDP (or --fsdp for FSDP2)
# --fp8 tensorwise: the blocks' linear layers (q, k, v, o, gate, up, down, the shared experts) in
# float8 on torch._scaled_mm (torch_fp8.py); the embedding, the output layer, the router and the
# routed experts' grouped GEMMs stay bf16.
# FLOPs per token (as torchtitan): 6·(active parameters − embedding) + 12·L·d·T, the same with --fp8.
import torch, torch.nn as nn, torch.nn.functional as F

import torch_peer

p = torch_peer.parser(layers=16, dim=2048, heads=32, vocab=128256, batch=4, seq=4096)
p.add_argument("--kv-heads", type=int, default=8)
p.add_argument("--ffn", type=int, default=8192); p.add_argument("--rope-theta", type=float, default=500000.0)
p.add_argument("--experts", type=int, default=0, help="routed experts per MoE layer (0: dense model)")
p.add_argument("--topk", type=int, default=6); p.add_argument("--shared", type=int, default=1)
p.add_argument("--moe-ffn", type=int, default=1408); p.add_argument("--dense-layers", type=int, default=1)
p.add_argument("--route-scale", type=float, default=1.0); p.add_argument("--bias-rate", type=float, default=1e-3)
p.add_argument("--force-balance", action="store_true", help="route token t to experts (t·k + j) mod E, as benchmarks do")
p.add_argument("--device", default="cuda")
a = p.parse_args()
ddp, rank, world = torch_peer.init_dist()
dev = a.device
grouped_mm = getattr(torch, "_grouped_mm", None) if dev == "cuda" else None
ALIGN = 16  # grouped GEMM row groups start at multiples of 16

def rope_tables(T, hd):
    inv = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    f = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    return f.cos().to(dev), f.sin().to(dev)

def rope(x, cos, sin):  # x [B, H, T, hd]; rotate-half convention (Hugging Face Llama)
    x1, x2 = x.chunk(2, dim=-1)
    c, s = cos[None, None], sin[None, None]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)

class Attention(nn.Module):
    def __init__(s):
        super().__init__(); s.hd = a.dim // a.heads
        s.q = nn.Linear(a.dim, a.heads * s.hd, bias=False)
        s.k = nn.Linear(a.dim, a.kv_heads * s.hd, bias=False)
        s.v = nn.Linear(a.dim, a.kv_heads * s.hd, bias=False)
        s.o = nn.Linear(a.heads * s.hd, a.dim, bias=False)
    def forward(s, x, cos, sin):
        B, T, _ = x.shape
        q = s.q(x).view(B, T, a.heads, s.hd).transpose(1, 2)
        k = s.k(x).view(B, T, a.kv_heads, s.hd).transpose(1, 2)
        v = s.v(x).view(B, T, a.kv_heads, s.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        rep = a.heads // a.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return s.o(y.transpose(1, 2).reshape(B, T, -1))

class SwiGLU(nn.Module):
    def __init__(s, d, f):
        super().__init__()
        s.gate = nn.Linear(d, f, bias=False); s.up = nn.Linear(d, f, bias=False); s.down = nn.Linear(f, d, bias=False)
    def forward(s, x): return s.down(F.silu(s.gate(x)) * s.up(x))

class MoE(nn.Module):
    def __init__(s):
        super().__init__(); E, D, Fe = a.experts, a.dim, a.moe_ffn
        s.router = nn.Linear(D, E, bias=False)
        s.register_buffer("bias", torch.zeros(E))    # balancing bias: steers selection only
        s.register_buffer("load", torch.zeros(E))    # tokens per expert in the last step
        s.w_gate = nn.Parameter(torch.empty(E, Fe, D)); s.w_up = nn.Parameter(torch.empty(E, Fe, D))
        s.w_down = nn.Parameter(torch.empty(E, D, Fe))
        s.shared = SwiGLU(D, Fe * a.shared) if a.shared else None
    def experts(s, xs, offs):  # xs [R, D] grouped by expert; offs: end row of each group
        if grouped_mm is not None:  # bf16 operands, as autocast would give a dense GEMM
            xs = xs.to(torch.bfloat16)
            mm = lambda t, w: grouped_mm(t, w.to(torch.bfloat16).transpose(-2, -1), offs=offs)
            return mm(F.silu(mm(xs, s.w_gate)) * mm(xs, s.w_up), s.w_down)
        out, start = torch.zeros_like(xs), 0
        for e, end in enumerate(offs.tolist()):
            if end > start:
                t = xs[start:end]
                out[start:end] = (F.silu(t @ s.w_gate[e].t().to(t.dtype)) * (t @ s.w_up[e].t().to(t.dtype))) @ s.w_down[e].t().to(t.dtype)
            start = end
        return out
    def forward(s, x):
        B, T, D = x.shape; E, K = a.experts, a.topk
        h = x.reshape(-1, D); N = h.shape[0]
        scores = torch.sigmoid(s.router(h).float())                       # [N, E]
        idx = torch.topk(scores + s.bias, K, dim=-1).indices              # selection sees the bias
        if a.force_balance:
            idx = (torch.arange(N * K, device=h.device) % E).view(N, K)
        w = scores.gather(1, idx); w = (w / w.sum(-1, keepdim=True)) * a.route_scale
        flat = idx.reshape(-1)
        counts = torch.zeros(E, device=h.device, dtype=torch.long).scatter_add_(0, flat, torch.ones_like(flat))
        s.load.copy_(counts.float())
        padded = (counts + ALIGN - 1) // ALIGN * ALIGN
        ends_p = torch.cumsum(padded, 0); starts_p = ends_p - padded
        starts = torch.cumsum(counts, 0) - counts
        order = torch.argsort(flat, stable=True); e_sorted = flat[order]
        dest = starts_p[e_sorted] + torch.arange(N * K, device=h.device) - starts[e_sorted]
        buf = h.new_zeros(N * K + ALIGN * E, D)
        buf[dest] = h[order // K]
        y = s.experts(buf, ends_p.to(torch.int32))[dest] * w.reshape(-1)[order].unsqueeze(1).to(h.dtype)
        out = torch.zeros(N, D, device=h.device, dtype=y.dtype).index_add_(0, order // K, y)
        if s.shared is not None: out = out + s.shared(h)
        return out.view(B, T, D)

class Block(nn.Module):
    def __init__(s, i):
        super().__init__()
        s.attn_norm = nn.RMSNorm(a.dim, eps=1e-5); s.attn = Attention()
        s.mlp_norm = nn.RMSNorm(a.dim, eps=1e-5)
        s.mlp = MoE() if a.experts and i >= a.dense_layers else SwiGLU(a.dim, a.ffn)
    def forward(s, x, cos, sin):
        x = x + s.attn(s.attn_norm(x), cos, sin)
        return x + s.mlp(s.mlp_norm(x))

class Llama(nn.Module):
    def __init__(s):
        super().__init__()
        s.embed = nn.Embedding(a.vocab, a.dim)
        s.blocks = nn.ModuleList([Block(i) for i in range(a.layers)])
        s.norm = nn.RMSNorm(a.dim, eps=1e-5); s.head = nn.Linear(a.dim, a.vocab, bias=False)
        cos, sin = rope_tables(a.seq, a.dim // a.heads)
        s.register_buffer("cos", cos, persistent=False); s.register_buffer("sin", sin, persistent=False)
    def forward(s, idx, tgt):
        x = s.embed(idx)
        for b in s.blocks: x = b(x, s.cos, s.sin)
        logits = s.head(s.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), tgt.view(-1))

torch.manual_seed(0)
model = Llama().to(dev)
for n, w in model.named_parameters():
    if "norm" in n: nn.init.ones_(w)
    else: nn.init.normal_(w, std=0.02)
moes = [b.mlp for b in model.blocks if isinstance(b.mlp, MoE)]
nparams = sum(p.numel() for p in model.parameters())
expert_params = sum(m.w_gate.numel() + m.w_up.numel() + m.w_down.numel() for m in moes)
active = nparams - expert_params + expert_params * a.topk // max(a.experts, 1)
flops_tok = 6 * (active - a.vocab * a.dim) + 12 * a.layers * a.dim * a.seq
model, fp8 = torch_peer.wrap(model, model.blocks, a, ddp)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=(dev == "cuda"))
g = torch.Generator(device=dev).manual_seed(rank)
def batch():
    x = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev, generator=g)
    return x[:, :-1].contiguous(), x[:, 1:].contiguous()
def balance():
    with torch.no_grad():  # auxiliary-loss-free balancing (DeepSeek-V3): raise the bias of under-loaded experts
        for m in moes:
            load = m.load
            if ddp: torch.distributed.all_reduce(load)
            m.bias.add_(a.bias_rate * torch.sign(load.mean() - load))
ms, loss = torch_peer.train(model, opt, batch, a, dev, balance)
fields = {"impl": torch_peer.impl_name("torch-llama-", a, ddp) + ("-balanced" if a.force_balance else ""), "world": world,
          "params": nparams, "active_params": active, "batch": a.batch, "seq": a.seq, "loss": round(loss, 4),
          "grouped_mm": grouped_mm is not None and bool(moes)}
out = torch_peer.report(fields, a, world, ms, flops_tok, fp8, dev)
if moes: out["max_load_over_mean"] = round(max((m.load.max() / m.load.mean()).item() for m in moes), 3)
torch_peer.emit(out, rank, ddp)
