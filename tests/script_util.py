"""Shared pieces of the script tests that drive `tetra train`: the environment they run in, the
licence-text dataset they train on, the GPUs they can see, and the per-step losses of a run."""
import json, os, shutil, subprocess

# Open MPI as root, NCCL without NVLink multicast, one BLAS thread per rank.
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
           NCCL_NVLS_ENABLE="0")


def licence_dataset(tetra, work):
    """WORK/train.h5: GPL-3 and Apache-2.0, byte-tokenized (made once)."""
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "train.h5")
    if not os.path.exists(data):
        subprocess.run([tetra, "data", "prepare", "--tokenizer", "byte", "--out", data, "--input",
                        "/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"],
                       check=True, env=ENV, stdout=subprocess.DEVNULL)
    return data


def gpu_count():
    if shutil.which("nvidia-smi") is None:
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return len([l for l in r.stdout.splitlines() if l.startswith("GPU")]) if r.returncode == 0 else 0


def step_losses(run_dir):
    """The per-step training losses of RUN_DIR/metrics.jsonl, in step order."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(l) for l in f]
    return [r["loss"] for r in sorted(rows, key=lambda r: r["step"])]
