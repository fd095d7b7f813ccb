#!/usr/bin/env python3
"""What a newcomer types first, run as they would type it (issue 47).

usage: newcomer_check.py SPECGEN SOURCE_DIR

Each section is one item of the issue: llama.cpp's offload and download flags answered with the specgen
way (never help with exit 0, never "arguments were not expected"); the README's recipe commands, run on
the bundled pair and the synth presets of the same shapes; stop strings; synth models' one default type
and their early refusal of text; the CPU's word on --vram-budget; the stats JSON's names; --reasoning.
"""
import json
import os
import re
import shlex
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
    # A missing file is the loader's error, not a repository.
    err = expect_error(specgen, ["generate", "-m", "models/no-such.gguf", "-p", "hi"], ["models/no-such.gguf"])
    check("Hugging Face" not in err, f"-m models/no-such.gguf reads as a repository: {err.strip()[:300]}")
    # A real relative path with one slash still loads (models/tiny-target exists from the source dir).
    rc, _, err = run(specgen, ["tokenize", "-m", target, "-p", "x"])
    check(rc == 0, f"tokenize -m {target}: exit {rc}: {err.strip()[:300]}")


# The README's files, and what stands in for them here: the shapes as synth presets where only sizes
# matter (plan, inspect), the bundled pair where text is generated.
README_TARGET = "models/Qwen3-30B-A3B-Q4_K_M.gguf"
README_DRAFT = "models/Qwen3-0.6B-Q8_0.gguf"


