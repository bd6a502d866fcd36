"""cmake/git_commit.cmake, which writes the commit `tetra --version` prints: on a clean git tree the
HEAD commit; with a tracked file edited (staged or not) the commit and "-dirty"; untracked files do not
count; a tree without .git (a tarball) and a tarball unpacked inside another repository: "unknown".
Each case runs the script in a scratch tree and reads the generated source."""
import os, re, shutil, subprocess, sys

script, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
failures = []


def git(tree, *args):
    return subprocess.run(["git", "-C", tree, *args], check=True, env=GIT_ENV, capture_output=True,
                          text=True).stdout.strip()


def commit_of(tree, out_name):
    out = os.path.join(work, out_name + ".cpp")
    subprocess.run(["cmake", f"-DSOURCE_DIR={tree}", f"-DOUT={out}", "-P", script], check=True, env=GIT_ENV)
    text = open(out).read()
    m = re.search(r'build_git_commit\(\) \{ return "([^"]*)"; \}', text)
    if not m:
        print(f"FAIL: {out} does not define build_git_commit():\n{text}")
        sys.exit(1)
    return m.group(1)


def expect(name, got, want):
    status = "ok" if got == want else "FAIL"
    print(f"{status}: {name}: {got!r} (want {want!r})")
    if got != want:
        failures.append(name)


repo = os.path.join(work, "repo")
os.makedirs(repo)
git(repo, "init", "-q")
with open(os.path.join(repo, "a.txt"), "w") as f:
    f.write("one\n")
git(repo, "add", "a.txt")
git(repo, "commit", "-q", "-m", "one")
head = git(repo, "rev-parse", "HEAD")
assert re.fullmatch(r"[0-9a-f]{40}", head), head

expect("clean tree", commit_of(repo, "clean"), head)
with open(os.path.join(repo, "untracked.txt"), "w") as f:
    f.write("x\n")
expect("untracked file only", commit_of(repo, "untracked"), head)
with open(os.path.join(repo, "a.txt"), "w") as f:
    f.write("two\n")
expect("tracked file edited", commit_of(repo, "edited"), head + "-dirty")
git(repo, "add", "a.txt")
expect("edit staged", commit_of(repo, "staged"), head + "-dirty")
git(repo, "commit", "-q", "-m", "two")
expect("committed again", commit_of(repo, "committed"), git(repo, "rev-parse", "HEAD"))

# The output is rewritten only when its text changes (an unchanged commit recompiles nothing).
out = os.path.join(work, "committed.cpp")
before = os.stat(out).st_mtime_ns
os.utime(out, ns=(before - 10**9, before - 10**9))
commit_of(repo, "committed")
expect("unchanged output left alone", os.stat(out).st_mtime_ns, before - 10**9)

tarball = os.path.join(work, "tarball")
shutil.copytree(repo, tarball, ignore=shutil.ignore_patterns(".git"))
expect("tarball", commit_of(tarball, "tarball"), "unknown")
nested = os.path.join(repo, "vendor", "tetra")
shutil.copytree(tarball, nested)
expect("tarball inside another repository", commit_of(nested, "nested"), "unknown")

if failures:
    print("FAIL:", ", ".join(failures))
    sys.exit(1)
print("ok")
