"""The versioned install: `tetra --version`, `cmake --install` into a prefix, and the .deb of CPack.

1. `tetra --version` exits 0 and prints the project version, the commit the build was made from (40
   hex digits and perhaps -dirty, or "unknown" outside git) and a CUDA, NCCL and cuDNN line.
2. `cmake --install BUILD --prefix P`: P/bin/tetra, every configs/*.yaml under P/share/tetra/configs
   byte for byte, README.md and docs/*.md under P/share/doc/tetra.
3. `cpack -G DEB` makes tetra_VERSION_ARCH.deb; its control fields name the package and version, and
   every shared library the executable needs (readelf NEEDED, resolved by ldd, owned by a Debian
   package per dpkg -S) is covered by Depends: the owning package, a virtual package it provides, the
   soname itself as an alternative, or a metapackage that depends on the owner; openmpi-bin (mpirun)
   is there too.
4. The .deb unpacked into a scratch root (dpkg -x): the installed tetra prints the same version, and
   in an empty working folder `tetra data prepare` makes data/tiny/{train,val}.h5 and
   `mpirun -np 2 ROOT/usr/bin/tetra train ROOT/usr/share/tetra/configs/tiny.yaml` (a few steps) trains:
   exit 0 and a metrics.jsonl with every step.

   A CUDA build's CUDA, cuBLAS, cuDNN and NCCL libraries come from the toolkit's folders, which no
   Debian package owns: they must resolve inside GPU_LIBRARY_DIRS (the build's own), as the package
   documents, and are listed; any other library must be declared as above.

Usage: package_test.py TETRA BUILD_DIR SOURCE_DIR PROJECT_VERSION WORK [GPU_LIBRARY_DIRS|none]
       (GPU_LIBRARY_DIRS: ':'-separated folders)"""
import filecmp, glob, json, os, re, shutil, subprocess, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from script_util import ENV, LICENCE_TEXTS  # noqa: E402

tetra, build, source, version, work = sys.argv[1:6]
gpu_dirs = [os.path.realpath(d) for d in (sys.argv[6] if len(sys.argv) > 6 else "none").split(":")
            if d and d != "none"]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
STEPS = 4


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def run(cmd, **kw):
    r = subprocess.run(cmd, env=kw.pop("env", ENV), capture_output=True, text=True, **kw)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def check_version_text(text, where):
    lines = text.strip().splitlines()
    if not lines or lines[0] != f"tetra {version}":
        fail(f"{where}: first line {lines[:1]}, want 'tetra {version}'")
    fields = dict(l.split(": ", 1) for l in lines[1:] if ": " in l)
    commit = fields.get("git commit", "")
    if not re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", commit):
        fail(f"{where}: git commit {commit!r} is neither 40 hex digits (-dirty) nor unknown")
    in_git = subprocess.run(["git", "-C", source, "rev-parse", "HEAD"], capture_output=True, text=True)
    if commit != "unknown" and in_git.returncode == 0 and commit[:40] != in_git.stdout.strip():
        # The build's commit, not necessarily today's HEAD: only warn (a commit since the build).
        print(f"note: built from {commit}, the source tree is now at {in_git.stdout.strip()}")
    for lib in ("CUDA", "NCCL", "cuDNN"):
        if not fields.get(lib):
            fail(f"{where}: no '{lib}:' line in\n{text}")
    print(f"ok: {where}:\n{text.strip()}", flush=True)


# 1. the build's executable
check_version_text(run([tetra, "--version"]), "tetra --version")
built_version = run([tetra, "--version"])

# 2. cmake --install into a prefix
prefix = os.path.join(work, "prefix")
run(["cmake", "--install", build, "--prefix", prefix])
if not os.access(os.path.join(prefix, "bin", "tetra"), os.X_OK):
    fail(f"{prefix}/bin/tetra is missing or not executable")
configs = sorted(glob.glob(os.path.join(source, "configs", "*.yaml")))
for c in configs:
    installed = os.path.join(prefix, "share", "tetra", "configs", os.path.basename(c))
    if not os.path.exists(installed) or not filecmp.cmp(c, installed, shallow=False):
        fail(f"{installed} is missing or differs from {c}")
docs = ["README.md"] + [os.path.join("docs", os.path.basename(d)) for d in glob.glob(os.path.join(source, "docs", "*.md"))]
for d in docs:
    if not os.path.exists(os.path.join(prefix, "share", "doc", "tetra", os.path.basename(d))):
        fail(f"{prefix}/share/doc/tetra/{os.path.basename(d)} is missing")
print(f"ok: cmake --install: bin/tetra, {len(configs)} configs, {len(docs)} docs", flush=True)

# 3. the .deb and its dependencies
pkg_dir = os.path.join(work, "deb")
run(["cpack", "-G", "DEB", "-B", pkg_dir, "--config", os.path.join(build, "CPackConfig.cmake")])
debs = glob.glob(os.path.join(pkg_dir, "*.deb"))
if len(debs) != 1:
    fail(f"cpack made {debs}, want one .deb")
