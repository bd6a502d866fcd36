"""Shared pieces of the script tests that drive `tetra train`: the environment they run in, the
licence-text dataset they train on, the GPUs they can see, the modules the tests' Python must have,
and the per-step losses of a run. Standard library only: a test imports this first, so that a
missing module is reported (and a GPU test skipped) before anything else is imported."""
import importlib.util, json, os, shutil, subprocess, sys

# Open MPI as root, NCCL without NVLink multicast, one BLAS thread per rank.
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
           NCCL_NVLS_ENABLE="0")


# The training text of the script tests: two licence texts kept in the repository (the same bytes on
# every machine, whatever its distribution ships under /usr/share/common-licenses).
TEXT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "text")
LICENCE_TEXTS = [os.path.join(TEXT_DIR, "GPL-3"), os.path.join(TEXT_DIR, "Apache-2.0")]

# Exit code of a skipped test (ctest SKIP_RETURN_CODE of every gpu-labelled test).
SKIP = 77


def require_modules(*names):
    """Imports nothing, but checks that the tests' Python has every module NAMES. A missing one is a
    failure (exit 1) naming the interpreter and how to choose another; in a GPU test (TETRA_TEST_GPU=1,
    set by tests/CMakeLists.txt for the gpu label) it is a skip (exit 77) with the same reason, which
    scripts/gpu_suite.sh lists."""
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if not missing:
        return
    why = (f"{sys.executable} lacks the Python module(s) {', '.join(missing)}; reconfigure with "
           f"-DTETRA_PYTHON=/path/to/a/python3 that has them (tests/CMakeLists.txt)")
    if os.environ.get("TETRA_TEST_GPU") == "1":
        print(f"skipped: {why}", flush=True)
        sys.exit(SKIP)
    print(f"FAIL: {why}", flush=True)
    sys.exit(1)


def licence_dataset(tetra, work):
    """WORK/train.h5: GPL-3 and Apache-2.0, byte-tokenized (made once)."""
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "train.h5")
    if not os.path.exists(data):
        subprocess.run([tetra, "data", "prepare", "--tokenizer", "byte", "--out", data, "--input"] + LICENCE_TEXTS,
                       check=True, env=ENV, stdout=subprocess.DEVNULL)
    return data


def require_gpus(need=1):
    """The number of GPUs visible; a skip (exit 77, the reason printed for scripts/gpu_suite.sh) when
    fewer than NEED are."""
    gpus = gpu_count()
    if gpus < need:
        print(f"{gpus} GPU(s) visible, {need} needed: skipped", flush=True)
        sys.exit(SKIP)
    return gpus


def licence_run_config(tetra, work, sections, seed=5, name="base"):
    """WORK/cfg.yaml for runs under WORK/runs (cleared first) that train on the licence dataset:
    SECTIONS (YAML lines: model, train, optimizer, ...) with the run section (NAME, SEED, output under
    WORK/runs), the shuffled licence dataset and a quiet log. Returns the config's path."""
    shutil.rmtree(os.path.join(work, "runs"), ignore_errors=True)
    data = licence_dataset(tetra, work)
    cfg = os.path.join(work, "cfg.yaml")
    with open(cfg, "w") as f:
        f.write(f"run: {{name: {name}, output_dir: {work}/runs, seed: {seed}}}\n{sections.strip()}\n"
                f"data: {{train: {data}, shuffle: true}}\nlog: {{every: 100}}\n")
    return cfg


def metrics_rows(run_dir):
    """The rows of RUN_DIR/metrics.jsonl, in step order."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return sorted((json.loads(l) for l in f), key=lambda r: r["step"])


def gpu_count():
    if shutil.which("nvidia-smi") is None:
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return len([l for l in r.stdout.splitlines() if l.startswith("GPU")]) if r.returncode == 0 else 0


def step_losses(run_dir):
    """The per-step training losses of RUN_DIR/metrics.jsonl, in step order."""
    return [r["loss"] for r in metrics_rows(run_dir)]
