#!/usr/bin/env python3
"""Checks the float8 linear of the PyTorch peers (scripts/bench/torch_fp8.py).

  fp8_peer_check.py            on the CPU, GEMMs emulated: casts, scales, layouts and gradients
  fp8_peer_check.py --cuda     also torch._scaled_mm on the GPU against the emulation (Hopper)

Exit 0: all checks passed; 1: a check failed, or no torch outside a GPU test; 77: cannot run here
(no torch in a GPU test, TETRA_TEST_GPU=1; with --cuda, no CUDA GPU of compute capability 8.9 or
above).

The checks, each on Gaussian data:
  1. the cast: software rounding to E4M3/E5M2 against a few values worked by hand, and bit for bit
     against PyTorch's own float8 cast where this PyTorch has the dtypes;
  2. Float8Matmul's forward and both gradients against the same arithmetic written out here in
     float64 from operands quantised here (x, w in E4M3, the output gradient in E5M2), relative
     error ≤ 1e-5: they differ only by fp32 against fp64 accumulation over at most 256 terms
     (≈ 16·2⁻²⁴ ≈ 1e-6); a swapped format, scale or operand is off by percents;
  3. the same against a plain fp32 nn.Linear: a GEMM of two operands with independent relative
     rounding errors of rms r_a and r_b has a relative (Frobenius) error of about √(r_a² + r_b²)
     (≈ 0.04 for E4M3·E4M3, ≈ 0.06 for E5M2·E4M3); the bound is 1.5× that, r measured on the
     operands themselves, so a wrong transpose or scale (error ≈ 1.4) cannot pass;
  4. the layout rules of torch._scaled_mm are enforced by the emulation (a wrong layout raises);
  5. convert_linears: the blocks' linears converted, the router kept, sizes not multiple of 16 refused;
  6. with PyTorch ≥ 2.4 (nn.RMSNorm): torch_llama.py --device cpu --fp8 tensorwise --emulate runs
     three steps and reports every block linear converted; with --cuda also --mode compile on the GPU.
"""
import json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import torch
    import torch.nn as nn
except ImportError:
    # As the tests' rule (docs/testing.md): a missing module fails a CPU test and skips a GPU one.
    why = f"{sys.executable} has no torch (the tests' Python: reconfigure with -DTETRA_PYTHON=...)"
    if os.environ.get("TETRA_TEST_GPU") == "1":
        print(f"fp8_peer_check: skipped: {why}")
        sys.exit(77)
    print(f"fp8_peer_check: FAIL: {why}")
    sys.exit(1)
import torch_fp8 as f8

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def check_rounding():
    cases = {  # value -> (E4M3, E5M2), ties to even
        1.0625: (1.0, 1.0), 1.1875: (1.25, 1.25), 1.125: (1.125, 1.0), 448.0: (448.0, 448.0),
        2.0 ** -9: (2.0 ** -9, 2.0 ** -9), 2.0 ** -10: (0.0, 2.0 ** -10), -3.3: (-3.25, -3.5),
        57344.0: (448.0, 57344.0), 2.0 ** -17: (0.0, 0.0), 0.0: (0.0, 0.0)}
    for fmt, col in ((f8.E4M3, 0), (f8.E5M2, 1)):
        x = torch.tensor(list(cases), dtype=torch.float32).clamp(-fmt.max, fmt.max)
        want = torch.tensor([v[col] for v in cases.values()])
        got = fmt.round_in_fp32(x)
        check(torch.equal(got, want), f"{fmt.name}: software rounding of hand-worked values {got.tolist()}")
        if fmt.dtype is not None:
            g = torch.Generator().manual_seed(1)
            y = torch.cat([torch.randn(100000, generator=g) * s for s in (1e-4, 1.0, 100.0, fmt.max / 4)])
            y = y.clamp(-fmt.max, fmt.max)
            check(torch.equal(fmt.round_in_fp32(y), y.to(fmt.dtype).float()),
                  f"{fmt.name}: software rounding bit for bit against PyTorch's cast (400k values)")


