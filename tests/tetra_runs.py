"""Helpers for the script tests that drive `tetra train` (checkpoint, failure and SLURM tests):
a small byte-level dataset, a tiny config, runs under mpirun or alone, and readers for what a run
leaves behind (metrics.jsonl, goodput.jsonl, checkpoints). The tests' Python
(tests/CMakeLists.txt chooses it) needs h5py and numpy."""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # script_util, beside this file
from script_util import LICENCE_TEXTS, require_modules  # noqa: E402

require_modules("numpy", "h5py")
import h5py  # noqa: E402
import numpy as np  # noqa: E402

MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg, flush=True)


class Workspace:
    """A work directory with train.h5 and cfg.yaml (a 2-layer, 32-wide GPT-2; 8 sequences of 32
    tokens per step; every config key can be overridden per run with --set)."""

    def __init__(self, tetra, work, steps=12, every=4, keep=0, extra_cfg="", base_sets=()):
        """base_sets: --set overrides of every run (e.g. another model family)."""
        self.tetra, self.work = tetra, os.path.abspath(work)
        self.base_sets = list(base_sets)
        os.makedirs(self.work, exist_ok=True)
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        self.env.pop("TETRA_FAULT", None)
        self.data = os.path.join(self.work, "train.h5")
        if not os.path.exists(self.data):
            subprocess.run([tetra, "data", "prepare", "--tokenizer", "byte", "--out", self.data, "--input"]
                           + LICENCE_TEXTS, check=True, env=self.env, stdout=subprocess.DEVNULL)
        self.runs = os.path.join(self.work, "runs")
        self.cfg = os.path.join(self.work, "cfg.yaml")
        # TETRA_TEST_RUN_AHEAD=1: the CPU runs launch step s+1 before step s is read back, as GPU runs
        # do, so the trainer's run-ahead paths (stops, non-finite steps, resumes) are tested here too.
        run_ahead = ", run_ahead: on" if os.environ.get("TETRA_TEST_RUN_AHEAD") == "1" else ""
        with open(self.cfg, "w") as f:
            f.write(f"""run: {{name: base, output_dir: {self.runs}, seed: 11, comm_timeout_s: 60}}
model: {{arch: gpt2, vocab_size: 256, seq_len: 32, d_model: 32, n_layers: 2, n_heads: 2}}
parallel: {{dp: 0}}
train: {{steps: {steps}, global_batch: 8, micro_batch: 2, device: cpu, precision: fp32, grad_clip: 1.0{run_ahead}}}
optimizer: {{lr: 3.0e-3, betas: [0.9, 0.95], weight_decay: 0.1, warmup_steps: 2, schedule: cosine, min_lr: 1.0e-4}}
data: {{train: {self.data}, shuffle: true}}
checkpoint: {{every: {every}, keep: {keep}}}
log: {{every: 100}}
{extra_cfg}""")

    def run_dir(self, name):
        return os.path.join(self.runs, name)

    def command(self, name, np_=2, sets=(), mpirun=True):
        args = [self.tetra, "train", self.cfg, "--set", f"run.name={name}"]
        for s in self.base_sets + list(sets):
            args += ["--set", s]
        return (MPIRUN + ["-np", str(np_)] + args) if mpirun else args

    def train(self, name, np_=2, sets=(), fault=None, expect=0, timeout=120, mpirun=True):
        """Runs `tetra train` to its end; checks the exit code; returns (stdout, stderr, exit code).
        A run that does not resume with checkpoint.resume=auto starts in an empty run directory, so
        a test gives the same result when run again in the same work directory."""
        if not any(s == "checkpoint.resume=auto" for s in sets):
            shutil.rmtree(self.run_dir(name), ignore_errors=True)
        env = dict(self.env)
        if fault:
            env["TETRA_FAULT"] = fault
        t0 = time.time()
        r = subprocess.run(self.command(name, np_, sets, mpirun), env=env, capture_output=True, text=True,
                           timeout=timeout)
        took = time.time() - t0
        if expect is not None and r.returncode != expect:
            print(r.stdout[-6000:], r.stderr[-6000:])
            fail(f"run {name} (np {np_}, {' '.join(sets)}, fault {fault}) exited {r.returncode}, expected {expect}")
        print(f"run {name}: np {np_} {' '.join(sets)} {'fault ' + fault if fault else ''} -> exit {r.returncode} "
              f"({took:.1f} s)", flush=True)
        return r.stdout, r.stderr, r.returncode

    def tetra_cmd(self, *args, expect=0):
        r = subprocess.run([self.tetra] + list(args), env=self.env, capture_output=True, text=True, timeout=120)
        if expect is not None and r.returncode != expect:
            print(r.stdout, r.stderr)
            fail(f"tetra {' '.join(args)} exited {r.returncode}, expected {expect}")
        return r.stdout, r.stderr, r.returncode


def metrics(run_dir):
    """step -> the last metrics.jsonl line of that step (a redone step appears again)."""
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            out[j["step"]] = j
    return out


def losses(run_dir):
    return {s: m["loss"] for s, m in metrics(run_dir).items()}


