#!/usr/bin/env python3
"""Acceptance of the bundled pair through the `specgen` CLI, on a device, with bench_speculative's
settings: the 25 held-out prompts of models/pair_prompts.json, 64 new tokens each (no end-token
stop), T = 0.8 without filters, seed = prompt index + 1, a fixed draft length.

usage: acceptance_check.py SPECGEN DEVICE [K ...]        (K: draft lengths, default 2 4 6)

Prints, per acceptance mode and k, accepted / drafted over all prompts. Its use: the GPU's figures
against the CPU's (models/README.md's table, which this reproduces exactly with --device cpu).
`coupled` must equal the CPU's to the token (one shared noise, no ratio test); `rejection` agrees
within sampling noise (its draws compare p/q ratios whose last bits differ between the devices, and
a sequence that takes another token then diverges). Exit 1 when a run fails.
Run from the repository root; needs only the Python standard library.
"""
import json
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    specgen, device = sys.argv[1], sys.argv[2]
    ks = [int(k) for k in sys.argv[3:]] or [2, 4, 6]
    prompts = json.load(open("models/pair_prompts.json"))["prompts"]
    for mode in ("rejection", "coupled"):
        for k in ks:
            accepted = drafted = 0
            for i, prompt in enumerate(prompts):
                args = [specgen, "generate", "-m", "models/tiny-target", "-md", "models/tiny-draft",
                        "--prompt-ids", ",".join(map(str, prompt)), "-n", "64", "--ignore-eos",
                        "--temp", "0.8", "--top-k", "0", "--top-p", "1", "--min-p", "0",
                        "--seed", str(i + 1), "--draft-max", str(k), "--draft-fixed", "--accept", mode,
                        "--device", device, "--stats", "json", "--print-ids"]
                run = subprocess.run(args, capture_output=True, text=True, timeout=120)
                if run.returncode != 0:
                    print(f"prompt {i}, {mode} k {k}: exit {run.returncode}: {run.stderr.strip()[:300]}",
                          file=sys.stderr)
                    return 1
                stats = json.loads(run.stdout.strip().split("\n")[-1])
                accepted += stats["accepted"]
                drafted += stats["drafted"]
            print(f"{device} {mode} k {k}: acceptance {accepted / drafted:.4f} ({accepted} / {drafted})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