def reference(x, w, gy):
    """y, dx, dw from operands quantised here, in float64."""
    def q(t, fmt):
        amax = t.abs().max().double()
        scale = fmt.max / amax
        return fmt.round_in_fp32((t.double() * scale).clamp(-fmt.max, fmt.max).float()).double() / scale
    xq, wq, gq = q(x, f8.E4M3), q(w, f8.E4M3), q(gy, f8.E5M2)
    return xq @ wq.t(), gq @ wq, gq.t() @ xq, (xq, wq, gq)


def run_function(x, w, gy, emulate=True):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = f8.Float8Matmul.apply(x, w, emulate)
    y.backward(gy)
    return y.detach(), x.grad, w.grad


def check_gemms():
    g = torch.Generator().manual_seed(0)
    M, K, N = 64, 256, 96
    x, w, gy = (torch.randn(*s, generator=g) for s in ((M, K), (N, K), (M, N)))
    x[3, 5] = 40.0  # an outlier: sets x's scale, as activations' outliers do
    y, dx, dw = run_function(x, w, gy)
    ry, rdx, rdw, (xq, wq, gq) = reference(x, w, gy)
    for name, got, want in (("forward y", y, ry), ("input gradient", dx, rdx), ("weight gradient", dw, rdw)):
        e = rel(got, want)
        check(e <= 1e-5, f"{name}: against the float64 recomputation, relative error {e:.2e} <= 1e-5")
    r = {n: rel(q, t) for n, q, t in (("x", xq, x), ("w", wq, w), ("g", gq, gy))}
    print(f"      rms relative quantisation error: x {r['x']:.4f}, w {r['w']:.4f}, grad {r['g']:.4f}")
    exact = (x.double() @ w.double().t(), gy.double() @ w.double(), gy.double().t() @ x.double())
    for name, got, want, ra, rb in (("forward y", y, exact[0], r["x"], r["w"]),
                                     ("input gradient", dx, exact[1], r["g"], r["w"]),
                                     ("weight gradient", dw, exact[2], r["g"], r["x"])):
        e, bound = rel(got, want), 1.5 * (ra ** 2 + rb ** 2) ** 0.5
        check(e <= bound, f"{name}: against fp32 nn.Linear arithmetic, relative error {e:.4f} <= {bound:.4f}")
    check(y.dtype == x.dtype and dx.dtype == x.dtype and dw.dtype == w.dtype, "output and gradient dtypes follow x and w")


def check_module():
    g = torch.Generator().manual_seed(2)
    ref = nn.Linear(128, 64)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(64, 128, generator=g) * 0.02)
        ref.bias.copy_(torch.randn(64, generator=g))
    lin = nn.Linear(128, 64)
    lin.load_state_dict(ref.state_dict())
    check(f8.convert_linears(nn.ModuleList([lin]), emulate=True) == 1 and isinstance(lin, f8.Float8Linear),
          "convert_linears turns an nn.Linear into a Float8Linear in place")
    x = torch.randn(2, 16, 128, generator=g)
    r = torch.randn(2, 16, 64, generator=g)
    ys = []
    for m in (ref, lin):
        xi = x.clone().requires_grad_()
        y = m(xi)
        (y * r).sum().backward()
        ys.append((y.detach(), xi.grad, m.weight.grad, m.bias.grad))
    check(ys[1][0].shape == (2, 16, 64), "Float8Linear keeps the leading dimensions")
    check(rel(ys[1][3], ys[0][3]) <= 1e-6, "the bias gradient equals nn.Linear's (the bias is added unquantised)")
    for i, name in ((0, "output"), (1, "input gradient"), (2, "weight gradient")):
        e = rel(ys[1][i], ys[0][i])
        check(e <= 0.1, f"Float8Linear {name} against nn.Linear: relative error {e:.4f} <= 0.1 (above check 3's bounds, ~0.09)")
    lin.compute_dtype = torch.bfloat16  # as the peers set it: bf16 in and out, as under autocast
    xi = x.clone().requires_grad_()
    y = lin(xi)
    (y.float() * r).sum().backward()
    check(y.dtype == torch.bfloat16 and xi.grad.dtype == torch.float32 and lin.weight.grad.dtype == torch.float32,
          f"compute_dtype bf16: output {y.dtype}, gradients of x and w in fp32 as x and w")


