#!/usr/bin/env python3
"""Runs `specgen logits` on a golden fixture and compares its output file with the transformers logits
saved beside it (tests/data/models/<name>/logits.f32): the check anyone can run against another
implementation. Same tolerance as golden_test.cc for fp32: |ours - ref| <= 1e-4*S + 1e-4*|ref|,
S = max|ref|; NaN fails. Exit 0 on match, 1 otherwise (the fixtures are committed, so a missing
one fails too).

usage: logits_cli_check.py SPECGEN_BINARY FIXTURE_DIR
"""
import array
import json
import math
import os
import subprocess
import sys
import tempfile


def read_f32(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def main():
    binary, fixture = sys.argv[1], sys.argv[2]
    golden_path = os.path.join(fixture, "golden.json")
    if not os.path.exists(golden_path):
        print(f"FAIL: committed fixture missing at {fixture}")
        return 1
    with open(golden_path) as f:
        golden = json.load(f)
    ref = read_f32(os.path.join(fixture, golden["logits_file"]))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.f32")
        ids = ",".join(str(i) for i in golden["input_ids"])
        subprocess.run([binary, "logits", "-m", fixture, "--prompt-ids", ids, "--out", out], check=True)
        ours = read_f32(out)
    if len(ours) != len(ref):
        print(f"FAIL: {len(ours)} logits, reference has {len(ref)}")
        return 1
    scale = max(abs(x) for x in ref)
    worst, worst_i = -1.0, -1
    for i, (a, r) in enumerate(zip(ours, ref)):
        allowed = 1e-4 * scale + 1e-4 * abs(r)
        excess = abs(a - r) / allowed if math.isfinite(a) else math.inf
        if excess > worst:
            worst, worst_i = excess, i
    v = golden["vocab_size"]
    a, r = ours[worst_i], ref[worst_i]
    print(f"worst at row {worst_i // v} col {worst_i % v}: ours {a} ref {r} |diff| {abs(a - r):.3g} "
          f"= {worst:.3f} of the allowed error (logit scale {scale:.3g})")
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