def ledger(run_dir):
    with open(os.path.join(run_dir, "goodput.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def checkpoint_steps(run_dir):
    d = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(d):
        return []
    return sorted(int(n[5:]) for n in os.listdir(d) if n.startswith("step_") and n[5:].isdigit())


def read_h5(path):
    """Every dataset of an HDF5 file: name -> numpy array."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
        f.visititems(visit)
    return out


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def state_of(step_dir):
    """The full training state of a checkpoint, independent of its mesh: parameter name ->
    {"master", "exp_avg", "exp_avg_sq"} flat fp32 arrays, assembled from the rank files' pieces
    (flat ranges of the whole tensor, or of a box of it: a tensor-parallel slice)."""
    with open(os.path.join(step_dir, "meta.json")) as f:
        meta = json.load(f)
    shapes = {p["name"]: p["shape"] for p in meta["params"]}
    state = {n: {k: np.full(int(np.prod(s)), np.nan, np.float32) for k in ("master", "exp_avg", "exp_avg_sq")}
             for n, s in shapes.items()}
    for fi in meta["files"]:
        with h5py.File(os.path.join(step_dir, fi["file"]), "r") as f:
            for piece in fi["pieces"]:
                name, begin, end = piece[:3]
                if len(piece) == 3:  # a flat range of the whole tensor
                    g = f[f"{name}[{begin}:{end}]"]
                    where = slice(begin, end)
                else:  # a flat range of a box of the tensor (a tensor-parallel slice)
                    box = piece[3]
                    text = ",".join(f"{o}:{o + n}" for o, n in zip(box["offset"], box["shape"]))
                    g = f[f"{name}{{{text}}}[{begin}:{end}]"]
                    cells = tuple(slice(o, o + n) for o, n in zip(box["offset"], box["shape"]))
                    where = np.arange(int(np.prod(shapes[name]))).reshape(shapes[name])[cells].ravel()[begin:end]
                for k in ("master", "exp_avg", "exp_avg_sq"):
                    state[name][k][where] = g[k][()]
    return meta, state


def compare_states(a_dir, b_dir, rtol=0.0):
    """(worst relative difference, parameter count) between two checkpoints' full states."""
    _, a = state_of(a_dir)
    _, b = state_of(b_dir)
    if a.keys() != b.keys():
        fail(f"{a_dir} and {b_dir} hold different parameters")
    worst = 0.0
    for n in a:
        for k in a[n]:
            x, y = a[n][k], b[n][k]
            if rtol == 0.0:
                if not same_bits(x, y):
                    return float("inf"), len(a)
            else:
                worst = max(worst, float(np.max(np.abs(x - y) / np.maximum(np.abs(y), 1e-6))))
    return worst, len(a)


# Equivalence tests: a parallel layout against the one-rank run, fp32 on the CPU, a few AdamW steps.
# One scheme for all of them (docs/testing.md "Tolerances"): a well-conditioned optimizer, and limits
# set about 100x above the floor that a correct run reaches against itself when only its summation
# order changes (the control: one rank, micro-batches of 2 sequences instead of 1), and far below what
# the bugs these tests exist for do.
#
# - optimizer.eps = EQUIVALENCE_EPS. AdamW's step lr·m̂/(√v̂ + eps) moves with the gradient g by up
#   to lr/eps per unit of g. With eps 1e-8 and lr 3e-3 that factor is 3e5: a 1e-11 rounding
#   difference in a near-zero gradient (attention's key bias, an expert that saw few tokens) moves
#   its weight by ~3e-6, and the control reaches 2e-6..2e-5 (norm-wise), depending on the OpenBLAS
#   kernel (Haswell, SkylakeX) — above a 1e-6 limit. With eps 1e-3 the factor is lr/eps = 3.
# - Floors of the control with eps 1e-3 (GPT-2 of 8 blocks and a Llama of 4, 3 steps, Haswell and
#   SkylakeX kernels): loss ≤ 1e-9 and gradient norm ≤ 2e-8 (relative); weights ≤ 2e-7 norm-wise
#   per tensor (the largest in biases that start at zero, whose norm after 3 steps is ~3e-3).
# - Limits: EQUIVALENCE_TOL = 1e-6 on every step's loss and gradient norm, EQUIVALENCE_WEIGHTS_TOL
#   = 1e-5 on every final tensor's ‖a − b‖ / ‖b‖.
# - Bugs (injected into the data-parallel gradient reduction, pp 2 × dp 2, ZeRO 0): one rank's share
#   of a bucket dropped: loss 2e-3, gradient norm 0.5, weights 0.4; the reduced gradient halved
#   (a wrong averaging factor): loss 2e-5, gradient norm 0.5, weights 4e-2.
# A test comparing bit for bit (same layout, same state) needs none of this and compares exactly.
EQUIVALENCE_EPS = "optimizer.eps=1e-3"
EQUIVALENCE_TOL = 1e-6
EQUIVALENCE_WEIGHTS_TOL = 1e-5


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def weights_difference(a, b, key="master"):
    """The worst ‖a − b‖ / ‖b‖ over the tensors of two states (state_of's second value)."""
    if a.keys() != b.keys():
        fail(f"the states hold different tensors: {sorted(set(a) ^ set(b))}")
    return max(float(np.linalg.norm(a[n][key] - b[n][key]) / max(np.linalg.norm(b[n][key]), 1e-30)) for n in b)
