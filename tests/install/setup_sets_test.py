"""scripts/setup.sh installs two sets: without arguments what building and training need, with --test
that and the test suite's packages. --print shows a set without installing anything. Checks: the
plain set has none of the test-only packages and every build package; --test adds them (SLURM and
Chromium left out by TETRA_SETUP_SLURM=0 / TETRA_SETUP_CHROMIUM=0); an unknown argument is a usage
error (exit 2) that installs nothing; scripts/test.sh installs with --test and scripts/run.sh
without."""
import os, re, subprocess, sys

source = sys.argv[1]
setup = os.path.join(source, "scripts", "setup.sh")
BUILD = {"build-essential", "cmake", "ninja-build", "libopenmpi-dev", "openmpi-bin", "libhdf5-dev", "libyaml-cpp-dev",
         "libopenblas-dev", "nlohmann-json3-dev", "libcli11-dev", "pkg-config", "libpcre2-dev", "libicu-dev",
         "libsentencepiece-dev", "zlib1g-dev", "libzstd-dev"}
TEST_ONLY = {"libgtest-dev", "python3-torch", "python3-numpy", "python3-h5py", "python3-pyflakes", "munge",
             "slurmctld", "slurmd", "slurm-client", "chromium"}
failures = []


def packages(*args, **env):
    r = subprocess.run(["bash", setup, "--print", *args], capture_output=True, text=True,
                       env=dict(os.environ, **env))
    if r.returncode != 0:
        print(f"FAIL: setup.sh --print {' '.join(args)} exited {r.returncode}: {r.stderr}")
        sys.exit(1)
    return set(r.stdout.split())


def check(name, ok, detail):
    print(f"{'ok' if ok else 'FAIL'}: {name}: {detail}")
    if not ok:
        failures.append(name)


plain = packages()
check("build set has the build packages", BUILD <= plain, sorted(BUILD - plain) or "all")
check("build set has no test package", not plain & TEST_ONLY, sorted(plain & TEST_ONLY) or "none")
full = packages("--test")
check("--test adds the test packages", TEST_ONLY <= full and plain <= full, sorted((TEST_ONLY | plain) - full) or "all")
lean = packages("--test", TETRA_SETUP_SLURM="0", TETRA_SETUP_CHROMIUM="0")
check("--test without SLURM and Chromium", not lean & {"munge", "slurmctld", "slurmd", "slurm-client", "chromium"}
      and "python3-torch" in lean, sorted(lean))

r = subprocess.run(["bash", setup, "--tset"], capture_output=True, text=True)
check("unknown argument", r.returncode == 2 and "--tset" in r.stderr and "installing" not in r.stdout,
      f"exit {r.returncode}, stderr {r.stderr.strip()!r}")


def setup_calls(script):
    text = open(os.path.join(source, "scripts", script)).read()
    return re.findall(r"^\s*scripts/setup\.sh([^\n#]*)", text, re.M)


check("test.sh installs the test set", [c.strip() for c in setup_calls("test.sh")] == ["--test"], setup_calls("test.sh"))
check("run.sh installs the build set", [c.strip() for c in setup_calls("run.sh")] == [""], setup_calls("run.sh"))
if failures:
    print("FAIL:", ", ".join(failures))
    sys.exit(1)
print("ok")