def readme_commands(source):
    """The `specgen ...` lines of the README's code blocks, backslash continuations joined."""
    text = open(os.path.join(source, "README.md"), encoding="utf-8").read()
    commands = []
    for block in re.findall(r"```\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("specgen "):
                commands.append(line)
    return commands


def readme_recipe(specgen, source):
    commands = readme_commands(source)
    recipe = [c for c in commands if README_TARGET in c]
    check(len(recipe) >= 3, f"README: the recipe's plan, generate and chat commands not found: {commands}")
    for line in recipe:
        args = shlex.split(line)[1:]
        sub = args[0]
        if sub == "plan":
            args = [{README_TARGET: "synth:qwen3-30b-a3b:q4_k_m", README_DRAFT: "synth:qwen3-0.6b:q8_0"}.get(a, a)
                    for a in args] + ["--host-ram", "256GiB"]
        else:
            args = [{README_TARGET: "models/tiny-target", README_DRAFT: "models/tiny-draft"}.get(a, a)
                    for a in args]
            if "-n" in args:
                args[args.index("-n") + 1] = "8"
            else:
                args += ["-n", "8"]
            args += ["--device", "cpu", "--temp", "0"]
        rc, out, err = run(specgen, args, stdin="hello\n" if sub == "chat" else None, timeout=300)
        check(rc == 0, f"README: `{line}` (as {' '.join(args)}): exit {rc}: {err.strip()[-400:]}")
        if sub == "plan":
            check("how fast" in out and "pins" in out, f"README's plan: no speed or pinned RAM:\n{out}")
        if sub in ("generate", "chat"):
            check("--vram-budget 8GiB is ignored" in err, f"README's {sub} on the CPU: no word on the budget: {err[-400:]}")
    # Every other command line of the README without placeholders (TARGET, MODEL, ...) or a list of
    # commands runs as written.
    for line in commands:
        if README_TARGET in line or "|" in line or re.search(r"\b[A-Z][A-Z_]{2,}\b", line):
            continue
        if shlex.split(line)[1] == "serve":  # runs until stopped: serve_check starts and stops one
            continue
        rc, out, err = run(specgen, shlex.split(line)[1:])
        check(rc == 0, f"README: `{line}`: exit {rc}: {err.strip()[-300:]}")


def synth_models(specgen):
    # One default type: inspect, plan and generate take synth:PRESET as f32, synth:PRESET:TYPE as TYPE.
    rc, out, err = run(specgen, ["inspect", "synth:tiny-moe"])
    check(rc == 0 and "sizes as f32, the default" in out, f"inspect synth:tiny-moe: {rc} {out[-400:]} {err[-200:]}")
    rc, out, err = run(specgen, ["inspect", "synth:tiny-moe:q8_0"])
    check(rc == 0 and "sizes as q8_0, from the model path" in out, f"inspect synth:tiny-moe:q8_0 ignores TYPE: {out[-400:]}")
    expect_error(specgen, ["inspect", "synth:tiny-moe:q8_0", "--type", "q4_k"], ["--type q4_k", "disagree"])
    # Plan's bytes follow the same type: q8_0 takes about 8.5/32 of f32's expert bytes.
    a = json.loads(run(specgen, ["plan", "-m", "synth:tiny-moe", "--vram-budget", "8GiB", "--json"])[1])
    b = json.loads(run(specgen, ["plan", "-m", "synth:tiny-moe:q8_0", "--vram-budget", "8GiB", "--json"])[1])
    ratio = b["resident"]["experts"] / a["resident"]["experts"]
    check(abs(ratio - 34 / 128) < 0.01, f"plan: q8_0 experts are {ratio:.3f} of f32's, want 34/128 (bytes/32 weights)")
    # Text for a model without a tokenizer: refused before gigabytes of weights are made.
    import time
    t0 = time.time()
    expect_error(specgen, ["generate", "-m", "synth:qwen3-235b-a22b", "-p", "hello"],
                 ["synth:qwen3-235b-a22b", "no tokenizer", "--prompt-ids"])
    check(time.time() - t0 < 20, f"generate -m synth:qwen3-235b-a22b -p: took {time.time() - t0:.0f} s to refuse")


def pair_args(target, draft):
    return ["-m", target, "-md", draft, "--device", "cpu", "--temp", "0"]


def stop_strings(specgen, target, draft):
    pair = pair_args(target, draft)
    # A stop string ends the output just before it; -r and --reverse-prompt are the same flag.
    rc, full, err = run(specgen, ["generate"] + pair + ["-p", "def fibonacci(n):", "-n", "48", "--ignore-eos"])
    check(rc == 0, f"generate: exit {rc}: {err[-300:]}")
    body = full[len("def fibonacci(n):"):]
    stop = body.strip()[:3] if body.strip() else "x"
    cut = body.index(stop)
    for flag in ("--stop", "-r", "--reverse-prompt"):
        rc, out, err = run(specgen, ["generate"] + pair + ["-p", "def fibonacci(n):", "-n", "48", "--ignore-eos",
                                                          flag, stop, "--stats", "json"])
        lines = out.rstrip("\n").split("\n")
        stats = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
        text = "\n".join(lines[:-1])
        check(rc == 0 and text == "def fibonacci(n):" + body[:cut], f"{flag} {stop!r}: {text!r}, want "
              f"{'def fibonacci(n):' + body[:cut]!r}")
        check(stats.get("stop_reason") == "stopped" and stats.get("tokens", 99) < 48, f"{flag}: stats {stats}")
    expect_error(specgen, ["generate"] + pair + ["-p", "x", "--print-ids", "--stop", "y"], ["--stop", "--print-ids"])


def stats_words(specgen, target, draft):
    pair = pair_args(target, draft)
    # The text stats: tokens per pass, "ended", no τ.
    rc, out, err = run(specgen, ["generate"] + pair + ["-p", "x = ", "-n", "8", "--stats", "text"])
    check("tokens per pass" in err and "tau" not in err and "ended: " in err and "stopped: stopped" not in err,
          f"text stats: {err[-500:]}")
    # Chat's second turn: the whole conversation is its prompt, and only what the cache lacks is prefilled.
    rc, out, err = run(specgen, ["chat"] + pair + ["-n", "6", "--stats", "json"], stdin="def f(x):\nimport os\n")
    replies = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    check(rc == 0 and len(replies) == 2, f"chat --stats json: {rc} {len(replies)} replies: {err[-300:]}")
    if len(replies) == 2:
        second = replies[1]
        check(0 < second["prompt_tokens_prefilled"] < second["prompt_tokens"], f"chat turn 2: {second}")
    # --vram-budget on a CPU run: said to be ignored.
    rc, out, err = run(specgen, ["generate"] + pair + ["-p", "x = ", "-n", "2", "--vram-budget", "4GiB"])
    check(rc == 0 and "--vram-budget 4GiB is ignored" in err, f"--vram-budget on the CPU: {err[-300:]}")


def chat_words(specgen, target, draft):
    pair = pair_args(target, draft)
    # --reasoning off needs Qwen3's switch; the bundled pair's template has none.
    expect_error(specgen, ["chat"] + pair + ["--reasoning", "off"], ["--reasoning off", "thinking switch"])
    expect_error(specgen, ["chat"] + pair + ["--reasoning", "maybe"], ["--reasoning"])
    # chat -i: chat needs no flag to be interactive.
    err = expect_error(specgen, ["chat", "-m", target, "-i"], ["-i", "always interactive"])
    check("run `specgen chat`" not in err, f"chat -i sends the user to chat: {err}")


def main():
    specgen, source = os.path.abspath(sys.argv[1]), sys.argv[2]
    # Relative paths as a user types them from the source tree (models/tiny-target has one slash).
    os.chdir(source)
    target = "models/tiny-target"
    llama_offload_flags(specgen, target)
    readme_recipe(specgen, source)
    synth_models(specgen)
    stop_strings(specgen, target, "models/tiny-draft")
    stats_words(specgen, target, "models/tiny-draft")
    chat_words(specgen, target, "models/tiny-draft")
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("newcomer checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
