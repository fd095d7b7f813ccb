#!/usr/bin/env python3
"""What a newcomer types first, run as they would type it (issue 47).

usage: newcomer_check.py SPECGEN SOURCE_DIR

Each section is one item of the issue: llama.cpp's offload and download flags answered with the specgen
way (never help with exit 0, never "arguments were not expected").
"""
import os
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(specgen, args, stdin=None, timeout=120):
    p = subprocess.run([specgen] + args, capture_output=True, text=True, input=stdin, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def expect_error(specgen, args, needles, what=None):
    """Runs a command that must fail: exit 1, nothing on stdout, every needle on stderr."""
    what = what or " ".join(args)
    rc, out, err = run(specgen, args)
    check(rc == 1, f"{what}: exit {rc}, want 1 (stdout {out[:200]!r})")
    check(out == "", f"{what}: printed to stdout on error: {out[:200]!r}")
    for n in needles:
        check(n in err, f"{what}: stderr does not say '{n}': {err.strip()[:400]}")
    return err


def llama_offload_flags(specgen, target):
    # The offload flags: the answer is the budget and `specgen plan`, on every command that takes -m.
    for flags in (["--n-cpu-moe", "32"], ["-ncmoe", "32"], ["--cpu-moe"], ["-cmoe"],
                  ["-ot", "exps=CPU"], ["--override-tensor", "exps=CPU"], ["--override-tensor=exps=CPU"]):
        for cmd in ("generate", "chat"):
            err = expect_error(specgen, [cmd, "-m", target, "-p", "hi"] + flags,
                               [flags[0].split("=")[0], "llama.cpp", "--vram-budget", "specgen plan"])
            check("not expected" not in err, f"{flags}: CLI11's wording leaks: {err.strip()[:300]}")
    # -hf: CLI11 would read `-h -f`, print help and exit 0.
    for flags in (["-hf", "Qwen/Qwen3-30B-A3B-GGUF"], ["--hf-repo", "Qwen/Qwen3-30B-A3B-GGUF"],
                  ["-hff", "Qwen3-30B-A3B-Q4_K_M.gguf"]):
        expect_error(specgen, ["generate"] + flags + ["-p", "hi"],
                     [flags[0], "does not download", "-m models/"])
    # -m Org/Repo that is no path here: the same advice, before any loading.
    for args in (["generate", "-m", "Qwen/Qwen3-30B-A3B-GGUF", "-p", "hi"],
                 ["chat", "-m", target, "-md", "Qwen/Qwen3-0.6B"],
                 ["plan", "--model=Qwen/Qwen3-30B-A3B-GGUF", "--vram-budget", "8GiB"]):
        expect_error(specgen, args, ["Qwen/Qwen3-", "does not download", "Hugging Face"])
    # A real relative path with one slash still loads (models/tiny-target exists from the source dir).
    rc, _, err = run(specgen, ["tokenize", "-m", target, "-p", "x"])
    check(rc == 0, f"tokenize -m {target}: exit {rc}: {err.strip()[:300]}")


def main():
    specgen, source = os.path.abspath(sys.argv[1]), sys.argv[2]
    # Relative paths as a user types them from the source tree (models/tiny-target has one slash).
    os.chdir(source)
    target = "models/tiny-target"
    llama_offload_flags(specgen, target)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("newcomer checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
