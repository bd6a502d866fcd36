#!/usr/bin/env python3
"""Compares the device code of a CUDA source between two versions, without a GPU.

A refactor of a kernel (parts moved into inlined device functions, names changed) should leave the
code the GPU runs as it was. This compiles both versions to PTX with the project's device flags and,
for every kernel (PTX entry), compares
  - the instructions: "same" (the same instructions in the same order, up to virtual register
    names), "same opcodes" (as many of each instruction, in another order or on other registers:
    likely the same computation, not a proof of it), or "differs" (with the counts that changed);
  - what ptxas reports: registers, stack frame and spilled bytes.
Headers come from the working tree for both versions (only FILE itself changes), unless --tree.

  scripts/dev/ptx_compare.py [--base REV [--tree] | --before OLD.cu] FILE.cu
    --base REV     the old version is `git show REV:FILE` (default HEAD)
    --tree         with --base: the old version compiles in REV's whole tree (`git archive REV`), its
                   headers too, for a change that touched a header the file includes
    --before OLD   the old version is the file OLD
  Architecture: sm_90a for files named *_sm90a.cu, else sm_90 (--arch to choose).
One JSON line per kernel, then a summary line. Exit 0 when every kernel is "same" with the same
resources; 1 otherwise (same opcodes, differs, changed resources, or a kernel in one version only);
2 on bad input or a failed compile (the compiler's message on stderr).
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGISTER = re.compile(r"%(rd|rs|r|fd|f|p|h|hh|b)(\d+)\b")
ENTRY = re.compile(r"^(?:\.visible |\.weak )?\.entry (\S+?)\(")
# An anonymous namespace's mangled name carries a hash of the file's path (and its length): the two
# versions compile from different paths, so both read as one name.
ANONYMOUS = re.compile(r"\d+_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}")
PTXAS_ENTRY = re.compile(r"Compiling entry function '(\S+)' for")


def fail(message):
    print(f"ptx_compare: {message}", file=sys.stderr)
    sys.exit(2)


def nvcc_path():
    for candidate in (os.environ.get("CUDACXX"), "/usr/local/cuda/bin/nvcc", shutil.which("nvcc")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    fail("no CUDA compiler (set CUDACXX, or install the CUDA toolkit at /usr/local/cuda)")


def compile_ptx(source, arch, out_dir, tag, root=ROOT):
    """PTX of `source` for `arch`, with the include paths the project's CUDA sources use (the
    project's headers from `root`)."""
    nvcc = nvcc_path()
    includes = ["-I" + root]
    for extra in ("/usr/include/hdf5/serial", "/usr/lib/x86_64-linux-gnu/openmpi/include"):
        if os.path.isdir(extra):
            includes.append("-isystem=" + extra)
    ptx = os.path.join(out_dir, tag + ".ptx")
    cmd = [nvcc, *includes, "-DMPICH_SKIP_MPICXX=1", "-DOMPI_SKIP_MPICXX=1", "-O3", "-DNDEBUG", "-std=c++20",
           "--expt-relaxed-constexpr", f"-arch=sm_{arch}", "-x", "cu", "--ptx", source, "-o", ptx]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        fail(f"{tag}: nvcc failed on {source} (exit {run.returncode})")
    return ptx


def instructions(ptx):
    """{kernel: [instruction, ...]} with comments and declarations dropped and virtual registers
    renamed in order of first use, so that naming alone never makes two versions differ."""
    kernels, current, names = {}, None, {}
    for raw in open(ptx):
        line = ANONYMOUS.sub("_GLOBAL__N_", raw.split("//")[0].strip())
        match = ENTRY.match(line)
        if match:
            current, names = match.group(1), {}
            kernels[current] = []
            continue
        if current is None or not line or line.startswith(".") or line.endswith(":") or line in "{}()":
            continue

        def rename(m):
            key = m.group(0)
            names.setdefault(key, f"%{m.group(1)}{len(names)}")
            return names[key]

        kernels[current].append(REGISTER.sub(rename, line))
    return kernels