def check_layouts():
    a = torch.randn(32, 16)
    b = torch.randn(16, 32)  # row-major: not what scaled_mm takes as its second operand
    one = torch.tensor(1.0)
    try:
        f8.emulated_scaled_mm(a, b, one, one, torch.float32)
        check(False, "the emulation refuses a row-major second operand")
    except RuntimeError:
        check(True, "the emulation refuses a row-major second operand")
    f8.emulated_scaled_mm(a, b.t().contiguous().t(), one, one, torch.float32)


def check_convert():
    block = nn.Module()
    block.q, block.router = nn.Linear(32, 32), nn.Linear(32, 64)
    block.mlp = nn.Sequential(nn.Linear(32, 48), nn.GELU(), nn.Linear(48, 32))
    n = f8.convert_linears(nn.ModuleList([block]))
    check(n == 3 and type(block.router) is nn.Linear, f"convert_linears: {n} converted (3 expected), the router kept")
    try:
        f8.convert_linears(nn.ModuleList([nn.Linear(32, 50)]))
        check(False, "convert_linears refuses 50 output features")
    except ValueError as e:
        check("multiples of 16" in str(e), "convert_linears refuses 50 output features")


def check_peer(*flags):
    """torch_llama.py, 2 layers, a few steps with --fp8 tensorwise and flags: every block linear
    converted (2 layers × q, k, v, o, gate, up, down) and a finite loss."""
    cmd = [sys.executable, os.path.join(HERE, "torch_llama.py"), "--fp8", "tensorwise", *flags,
           "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128",
           "--vocab", "256", "--batch", "2", "--seq", "32", "--steps", "3", "--rope-theta", "10000"]
    what = "torch_llama.py --fp8 tensorwise " + " ".join(flags)
    p = subprocess.run(cmd, capture_output=True, text=True)
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        check(False, f"{what} printed no JSON line:\n{p.stderr[-3000:]}")
        return
    check(out.get("fp8_linears") == 2 * 7 and out.get("fp8") == "tensorwise" and 0 < out.get("loss", -1) < 10,
          f"{what}: {out.get('fp8_linears')} float8 linears (2 layers × 7), loss {out.get('loss')}")


def check_cuda():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9) or f8.E4M3.dtype is None:
        print("fp8_peer_check: skipped --cuda: no GPU with float8 GEMMs (compute capability 8.9+) or no float8 dtypes")
        sys.exit(77)
    g = torch.Generator(device="cuda").manual_seed(3)
    M, K, N = 512, 1024, 768
    x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    w = torch.randn(N, K, device="cuda", generator=g)
    gy = torch.randn(M, N, device="cuda", generator=g).bfloat16()
    real, emu = run_function(x, w, gy, emulate=False), run_function(x, w, gy, emulate=True)
    # Both round the same float8 operands; they differ by accumulation order (fast accumulation in the
    # forward) and one bf16 rounding of the output (2⁻⁹ relative): 1e-2 leaves room for both.
    for name, a, b in zip(("forward y", "input gradient", "weight gradient"), real, emu):
        e = rel(a, b)
        check(e <= 1e-2, f"cuda {name}: torch._scaled_mm against the emulation, relative error {e:.2e} <= 1e-2")
    check_peer("--mode", "compile")  # the autograd.Function under torch.compile, on the GPU


check_rounding()
check_gemms()
check_module()
check_layouts()
check_convert()
if hasattr(nn, "RMSNorm"):
    check_peer("--device", "cpu", "--emulate")
else:
    print(f"skip  torch_llama.py on the CPU: PyTorch {torch.__version__} has no nn.RMSNorm (2.4+)")
if "--cuda" in sys.argv[1:]:
    check_cuda()
print(f"{len(failures)} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