deb = debs[0]
arch = run(["dpkg", "--print-architecture"]).strip()
if os.path.basename(deb) != f"tetra_{version}_{arch}.deb":
    fail(f"package file {os.path.basename(deb)}, want tetra_{version}_{arch}.deb")
control = {k: run(["dpkg-deb", "-f", deb, k]).strip() for k in ("Package", "Version", "Depends")}
if control["Package"] != "tetra" or control["Version"] != version:
    fail(f"control: {control}")
alternatives = [set(a.split("(")[0].strip() for a in dep.split("|")) for dep in control["Depends"].split(",")]
declared = set().union(*alternatives)
print(f"ok: {os.path.basename(deb)} Depends: {control['Depends']}", flush=True)
if "openmpi-bin" not in declared:
    fail("Depends lacks openmpi-bin (mpirun)")



def package_depends(name):
    """The packages (any alternative) an installed package depends on; empty if it is not installed."""
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Depends},${Pre-Depends}", name], capture_output=True, text=True)
    return {a.split("(")[0].split(":")[0].strip() for a in re.split(r"[,|]", r.stdout)} if r.returncode == 0 else set()


root = os.path.join(work, "root")
run(["dpkg", "-x", deb, root])
installed = os.path.join(root, "usr", "bin", "tetra")
needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", run(["readelf", "-d", installed]))
ldd = run(["ldd", installed])
resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
# The dynamic loader is listed by its path alone: /lib64/ld-linux-x86-64.so.2 (0x…).
resolved.update({os.path.basename(p): p for p in re.findall(r"^\s*(/\S+) \(0x", ldd, re.M)})
for soname in needed:
    path = resolved.get(soname)
    if path is None or path == "not":
        fail(f"ldd does not resolve {soname} of the installed tetra")
    owner = None
    for candidate in (path, os.path.realpath(path)):
        r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if r.returncode == 0:
            owner = r.stdout.split(":")[0].strip()
            break
    if owner is None and any(os.path.realpath(path).startswith(d + os.sep) for d in gpu_dirs):
        print(f"ok: {soname} <- the CUDA toolkit's libraries ({os.path.dirname(path)}), a CUDA build's requirement")
        continue
    if owner is None:
        fail(f"{soname} ({path}) belongs to no Debian package: the .deb cannot declare it")
    provides = run(["dpkg-query", "-W", "-f", "${Provides}", owner])
    names = {owner, soname} | {p.split("(")[0].strip() for p in provides.split(",") if p.strip()}
    # or a metapackage that Depends names and that depends on the owner (libopenblas0 on
    # libopenblas0-pthread | libopenblas0-openmp | libopenblas0-serial).
    via = {d for d in declared if names & package_depends(d)}
    if not names & declared and not via:
        fail(f"{soname} comes from {owner} (provides: {provides or 'nothing'}), which Depends does not name: "
             f"{control['Depends']}")
    print(f"ok: {soname} <- {owner} (declared{' via ' + ', '.join(sorted(via)) if via and owner not in declared else ''})")
for expected in ("libopenmpi3", "libhdf5-103-1", "libyaml-cpp0.7", "libpcre2-8-0", "libsentencepiece0", "libzstd1"):
    if expected not in declared:
        fail(f"Depends lacks {expected}")

# 4. the unpacked package trains from its installed config
check_version_text(run([installed, "--version"]), "installed tetra --version")
if run([installed, "--version"]) != built_version:
    fail("the installed tetra's --version differs from the build's")
config = os.path.join(root, "usr", "share", "tetra", "configs", "tiny.yaml")
if not os.path.exists(config):
    fail(f"{config} missing from the package")
if not os.path.exists(os.path.join(root, "usr", "share", "doc", "tetra", "README.md")):
    fail("README.md missing from the package")
cwd = os.path.join(work, "use")
os.makedirs(os.path.join(cwd, "data", "tiny"))
run([installed, "data", "prepare", "--tokenizer", "byte", "--input", LICENCE_TEXTS[0], "--out", "data/tiny/train.h5"],
    cwd=cwd)
run([installed, "data", "prepare", "--tokenizer", "byte", "--input", LICENCE_TEXTS[1], "--out", "data/tiny/val.h5"],
    cwd=cwd)
mpirun = shutil.which("mpirun") or fail("mpirun not found")
run([mpirun, "--oversubscribe", "--bind-to", "none", "-np", "2", installed, "train", config,
     "--set", f"train.steps={STEPS}", "--set", "optimizer.warmup_steps=2", "--set", "train.eval_every=2", "--set", "checkpoint.every=2"], cwd=cwd)
metrics = os.path.join(cwd, "runs", "tiny", "metrics.jsonl")
with open(metrics) as f:
    steps = sorted(json.loads(l)["step"] for l in f if l.strip())
if len(steps) != STEPS:
    fail(f"{metrics} has steps {steps}, want {STEPS} steps")
print(f"ok: the installed tetra trained {config} for {STEPS} steps in {cwd}")
print("ok")
