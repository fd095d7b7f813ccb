#!/usr/bin/env python3
"""Runs `specgen perplexity` on the bundled target and its held-out text as a user would: a sane
perplexity, a saved reference that compares with itself as KL 0 and 100% same top, a q8_0 copy of the
target close to it (sanity bounds only: the figures themselves are measurements), llama.cpp's flag
spellings, and bad input (empty or one-token text, a reference of another text or window, a foreign
file) failing with a message, exit 1 and no output file.

usage: perplexity_cli_check.py SPECGEN_BINARY SOURCE_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"FAIL: {what}")


def run(binary, *args):
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def number(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None


def main():
    binary, source = sys.argv[1], sys.argv[2]
    target = os.path.join(source, "models", "tiny-target")
    text = os.path.join(source, "models", "heldout.txt")
    common = ["--device", "cpu", "-t", "2"]
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base.sglp")
        rc, out, err = run(binary, "perplexity", "-m", target, "-f", text, "--save-logits", base, *common)
        check(rc == 0, f"perplexity --save-logits exits 0 (got {rc}: {err[-500:]})")
        ppl = number(r"Final estimate: PPL = ([0-9.]+) \+/- ", out)
        err_ppl = number(r"Final estimate: PPL = [0-9.]+ \+/- ([0-9.]+)", out)
        print(f"bundled target on models/heldout.txt: PPL {ppl} +/- {err_ppl}")
        # The target's held-out perplexity on its corpus is in models/README.md; this text is one file
        # of the same kind, so a broad bound: far below the vocabulary (4096), above certainty.
        check(ppl is not None and 2.0 < ppl < 100.0, f"PPL in (2, 100): {ppl}")
        check(err_ppl is not None and 0.0 < err_ppl < ppl, f"PPL error in (0, PPL): {err_ppl}")
        check(os.path.exists(base), "--save-logits wrote its file")

        # Against itself: KL exactly 0, the same top token everywhere, the same perplexity.
        rc, out, err = run(binary, "perplexity", "-m", target, "-f", text, "--kl-base", base, *common)
        check(rc == 0, f"--kl-base exits 0 (got {rc}: {err[-500:]})")
        check(number(r"Mean    KLD:\s+([-0-9.]+)", out) == 0.0, f"self KLD is 0:\n{out}")
        check(number(r"99\.0%   KLD:\s+([-0-9.]+)", out) == 0.0, "self 99% KLD is 0")
        check(number(r"Same top p:\s+([0-9.]+)", out) == 100.0, f"self same top is 100%:\n{out}")
        q = number(r"Mean PPL\(Q\)\s+:\s+([0-9.]+)", out)
        b = number(r"Mean PPL\(base\)\s+:\s+([0-9.]+)", out)
        check(q is not None and q == b, f"PPL(Q) {q} equals PPL(base) {b}")

        # llama.cpp's spellings: --kl-divergence-base alone saves, with --kl-divergence compares.
        llama_base = os.path.join(tmp, "llama.kld")
        rc, _, err = run(binary, "perplexity", "-m", target, "-f", text, "--kl-divergence-base", llama_base,
                         *common)
        check(rc == 0 and os.path.exists(llama_base), f"--kl-divergence-base saves ({err[-300:]})")
        rc, out, err = run(binary, "perplexity", "-m", target, "-f", text, "--kl-divergence-base", base,
                           "--kl-divergence", *common)
        check(rc == 0 and number(r"Mean    KLD:\s+([-0-9.]+)", out) == 0.0,
              f"--kl-divergence-base FILE --kl-divergence compares ({err[-300:]})")

        # A q8_0 copy of the target, run packed on the CPU, against the bf16 reference.
        q8 = os.path.join(tmp, "target-q8_0.gguf")
        rc, _, err = run(binary, "convert", target, q8, "--type", "q8_0")
        check(rc == 0, f"convert --type q8_0 ({err[-300:]})")
        if rc == 0:
            rc, out, err = run(binary, "perplexity", "-m", q8, "-f", text, "--kl-base", base, *common)
            check(rc == 0, f"q8_0 --kl-base exits 0 ({err[-500:]})")
            print("q8_0 against bf16:\n" + out)
            kld = number(r"Mean    KLD:\s+([-0-9.]+)", out)
            top = number(r"Same top p:\s+([0-9.]+)", out)
            q = number(r"Mean PPL\(Q\)\s+:\s+([0-9.]+)", out)
            check(kld is not None and 0.0 < kld < 0.05, f"q8_0 mean KLD in (0, 0.05): {kld}")
            check(top is not None and top > 90.0, f"q8_0 same top > 90%: {top}")
            check(q is not None and ppl is not None and abs(q / ppl - 1) < 0.05, f"q8_0 PPL {q} within 5% of {ppl}")

        # Bad input: a message, exit 1, and no output file.
        def expect_error(args, what, label):
            out_file = os.path.join(tmp, "never.sglp")
            rc, _, err = run(binary, "perplexity", "-m", target, *args, "--save-logits", out_file, *common)
            check(rc == 1, f"{label}: exit 1 (got {rc})")
            check(what in err, f"{label}: stderr names '{what}': {err.strip()[-300:]}")
            check(not os.path.exists(out_file), f"{label}: no output file")

        empty = os.path.join(tmp, "empty.txt")
        open(empty, "w").close()
        expect_error(["-f", empty], "is empty", "empty text")
        one = os.path.join(tmp, "one.txt")
        with open(one, "w") as f:
            f.write("a")
        expect_error(["-f", one], "at least 2", "one-token text")
        expect_error(["-f", text, "-c", "64", "--kl-base", base], "give -c 512", "another window")
        other = os.path.join(tmp, "other.txt")
        with open(text) as f, open(other, "w") as g:
            g.write(f.read()[: 4000])
        expect_error(["-f", other, "--kl-base", base], "run both on the same -f text", "another text")
        expect_error(["-f", text, "--kl-base", text], "not a specgen log-prob file", "a foreign file")
        expect_error(["-f", text, "--kl-base", base + ".missing"], "cannot read", "a missing file")
        expect_error(["-f", text, "--kl-divergence"], "--kl-divergence-base", "--kl-divergence alone")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("perplexity CLI: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