def resources(ptx, arch):
    """{kernel: {registers, stack_bytes, spill_store_bytes, spill_load_bytes}} from ptxas -v."""
    ptxas = os.path.join(os.path.dirname(nvcc_path()), "ptxas")
    run = subprocess.run([ptxas, f"-arch=sm_{arch}", "-v", ptx, "-o", os.devnull], capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        fail(f"ptxas failed on {ptx} (exit {run.returncode})")
    found, current = {}, None
    for line in run.stderr.splitlines():
        match = PTXAS_ENTRY.search(line)
        if match:
            current = ANONYMOUS.sub("_GLOBAL__N_", match.group(1))
            found[current] = {}
            continue
        if current is None:
            continue
        for key, pattern in (("registers", r"Used (\d+) registers"), ("stack_bytes", r"(\d+) bytes stack frame"),
                             ("spill_store_bytes", r"(\d+) bytes spill stores"),
                             ("spill_load_bytes", r"(\d+) bytes spill loads")):
            value = re.search(pattern, line)
            if value:
                found[current][key] = int(value.group(1))
    return found


def opcode(instruction):
    words = instruction.split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def compare_kernel(before, after):
    """'same', 'same opcodes' or 'differs', and the opcode counts that changed."""
    if before == after:
        return "same", {}
    old = collections.Counter(map(opcode, before))
    new = collections.Counter(map(opcode, after))
    changed = {op: new[op] - old[op] for op in sorted(set(old) | set(new)) if new[op] != old[op]}
    return ("differs", changed) if changed else ("same opcodes", {})


def old_tree(args, out_dir):
    """REV's whole tree extracted under out_dir/tree, and the old FILE's path in it."""
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode != 0:
        fail(f"--tree: not in a git repository: {top.stderr.strip()}")
    tree = os.path.join(out_dir, "tree")
    os.makedirs(tree)
    archive = subprocess.run(["git", "-C", top.stdout.strip(), "archive", args.base], capture_output=True)
    if archive.returncode != 0:
        fail(f"git archive {args.base} failed: {archive.stderr.decode(errors='replace').strip()}")
    untar = subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, capture_output=True)
    if untar.returncode != 0:
        fail(f"--tree: extracting {args.base}'s tree failed: {untar.stderr.decode(errors='replace').strip()}")
    old = os.path.join(tree, os.path.relpath(os.path.realpath(args.file), os.path.realpath(top.stdout.strip())))
    if not os.path.isfile(old):
        fail(f"--tree: {args.file} is not in {args.base}'s tree")
    return tree, old


def old_version(args, out_dir):
    if args.before:
        if not os.path.isfile(args.before):
            fail(f"--before {args.before}: no such file")
        return args.before
    rel = os.path.relpath(os.path.abspath(args.file), os.getcwd())
    run = subprocess.run(["git", "show", f"{args.base}:./{rel}"], capture_output=True)
    if run.returncode != 0:
        fail(f"git show {args.base}:{rel} failed: {run.stderr.decode(errors='replace').strip()}")
    path = os.path.join(out_dir, "before_" + os.path.basename(args.file))
    with open(path, "wb") as f:
        f.write(run.stdout)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("file", help="the CUDA source as it is now")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--base", default="HEAD", help="git revision of the old version (default HEAD)")
    source.add_argument("--before", help="a file holding the old version")
    parser.add_argument("--tree", action="store_true", help="with --base: compile the old version in REV's tree")
    parser.add_argument("--arch", help="90 or 90a (default: 90a for *_sm90a.cu, else 90)")
    args = parser.parse_args()
    if args.tree and args.before:
        fail("--tree goes with --base, not --before")
    if not os.path.isfile(args.file):
        fail(f"{args.file}: no such file")
    arch = args.arch or ("90a" if args.file.endswith("_sm90a.cu") else "90")
    if arch not in ("90", "90a"):
        fail(f"--arch {arch}: use 90 or 90a")

    with tempfile.TemporaryDirectory(prefix="ptx_compare_") as tmp:
        if args.tree:
            tree, old = old_tree(args, tmp)
            ptx_before = compile_ptx(old, arch, tmp, "before", root=tree)
        else:
            ptx_before = compile_ptx(old_version(args, tmp), arch, tmp, "before")
        ptx_after = compile_ptx(args.file, arch, tmp, "after")
        code = (instructions(ptx_before), instructions(ptx_after))
        used = (resources(ptx_before, arch), resources(ptx_after, arch))

    verdicts = collections.Counter()
    for kernel in sorted(set(code[0]) | set(code[1])):
        line = {"kernel": kernel}
        if kernel not in code[0] or kernel not in code[1]:
            line["verdict"] = "only before" if kernel in code[0] else "only after"
        else:
            line["verdict"], changed = compare_kernel(code[0][kernel], code[1][kernel])
            if changed:
                line["opcode_changes"] = changed
            line["before"], line["after"] = used[0].get(kernel, {}), used[1].get(kernel, {})
            if line["before"] != line["after"]:
                line["verdict"] += ", resources changed"
        verdicts[line["verdict"]] += 1
        print(json.dumps(line))
    clean = set(verdicts) <= {"same"}
    print(json.dumps({"file": args.file, "arch": f"sm_{arch}", "kernels": sum(verdicts.values()),
                      "verdicts": dict(verdicts), "unchanged": clean}))
    sys.exit(0 if clean else 1)


if __name__ == "__main__":
    main()
