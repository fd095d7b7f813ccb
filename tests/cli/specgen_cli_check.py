#!/usr/bin/env python3
"""Runs the `specgen` binary on the bundled pair (models/tiny-target drafted by models/tiny-draft).

usage: specgen_cli_check.py SPECGEN SOURCE_DIR

Checks: greedy `generate` prints the same text with and without -md, and --stats json prints one
parseable line with the docs/design.md §7 keys; `chat` answers piped turns (and /stats) and exits 0 at EOF;
bad input (a missing model, a draft of another vocabulary, a prompt longer than -c, bad flags) exits
with status 1 and a message naming the problem on stderr, never a crash. The bundled pair is
committed, so its absence fails (exit 1) rather than skipping.
"""
import atexit
import json
import os
import shutil
import tempfile
import subprocess
import sys

DESIGN_KEYS = ["version", "device", "target", "draft", "prompt_tokens", "prompt_tokens_prefilled", "tokens", "passes", "drafted", "accepted",
               "acceptance_rate", "tokens_per_pass",
               "tokens_per_second", "h2d_bytes", "h2d_bytes_per_token", "expert_cache_hit_rate",
               "mean_distinct_experts", "time"]
# Offload counters: bytes 0 while nothing streams (every run here is fully resident), and the cache's
# hit rate null (no cache was consulted).
OFFLOAD_KEYS = ["h2d_bytes", "h2d_bytes_per_token"]
TIME_KEYS = ["prefill", "ttft", "draft", "verify", "accept"]

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(specgen, args, stdin=None):
    p = subprocess.run([specgen] + args, input=stdin, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def split_stats(stdout):
    """The generated text and the JSON object of the last line."""
    lines = stdout.rstrip("\n").split("\n")
    try:
        return "\n".join(lines[:-1]), json.loads(lines[-1])
    except json.JSONDecodeError:
        return stdout, None


def main():
    specgen, source = sys.argv[1], sys.argv[2]
    target = os.path.join(source, "models", "tiny-target")
    draft = os.path.join(source, "models", "tiny-draft")
    mismatched = os.path.join(source, "tests", "data", "models", "llama-gqa")
    if not all(os.path.exists(os.path.join(d, "model.safetensors")) for d in (target, draft)):
        print("FAIL: the committed bundled pair is missing", file=sys.stderr)
        return 1

    # generate: greedy with and without a draft (and the adaptive controller) give the same text.
    prompt = "def fibonacci(n):\n    "
    base = ["generate", "-m", target, "-p", prompt, "-n", "40", "--temp", "0", "--ignore-eos",
            "--stats", "json"]
    outputs = {}
    # --gemv-order auto (the default) and fma are accepted on every device (the CPU has one order).
    # The draft length's rule each run reports: greedy output does not depend on k, so the adaptive
    # choice is the default there ("default").
    rules = {"plain": "none", "k4": "fixed", "adaptive": "adaptive", "default": "adaptive",
             "k4 fma": "fixed", "k4 auto": "fixed"}
    for name, extra in [("plain", []), ("k4", ["-md", draft, "--draft-max", "4", "--draft-fixed"]),
                        ("adaptive", ["-md", draft, "--draft-max", "8", "--draft-adaptive"]),
                        ("default", ["-md", draft]),
                        ("k4 fma", ["-md", draft, "--draft-max", "4", "--draft-fixed", "--gemv-order", "fma"]),
                        ("k4 auto", ["-md", draft, "--draft-max", "4", "--draft-fixed", "--gemv-order", "auto"])]:
        rc, out, err = run(specgen, base + extra)
        check(rc == 0, f"generate {name}: exit {rc}, stderr: {err.strip()}")
        text, stats = split_stats(out)
        check(stats is not None, f"generate {name}: last stdout line is not JSON: {out[-200:]!r}")
        if stats is None:
            continue
        for key in DESIGN_KEYS:
            check(key in stats, f"generate {name}: stats JSON lacks '{key}'")
        for key in TIME_KEYS:
            check(key in stats.get("time", {}), f"generate {name}: stats JSON lacks 'time.{key}'")
        t = stats.get("time", {})
        check(t.get("ttft", 0) > 0 and t.get("ttft", 0) >= t.get("prefill", 0),
              f"generate {name}: time to first token {t.get('ttft')!r} is not after the prefill {t.get('prefill')!r}")
        for key in OFFLOAD_KEYS:
            check(stats.get(key) == 0, f"generate {name}: {key} {stats.get(key)!r} with nothing streamed")
        check("expert_cache_hit_rate" in stats and stats["expert_cache_hit_rate"] is None,
              f"generate {name}: expert_cache_hit_rate {stats.get('expert_cache_hit_rate')!r}, want null")
        check(stats.get("device") in ("cpu", "cuda") and stats.get("target") == target
              and str(stats.get("version", "")).startswith("0."),
              f"generate {name}: device/target/version {stats.get('device')!r} {stats.get('target')!r} "
              f"{stats.get('version')!r}")
        check((stats.get("draft") is None) == (name == "plain"), f"generate {name}: draft {stats.get('draft')!r}")
        check(stats.get("prompt_tokens_prefilled") == stats.get("prompt_tokens"),
              f"generate {name}: a fresh run prefilled {stats.get('prompt_tokens_prefilled')} of "
              f"{stats.get('prompt_tokens')} prompt tokens")
        check((stats.get("acceptance_rate") is None) == (stats.get("drafted") == 0),
              f"generate {name}: acceptance_rate {stats.get('acceptance_rate')!r} with {stats.get('drafted')} drafted")
        check(stats.get("tokens") == 40, f"generate {name}: tokens {stats.get('tokens')} != 40")
        check(text.startswith(prompt), f"generate {name}: output does not start with the prompt")
        check(stats.get("draft_length") == rules[name],
              f"generate {name}: draft_length {stats.get('draft_length')!r}, want {rules[name]!r}")
        if name == "plain":
            check(stats.get("drafted") == 0, f"generate plain drafted {stats.get('drafted')}")
        else:
            # The adaptive controller may stop drafting early when its first drafts fail.
            check(stats.get("drafted", 0) > 0 and (rules[name] == "adaptive" or stats.get("accepted", 0) > 0),
                  f"generate {name}: drafted {stats.get('drafted')} accepted {stats.get('accepted')}")
            tau = stats.get("tokens_per_pass", 0)
            check(abs(tau - stats["tokens"] / stats["passes"]) < 1e-9 if stats.get("passes") else False,
                  f"generate {name}: tau {tau} != tokens/passes")
        outputs[name] = text
    # No -m: the bundled pair (target and draft) runs, as the README's first steps do.
    rc, out, err = run(specgen, [a for a in base if a not in ("-m", target)])
    check(rc == 0, f"generate without -m: exit {rc}, stderr: {err.strip()}")
    text, stats = split_stats(out)
    check(stats is not None and stats.get("draft_max", 0) > 0,
          f"generate without -m: the bundled draft did not run: {out[-200:]!r}")
    outputs["no -m"] = text
    if "plain" in outputs:
        for name in ("k4", "adaptive", "default", "k4 fma", "k4 auto", "no -m"):
            check(outputs.get(name) == outputs["plain"],
                  f"generate {name} text differs from plain:\n{outputs.get(name)!r}\n{outputs['plain']!r}")

    # --cache-type (f16 by default): each type is one model, with and without a draft the same greedy
    # text; -ctk / -ctv (llama.cpp's spellings) name the same choice.
    for cache, flags in [("f32", ["--cache-type", "f32"]), ("bf16", ["-ctk", "bf16", "-ctv", "bf16"])]:
        texts = {}
        for name, extra in [("plain", []), ("k4", ["-md", draft, "--draft-max", "4", "--draft-fixed"])]:
            rc, out, err = run(specgen, base + flags + extra)
            check(rc == 0, f"generate {cache} cache {name}: exit {rc}, stderr: {err.strip()}")
            texts[name], _ = split_stats(out)
        check(texts.get("k4") == texts.get("plain") and texts.get("plain"),
              f"generate {cache} cache: the draft changed the greedy text")

    # Sampling: under rejection the text a seed gives follows the draft lengths, so the default there
    # is the fixed length (and a seed reproduces the text); under coupled it does not, so the default
    # is the adaptive choice, and the text is the plain run's for the seed.
    sampled = ["generate", "-m", target, "-p", prompt, "-n", "24", "--temp", "0.8", "--seed", "5",
               "--ignore-eos", "--stats", "json"]
    texts = {}
    for name, extra, rule in [("rejection", ["-md", draft], "fixed"),
                              ("rejection again", ["-md", draft], "fixed"),
                              ("coupled", ["-md", draft, "--accept", "coupled"], "adaptive"),
                              ("coupled plain", ["--accept", "coupled"], "none")]:
        rc, out, err = run(specgen, sampled + extra)
        check(rc == 0, f"generate T=0.8 {name}: exit {rc}, stderr: {err.strip()}")
        text, stats = split_stats(out)
        got = stats.get("draft_length") if stats else None
        check(got == rule, f"generate T=0.8 {name}: draft_length {got!r}, want {rule!r}")
        texts[name] = text
    check(texts.get("rejection") == texts.get("rejection again"),
          "generate T=0.8 rejection: the same seed gave two texts")
    check(texts.get("coupled") == texts.get("coupled plain"),
          "generate T=0.8 coupled: the draft changed the seed's text")

    # chat: two piped turns and /stats; replies stream to stdout, EOF exits 0.
    rc, out, err = run(specgen, ["chat", "-m", target, "-md", draft, "-n", "24", "--temp", "0",
                                 "--system", "You write Python."],
                       stdin="def add(a, b):\n/stats\nimport os\n/reset\nclass A:\n")
    check(rc == 0, f"chat: exit {rc}, stderr: {err.strip()}")
    check("error" not in err, f"chat: stderr reports an error: {err.strip()}")
    stats_lines = [l for l in err.split("\n") if l.startswith("conversation:")]  # stats: stderr
    check(len(stats_lines) == 1 and "1 reply," in stats_lines[0],
          f"chat: /stats after one reply printed {stats_lines}")
    check(len(out.strip()) > 0, "chat: no reply on stdout")
    check("conversation reset" in err, "chat: /reset not acknowledged on stderr")

    # chat with --stats json prints one parseable line per reply.
    rc, out, err = run(specgen, ["chat", "-m", target, "-n", "8", "--temp", "0", "--stats", "json"],
                       stdin="hello\nworld\n")
    check(rc == 0, f"chat --stats json: exit {rc}, stderr: {err.strip()}")
    json_lines = [l for l in out.split("\n") if l.startswith("{")]
    check(len(json_lines) == 2, f"chat --stats json: {len(json_lines)} JSON lines for 2 turns")
    for l in json_lines:
        try:
            check(json.loads(l).get("tokens", 0) > 0, "chat --stats json: a reply of no tokens")
        except json.JSONDecodeError:
            check(False, f"chat --stats json: not JSON: {l!r}")

    # Bad input: exit status 1 (not a signal), a message on stderr naming the problem.
    missing = os.path.join(source, "models", "no-such-model")
    # A model folder whose tokenizer.json is corrupt: reported, not replaced by raw ids.
    broken = tempfile.mkdtemp(prefix="specgen-broken-tok-")
    atexit.register(shutil.rmtree, broken, True)
    for name in os.listdir(target):
        if name != "tokenizer.json":
            os.symlink(os.path.join(target, name), os.path.join(broken, name))
    with open(os.path.join(broken, "tokenizer.json"), "w") as f:
        f.write("{not json")
    long_prompt = "x = 1\n" * 200
    bad = [
        ("missing model", ["generate", "-m", missing, "-p", "hi"], ["no-such-model"]),
        ("missing draft", ["generate", "-m", target, "-md", missing, "-p", "hi"], ["no-such-model"]),
        ("vocabulary mismatch", ["generate", "-m", target, "-md", mismatched, "-p", "hi"],
         ["cannot draft", "llama-gqa"]),
        ("prompt longer than -c", ["generate", "-m", target, "-c", "64", "-p", long_prompt],
         ["context"]),
        ("prompt id outside the vocabulary", ["generate", "-m", target, "--prompt-ids", "1,99999"],
         ["99999"]),
        ("empty prompt", ["generate", "-m", target, "-p", ""], ["no prompt", "-p"]),
        ("two prompts", ["generate", "-m", target, "-p", "hi", "--prompt-ids", "1,2"], ["one prompt", "2"]),
        ("bad --accept", ["generate", "-m", target, "-p", "hi", "--accept", "maybe"], ["maybe"]),
        ("--draft-adaptive with --draft-fixed", ["generate", "-m", target, "-md", draft, "-p", "hi",
                                                 "--draft-adaptive", "--draft-fixed"],
         ["--draft-adaptive", "--draft-fixed"]),
        ("bad --top-p", ["generate", "-m", target, "-p", "hi", "--top-p", "2"], ["--top-p"]),
        ("bad --gemv-order", ["generate", "-m", target, "-p", "hi", "--gemv-order", "fast"],
         ["--gemv-order", "fast"]),
        # The CPU has one order of its own: asking it for the GPU's tensor-core order is an error.
        ("--gemv-order tensor on the CPU", ["generate", "-m", target, "-p", "hi", "--device", "cpu",
                                            "--gemv-order", "tensor"], ["--gemv-order", "CPU"]),
        ("logits --gemv-order tensor on the CPU", ["logits", "-m", target, "--prompt-ids", "1,2",
                                                   "--gemv-order", "tensor"], ["--gemv-order"]),
        ("bad --cache-type", ["generate", "-m", target, "-p", "hi", "--cache-type", "q8_0"],
         ["--cache-type", "q8_0"]),
        ("-ctk and -ctv differ", ["generate", "-m", target, "-p", "hi", "-ctk", "f16", "-ctv", "f32"],
         ["--cache-type-k", "--cache-type-v"]),
        ("logits bad --cache-type", ["logits", "-m", target, "--prompt-ids", "1,2", "--cache-type", "f8"],
         ["--cache-type", "f8"]),
        ("corrupt tokenizer.json", ["generate", "-m", broken, "-p", "hi"], ["tokenizer.json", "JSON"]),
        ("chat missing model", ["chat", "-m", missing], ["no-such-model"]),
        ("chat vocabulary mismatch", ["chat", "-m", target, "-md", mismatched], ["cannot draft"]),
    ]
    for name, args, needles in bad:
        rc, out, err = run(specgen, args, stdin="")
        check(rc == 1, f"{name}: exit {rc} (want 1), stderr: {err.strip()[:300]}")
        check("error" in err and all(n in err for n in needles),
              f"{name}: stderr does not name the problem ({needles}): {err.strip()[:300]}")
        check(out == "", f"{name}: printed to stdout before failing: {out[:200]!r}")
        check("terminate" not in err and "Aborted" not in err, f"{name}: crashed: {err[:300]}")

    # A conversation that outgrows -c is reported per turn and the chat goes on to exit 0.
    rc, out, err = run(specgen, ["chat", "-m", target, "-c", "48", "-n", "8", "--temp", "0"],
                       stdin=long_prompt.replace("\n", " ") + "\nhi\n")
    check(rc == 0, f"chat overflow: exit {rc}, stderr: {err.strip()[:300]}")
    check("fills the context" in err, f"chat overflow: no context message: {err.strip()[:300]}")

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("specgen cli: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
