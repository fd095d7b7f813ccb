#!/usr/bin/env python3
"""`specgen convert` / `synth` to llama.cpp's quantized file types, and what loading reports.

usage: convert_check.py SPECGEN SOURCE_DIR

Checks: the bundled target converts to q4_k_m, `inspect` shows the mix (attn_v of the last layers in
q6_k, the rest q4_k, the expert down projections, rows of 48, in f16), the file generates text;
`synth --type q4_k_m` likewise; a failed conversion (unwritable output folder, truncated input)
exits 1 and leaves no file, temporary or final. generate and chat print one line per model on stderr
saying what went where (device, layers, bytes by dtype, KV cache), never on stdout; with stderr not
a terminal no progress bar (no carriage return) is drawn.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(specgen, args, stdin=None):
    p = subprocess.run([specgen] + args, input=stdin, capture_output=True, text=True, timeout=240)
    return p.returncode, p.stdout, p.stderr


LOAD_LINE = re.compile(r"^(target|draft) (\S+): (cpu|cuda), (\d+) layers, .*\b(f32|bf16|f16)\b.*, KV cache .+$",
                       re.M)


def tensor_dtypes(inspect_out):
    """name -> dtype from `inspect --tensors`."""
    out = {}
    for line in inspect_out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith(".weight"):
            out[parts[0]] = parts[2]
    return out


def check_load_lines(name, rc, out, err, roles):
    check(rc == 0, f"{name}: exit {rc}: {err[-400:]}")
    found = LOAD_LINE.findall(err)
    check(sorted(r for r, *_ in found) == sorted(roles), f"{name}: load lines {found} (want {roles}) in {err[-600:]}")
    check("KV cache" not in out and "layers," not in out, f"{name}: load line on stdout: {out[-300:]}")
    check("\r" not in err, f"{name}: a progress bar was drawn on a non-terminal stderr")


def main():
    specgen, source = sys.argv[1], sys.argv[2]
    target = os.path.join(source, "models", "tiny-target")
    draft = os.path.join(source, "models", "tiny-draft")
    tmp = tempfile.mkdtemp(prefix="specgen_convert_")
    try:
        # convert → q4_k_m: the mix, a clean stdout, a runnable file.
        out_dir = os.path.join(tmp, "out")
        os.mkdir(out_dir)
        q = os.path.join(out_dir, "t.q4_k_m.gguf")
        rc, out, err = run(specgen, ["convert", target, q, "--type", "q4_k_m"])
        check(rc == 0, f"convert q4_k_m: exit {rc}: {err[-400:]}")
        check(out.startswith("wrote ") and out.count("\n") == 1, f"convert stdout: {out!r}")
        check("\r" not in err, "convert drew a bar on a non-terminal stderr")
        check(os.listdir(out_dir) == ["t.q4_k_m.gguf"], f"convert left {os.listdir(out_dir)}")
        rc, out, err = run(specgen, ["inspect", q, "--tensors"])
        check(rc == 0, f"inspect: exit {rc}: {err[-300:]}")
        types = tensor_dtypes(out)
        # 4 layers: use_more_bits picks layers 2 and 3 (l >= 7*4/8 = 3, (l - 0) % 3 == 2).
        want = {"blk.0.attn_v.weight": "q4_k", "blk.1.attn_v.weight": "q4_k", "blk.2.attn_v.weight": "q6_k",
                "blk.3.attn_v.weight": "q6_k", "blk.0.attn_q.weight": "q4_k",
                "token_embd.weight": "q6_k",  # tied: it is the head
                "blk.0.ffn_down_exps.weight": "f16", "blk.0.attn_norm.weight": "f32"}
        for name, dtype in want.items():
            check(types.get(name) == dtype, f"inspect: {name} is {types.get(name)}, want {dtype}")
        mix = re.search(r"^\s*by dtype\s+(.*)$", out, re.M)
        check(mix is not None and all(t in mix.group(1) for t in ("q4_k ", "q6_k ", "f16 ", "f32 ")),
              f"inspect: the mix line lacks a dtype: {mix.group(0) if mix else out[:800]}")
        rc, out, err = run(specgen, ["generate", "-m", q, "-p", "def f(x):", "-n", "8", "--temp", "0",
                                     "--stats", "json"])
        check_load_lines("generate q4_k_m", rc, out, err, ["target"])
        lines = out.rstrip("\n").split("\n")
        try:
            stats = json.loads(lines[-1])
        except json.JSONDecodeError:
            stats = None
        check(isinstance(stats, dict) and "tokens" in stats, f"generate --stats json: last line {lines[-1]!r}")

        # generate and chat with the bundled pair: one line per model, stdout clean.
        rc, out, err = run(specgen, ["generate", "-p", "hello", "-n", "4", "--temp", "0"])
        check_load_lines("generate (bundled pair)", rc, out, err, ["target", "draft"])
        rc, out, err = run(specgen, ["chat", "-n", "4", "--temp", "0"], stdin="hello\n")
        check_load_lines("chat (bundled pair)", rc, out, err, ["target", "draft"])

        # synth --type q4_k_m (tiny-moe: rows of 64, so the 32-block fallbacks), then it runs.
        s = os.path.join(out_dir, "m.gguf")
        rc, out, err = run(specgen, ["synth", "--preset", "tiny-moe", "--type", "q4_k_m", "--out", s])
        check(rc == 0, f"synth q4_k_m: exit {rc}: {err[-300:]}")
        rc, out, err = run(specgen, ["inspect", s, "--tensors"])
        types = tensor_dtypes(out)
        check(types.get("blk.0.attn_q.weight") == "q5_0", f"synth q4_k_m: attn_q is {types.get('blk.0.attn_q.weight')}")
        check(types.get("blk.2.ffn_down_exps.weight") == "q8_0",
              f"synth q4_k_m: last ffn_down_exps is {types.get('blk.2.ffn_down_exps.weight')} (q6_k → q8_0)")
        rc, out, err = run(specgen, ["generate", "-m", s, "--prompt-ids", "1,2,3", "-n", "3", "--temp", "0"])
        check_load_lines("generate synth q4_k_m", rc, out, err, ["target"])

        # Failures leave nothing behind.
        blocker = os.path.join(tmp, "a-file")
        open(blocker, "w").close()
        rc, out, err = run(specgen, ["convert", target, os.path.join(blocker, "x.gguf"), "--type", "q4_k_m"])
        check(rc == 1 and "error" in err, f"convert into a non-folder: exit {rc}: {err[-300:]}")
        check(not os.path.exists(os.path.join(blocker, "x.gguf")), "convert into a non-folder left a file")
        broken = os.path.join(tmp, "broken")
        shutil.copytree(target, broken)
        st = os.path.join(broken, "model.safetensors")
        with open(st, "r+b") as f:
            f.truncate(os.path.getsize(st) // 2)
        bad_dir = os.path.join(tmp, "bad_out")
        os.mkdir(bad_dir)
        rc, out, err = run(specgen, ["convert", broken, os.path.join(bad_dir, "x.gguf"), "--type", "q6_k"])
        check(rc == 1 and "error" in err, f"convert of a truncated checkpoint: exit {rc}: {err[-300:]}")
        check(os.listdir(bad_dir) == [], f"convert of a truncated checkpoint left {os.listdir(bad_dir)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("convert_check: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
