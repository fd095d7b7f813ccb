#!/usr/bin/env python3
"""The `specgen` binary against hostile flags and files (issue: no flag or file brings it down).

usage: specgen_hardening_check.py SPECGEN SOURCE_DIR

One section per class; every case runs the real binary on the bundled pair or on copies of it in a
temporary folder, so nothing in the source tree is ever written:
  resources  sizes a user chooses (-c, -t, --threads) are checked before anything is allocated: an
             error naming the flag and exit 1, never a std::bad_alloc or std::system_error abort;
             -c above the trained length warns.
  writes     no output replaces an input (through a symlink or a hard link as well), a non-regular
             file (a FIFO), or follows a symlink planted at a temporary name.
  silent     files and flags that used to be accepted without a word: layers beyond the declared
             count, rope.freq_base = inf, zero experts, --seed -1 (a random seed that is printed and
             repeats the run), -n -1 (until the context is full), chat's exit status.
  messages   llama.cpp flags get the specgen way, an unknown command is named with the list, -f DIR,
             a synth preset too large for RAM, convert --type.
Round 2 (issue 48), each case asserting the exit status, the cause named and that no file changed:
  overflow   integers past 64 bits, a plan context whose KV bytes would overflow, plan -c above the
             trained length.
  nonfinite  a NaN in a bf16 checkpoint and an Inf block scale in a q8_0 GGUF are named at load
             (tensor, block, row); with --no-check-tensors the NaN logits stop the run at a position.
  outputs    report --svg onto its results or through a planted temporary name; perplexity
             --save-logits onto its text or its reference.
  values     a perplexity reference with a NaN field; results JSON with absurd counters.
  causes     invalid UTF-8 in chat, perplexity -f DIR, plan of an untyped synth preset too large for
             host RAM, --vram-budget on a CPU run.
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(specgen, args, stdin="", timeout=120):
    if isinstance(stdin, bytes):  # bytes that are not text (invalid UTF-8) go in as they are
        p = subprocess.run([specgen] + args, input=stdin, capture_output=True, timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    p = subprocess.run([specgen] + args, input=stdin, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def expect_error(specgen, name, args, needles, forbidden=(), stdin=""):
    """exit 1 (not a signal), an error on stderr naming `needles`, nothing on stdout."""
    rc, out, err = run(specgen, args, stdin=stdin)
    check(rc == 1, f"{name}: exit {rc} (want 1), stderr: {err.strip()[:400]}")
    check("error" in err and all(n in err for n in needles),
          f"{name}: stderr does not name the problem {needles}: {err.strip()[:400]}")
    for f in forbidden:
        check(f not in err, f"{name}: stderr mentions {f!r}: {err.strip()[:400]}")
    check("terminate" not in err and "Aborted" not in err, f"{name}: crashed: {err[:300]}")
    return err


def copy_model(src, dst):
    shutil.copytree(src, dst)
    return dst


def gguf_patch(path, key, fmt, value):
    """Overwrites the scalar value of metadata `key` (its type must match struct format `fmt`)."""
    with open(path, "r+b") as f:
        data = f.read()
        encoded = struct.pack("<Q", len(key)) + key.encode()
        at = data.find(encoded)
        if at < 0:
            raise KeyError(key)
        at += len(encoded) + 4  # past the key and its uint32 type
        f.seek(at)
        f.write(struct.pack(fmt, value))


def resources(specgen, target, draft, tmp):
    huge = "1000000000"
    for cmd in (["generate", "-m", target, "-p", "hi", "-n", "2"],
                ["generate", "-m", target, "-md", draft, "-p", "hi", "-n", "2"],
                ["logits", "-m", target, "--prompt-ids", "1,2"]):
        expect_error(specgen, f"{cmd[0]} -c {huge}", cmd + ["-c", huge], ["-c", "KV cache", "fits"])
    expect_error(specgen, f"chat -c {huge}", ["chat", "-m", target, "-c", huge], ["-c", "KV cache"],
                 stdin="hi\n")
    for t in ("100000", "-1"):
        expect_error(specgen, f"generate -t {t}", ["generate", "-m", target, "-p", "hi", "-n", "2", "-t", t],
                     ["-t", t])
        expect_error(specgen, f"logits -t {t}", ["logits", "-m", target, "--prompt-ids", "1", "-t", t],
                     ["-t", t])
    expect_error(specgen, "convert --threads -1",
                 ["convert", target, os.path.join(tmp, "t.gguf"), "--threads", "-1"], ["--threads"])
    expect_error(specgen, "synth --threads 100000",
                 ["synth", "--preset", "tiny-moe", "--out", os.path.join(tmp, "s.gguf"),
                  "--threads", "100000"], ["--threads"])
    check(not os.path.exists(os.path.join(tmp, "t.gguf")), "convert --threads -1 wrote a file")
    # Above the trained length (4096): runs, with llama.cpp's kind of warning.
    rc, out, err = run(specgen, ["generate", "-m", target, "--prompt-ids", "1,2", "-n", "2", "-c", "8192",
                                 "--temp", "0"])
    check(rc == 0, f"generate -c 8192: exit {rc}: {err.strip()[:300]}")
    check("warning" in err and "4096" in err and "trained" in err,
          f"generate -c 8192 on a 4096-token model: no warning: {err.strip()[:300]}")


def writes(specgen, target, draft, tmp):
    # A GGUF of the target, then `logits --out` onto it by every name.
    model = os.path.join(tmp, "m.gguf")
    rc, _, err = run(specgen, ["convert", target, model, "--type", "f32"])
    check(rc == 0, f"convert for the write checks: exit {rc}: {err.strip()[:300]}")
    before = digest(model)
    os.symlink(model, os.path.join(tmp, "link.gguf"))
    os.link(model, os.path.join(tmp, "hard.gguf"))
    for name in ("m.gguf", "link.gguf", "hard.gguf"):
        expect_error(specgen, f"logits --out {name} (the model)",
                     ["logits", "-m", model, "--prompt-ids", "1,2", "--out", os.path.join(tmp, name)],
                     ["--out", "same file as the input"])
    check(digest(model) == before, "logits --out overwrote the model")
    expect_error(specgen, "convert onto its own input",
                 ["convert", model, os.path.join(tmp, "link.gguf")], ["same file as the input"])
    hf = copy_model(target, os.path.join(tmp, "hf"))
    st = os.path.join(hf, "model.safetensors")
    st_before = digest(st)
    expect_error(specgen, "convert onto a file of its input folder", ["convert", hf, st],
                 ["same file as the input"])
    check(digest(st) == st_before, "convert overwrote the checkpoint it read")
    check(digest(model) == before, "convert overwrote its input")

    # A FIFO (as a device node would be when run as root) is refused and left in place.
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    for name, args in [("logits --out FIFO", ["logits", "-m", target, "--prompt-ids", "1", "--out", fifo]),
                       ("convert OUT FIFO", ["convert", target, fifo]),
                       ("synth --out FIFO", ["synth", "--preset", "tiny-moe", "--out", fifo])]:
        expect_error(specgen, name, args, ["FIFO"])
        check(os.path.exists(fifo) and not os.path.isfile(fifo), f"{name}: the FIFO was replaced")
    out_dir = os.path.join(tmp, "a_dir")
    os.mkdir(out_dir)
    expect_error(specgen, "logits --out DIR", ["logits", "-m", target, "--prompt-ids", "1", "--out", out_dir],
                 ["directory"])

    # A symlink planted at the name logits once used for its temporary file is not followed.
    victim = os.path.join(tmp, "victim")
    with open(victim, "w") as f:
        f.write("precious")
    out = os.path.join(tmp, "logits.bin")
    os.symlink(victim, out + ".tmp")
    rc, _, err = run(specgen, ["logits", "-m", target, "--prompt-ids", "1,2", "--out", out])
    check(rc == 0, f"logits beside a planted symlink: exit {rc}: {err.strip()[:300]}")
    with open(victim, "rb") as f:
        check(f.read() == b"precious", "logits wrote through a symlink planted at OUT.tmp")
    check(os.path.isfile(out) and os.path.getsize(out) == 2 * 4096 * 4, "logits --out: wrong size")
    leftovers = [n for n in os.listdir(tmp) if ".tmp." in n]
    check(not leftovers, f"temporary files left behind: {leftovers}")


def silent(specgen, target, draft, tmp):
    # config.json declaring fewer layers than the checkpoint holds.
    short = copy_model(target, os.path.join(tmp, "short"))
    with open(os.path.join(short, "config.json")) as f:
        cfg = json.load(f)
    cfg["num_hidden_layers"] -= 1
    with open(os.path.join(short, "config.json"), "w") as f:
        json.dump(cfg, f)
    expect_error(specgen, "HF checkpoint with more layers than config.json declares",
                 ["generate", "-m", short, "--prompt-ids", "1,2", "-n", "2"],
                 ["model.layers.3", "num_hidden_layers", "declares 3"])

    # GGUF: block_count one short, and rope.freq_base = inf.
    base = os.path.join(tmp, "base.gguf")
    rc, _, err = run(specgen, ["convert", target, base, "--type", "f32"])
    check(rc == 0, f"convert for the GGUF checks: exit {rc}: {err.strip()[:300]}")
    short_gguf = os.path.join(tmp, "short.gguf")
    shutil.copy(base, short_gguf)
    gguf_patch(short_gguf, "qwen3moe.block_count", "<I", 3)
    expect_error(specgen, "GGUF with more layers than block_count",
                 ["generate", "-m", short_gguf, "--prompt-ids", "1,2", "-n", "2"],
                 ["blk.3", "block_count"])
    inf_gguf = os.path.join(tmp, "inf.gguf")
    shutil.copy(base, inf_gguf)
    gguf_patch(inf_gguf, "qwen3moe.rope.freq_base", "<f", float("inf"))
    expect_error(specgen, "rope.freq_base = inf", ["generate", "-m", inf_gguf, "--prompt-ids", "1,2", "-n", "2"],
                 ["rope_theta", "finite"])
    zero_gguf = os.path.join(tmp, "zero.gguf")
    shutil.copy(base, zero_gguf)
    gguf_patch(zero_gguf, "qwen3moe.expert_count", "<I", 0)
    expect_error(specgen, "GGUF expert_count = 0", ["generate", "-m", zero_gguf, "--prompt-ids", "1,2", "-n", "2"],
                 ["expert_count", "at least one expert"], forbidden=["missing tensor"])
    zero = copy_model(target, os.path.join(tmp, "zero"))
    cfg = json.load(open(os.path.join(zero, "config.json")))
    cfg["num_local_experts"] = 0
    json.dump(cfg, open(os.path.join(zero, "config.json"), "w"))
    expect_error(specgen, "config.json with zero experts", ["generate", "-m", zero, "--prompt-ids", "1,2"],
                 ["num_local_experts", "at least one expert"], forbidden=["missing tensor"])

    # --seed -1: a random seed, in the stats; running again with it repeats the text.
    sampled = ["generate", "-m", target, "-p", "def f(x):", "-n", "12", "--temp", "1", "--ignore-eos",
               "--stats", "json"]
    seeds, texts = [], []
    for _ in range(2):
        rc, out, err = run(specgen, sampled + ["--seed", "-1"])
        check(rc == 0, f"--seed -1: exit {rc}: {err.strip()[:300]}")
        lines = out.rstrip("\n").split("\n")
        try:
            seeds.append(json.loads(lines[-1])["seed"])
            texts.append("\n".join(lines[:-1]))
        except (json.JSONDecodeError, KeyError, IndexError):
            check(False, f"--seed -1: no seed in the stats JSON: {out[-300:]!r}")
    if len(seeds) == 2:
        check(seeds[0] != seeds[1] and 0 <= seeds[0] < 2**63, f"--seed -1 gave seeds {seeds}")
        rc, out, err = run(specgen, sampled + ["--seed", str(seeds[0])])
        check(rc == 0 and "\n".join(out.rstrip("\n").split("\n")[:-1]) == texts[0],
              "--seed N with the seed --seed -1 printed does not repeat the run")
    rc, _, err = run(specgen, ["generate", "-m", target, "-p", "hi", "--temp", "1", "--seed", "-1",
                               "-n", "4"])
    check(rc == 0 and "--seed" in err and "repeats" in err,
          f"--seed -1 --stats text: the seed is not offered for repeating: {err.strip()[-300:]}")
    expect_error(specgen, "--seed -2", ["generate", "-m", target, "-p", "hi", "--seed", "-2"], ["--seed"])

    # -n -1: until the context is full (with --ignore-eos there is no other stop).
    rc, out, err = run(specgen, ["generate", "-m", target, "--prompt-ids", "1,2,3", "-n", "-1", "-c", "40",
                                 "--temp", "0", "--ignore-eos", "--stats", "json"])
    check(rc == 0, f"-n -1: exit {rc}: {err.strip()[:300]}")
    try:
        check(json.loads(out.rstrip("\n").split("\n")[-1])["tokens"] == 37,
              f"-n -1 -c 40 with 3 prompt tokens: want 37 tokens: {out[-200:]!r}")
    except (json.JSONDecodeError, KeyError, IndexError):
        check(False, f"-n -1: no stats JSON: {out[-200:]!r}")
    expect_error(specgen, "-n -2", ["generate", "-m", target, "-p", "hi", "-n", "-2"], ["-n"])

    # chat: the exit status is that of the last turn.
    long_turn = "x = 1 " * 200
    rc, _, err = run(specgen, ["chat", "-m", target, "-c", "48", "-n", "4", "--temp", "0"],
                     stdin="hi\n" + long_turn + "\n")
    check(rc == 1, f"chat whose last turn failed: exit {rc} (want 1): {err.strip()[-300:]}")
    check("last turn failed" in err, f"chat: the failed last turn is not reported: {err.strip()[-300:]}")


def messages(specgen, target, draft, tmp):
    llama = [
        (["-ngl", "99"], ["-ngl", "--vram-budget"]),
        (["--n-gpu-layers", "99"], ["--n-gpu-layers", "--vram-budget"]),
        (["-cnv"], ["-cnv", "specgen chat"]),
        (["-fa"], ["-fa", "always"]),
        (["--flash-attn", "on"], ["--flash-attn"]),
        (["--mlock"], ["--mlock"]),
        (["-b", "512"], ["-b", "batches"]),
        (["-ub", "512"], ["-ub", "batches"]),
        (["--draft-min", "2"], ["--draft-min", "--draft-adaptive"]),
        (["--draft", "8"], ["--draft", "--draft-max"]),
    ]
    for flags, needles in llama:
        err = expect_error(specgen, f"generate {' '.join(flags)}",
                           ["generate", "-m", target, "-p", "hi"] + flags, needles + ["llama.cpp"])
        check("--n-predict" not in err and "--ctx-size" not in err and "one prompt" not in err,
              f"{flags}: the error blames another flag: {err.strip()[:300]}")
    expect_error(specgen, "chat -ngl", ["chat", "-m", target, "-ngl", "99"], ["-ngl", "--vram-budget"])
    # A prompt that merely looks like a flag is text.
    rc, _, err = run(specgen, ["generate", "-m", target, "--prompt=-fa", "-n", "1", "--temp", "0"])
    check(rc == 0, f"generate --prompt=-fa (a prompt): exit {rc}: {err.strip()[:300]}")

    err = expect_error(specgen, "unknown command", ["genrate", "-m", target], ["'genrate'", "generate", "chat"])
    expect_error(specgen, "-f DIR", ["generate", "-m", target, "-f", tmp], ["-f", "is a directory"])
    expect_error(specgen, "synth preset too large for RAM",
                 ["generate", "-m", "synth:qwen3-235b-a22b", "--prompt-ids", "1"],
                 ["synth:qwen3-235b-a22b:q4_0"], forbidden=["--type"])
    expect_error(specgen, "convert --type q3_k", ["convert", target, os.path.join(tmp, "x.gguf"), "--type", "q3_k"],
                 ["q3_k", "f32, f16, bf16, q8_0, q6_k, q5_k_m, q4_k_m, q4_k or q4_0"], forbidden=["q3_k,"])
    expect_error(specgen, "convert --type q5_1 (read, written only as a fallback)",
                 ["convert", target, os.path.join(tmp, "x.gguf"), "--type", "q5_1"], ["q5_1", "q4_k_m"])


def snapshot(folder):
    """Every file under `folder` with its digest (symlinks by their target), to show nothing changed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, n)
            if os.path.islink(path):
                out[path] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                out[path] = digest(path)
            else:
                out[path] = "special"
    return out


def expect_refused(specgen, name, args, needles, folder, forbidden=(), stdin=""):
    """expect_error, and every file under `folder` as it was."""
    before = snapshot(folder)
    err = expect_error(specgen, name, args, needles, forbidden=forbidden, stdin=stdin)
    after = snapshot(folder)
    check(before == after, f"{name}: files changed: {sorted(set(before.items()) ^ set(after.items()))[:4]}")
    return err


def safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return 8 + n, json.loads(f.read(n))


def gguf_tensor_offsets(path):
    """{name: (ggml type, absolute offset of its data)} of a GGUF v3 file."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 8  # magic, version

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return data[pos - n:pos].decode()

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(sizes[t])

    n_tensors, n_kv = take("Q"), take("Q")
    alignment = 32
    for _ in range(n_kv):
        key = string()
        v = value(take("I"))
        if key == "general.alignment":
            alignment = v
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        infos.append((name, take("I"), take("Q")))
    start = (pos + alignment - 1) // alignment * alignment
    return {name: (t, start + off) for name, t, off in infos}


def overflow(specgen, target, draft, tmp):
    big = "99999999999999999999"  # past int64: CLI11 alone would clamp it to 2^63 - 1
    for cmd in (["generate", "-m", target, "--prompt-ids", "1", "-c", big],
                ["plan", "-m", target, "--vram-budget", "8GiB", "-c", big],
                ["perplexity", "-m", target, "-f", os.path.join(target, "config.json"), "-c", big]):
        expect_refused(specgen, f"{cmd[0]} -c 2^66", cmd, [big, "out of range"], tmp)
    # 2^62 positions: the KV bytes would wrap a 64-bit count and "fit" any budget.
    huge = str(2**62)
    for model in (target, "synth:qwen3-30b-a3b:q4_k_m"):
        expect_refused(specgen, f"plan {model} -c 2^62", ["plan", "-m", model, "-md", draft if model == target
                                                          else "synth:qwen3-0.6b:q8_0", "--vram-budget", "8GiB",
                                                          "-c", huge], ["-c " + huge, "KV caches"], tmp)
    rc, out, err = run(specgen, ["plan", "-m", target, "--vram-budget", "8GiB", "-c", "8192"])
    check(rc == 0, f"plan -c 8192: exit {rc}: {err.strip()[:300]}")
    check("warning" in err and "4096" in err and "trained" in err,
          f"plan -c 8192 on a 4096-token model: no warning: {err.strip()[:300]}")


def nonfinite(specgen, target, draft, tmp):
    # A bf16 checkpoint with one NaN in the (tied) embedding: row 0, column 5 is token 0's logit.
    hf = copy_model(target, os.path.join(tmp, "nan-hf"))
    st = os.path.join(hf, "model.safetensors")
    start, header = safetensors_header(st)
    at = start + header["model.embed_tokens.weight"]["data_offsets"][0] + 2 * 5
    with open(st, "r+b") as f:
        f.seek(at)
        f.write(struct.pack("<H", 0x7fc0))  # bf16 NaN
    expect_refused(specgen, "generate, NaN in a bf16 tensor",
                   ["generate", "-m", hf, "--prompt-ids", "1,2", "-n", "4", "--temp", "0"],
                   ["model.embed_tokens.weight", "element 5 (row 0, column 5)", "nan", "--no-check-tensors"], tmp)
    expect_refused(specgen, "convert, NaN in its input", ["convert", hf, os.path.join(tmp, "x.gguf"), "--type", "q8_0"],
                   ["model.embed_tokens.weight", "nan"], tmp)
    # Skipped, the NaN reaches the logits: the run stops naming the position, not "end token".
    for sampling in (["--temp", "0"], ["--temp", "0.8", "--seed", "1"]):
        err = expect_refused(specgen, f"generate --no-check-tensors {' '.join(sampling)}",
                             ["generate", "-m", hf, "--prompt-ids", "1,2", "-n", "4", "--no-check-tensors",
                              "--stats", "json"] + sampling,
                             ["position 1", "not finite"], tmp, forbidden=["end_token"])
    out = os.path.join(tmp, "nan.f32")
    expect_refused(specgen, "logits --no-check-tensors writes no NaN file",
                   ["logits", "-m", hf, "--prompt-ids", "1,2", "--out", out, "--no-check-tensors"],
                   ["position 0", "not finite", "nothing written"], tmp)
    check(not os.path.exists(out), "logits wrote a file of NaN logits")

    # A q8_0 GGUF whose first block of the embedding has scale d = +Inf.
    gguf = os.path.join(tmp, "q8.gguf")
    rc, _, err = run(specgen, ["convert", target, gguf, "--type", "q8_0"])
    check(rc == 0, f"convert to q8_0: exit {rc}: {err.strip()[:300]}")
    gtype, off = gguf_tensor_offsets(gguf)["token_embd.weight"]
    check(gtype == 8, f"token_embd.weight is ggml type {gtype}, not q8_0")
    with open(gguf, "r+b") as f:
        f.seek(off)
        f.write(struct.pack("<H", 0x7c00))  # f16 +Inf
    for cmd in (["generate", "-m", gguf, "--prompt-ids", "1,2", "-n", "2"],
                ["logits", "-m", gguf, "--prompt-ids", "1,2"],
                ["perplexity", "-m", gguf, "-f", os.path.join(target, "config.json")]):
        expect_refused(specgen, f"{cmd[0]}, Inf block scale in q8_0", cmd,
                       ["token_embd.weight", "q8_0", "block 0 (row 0) has scale d = inf"], tmp)


def outputs(specgen, target, draft, tmp):
    results = os.path.join(tmp, "results.json")
    shutil.copy(os.path.join(os.path.dirname(os.path.dirname(target)), "tests", "bench_runner", "data",
                             "results.json"), results)
    os.symlink(results, os.path.join(tmp, "results-link.json"))
    for name in ("results.json", "results-link.json"):
        expect_refused(specgen, f"report --svg {name} (its input)",
                       ["report", results, "--svg", os.path.join(tmp, name)], ["--svg", "same file as the input"], tmp)
    # A symlink planted at the temporary name report once used is not followed.
    victim = os.path.join(tmp, "victim")
    with open(victim, "w") as f:
        f.write("precious")
    chart = os.path.join(tmp, "chart.svg")
    os.symlink(victim, chart + ".tmp")
    rc, _, err = run(specgen, ["report", results, "--svg", chart])
    check(rc == 0, f"report beside a planted symlink: exit {rc}: {err.strip()[:300]}")
    with open(victim) as f:
        check(f.read() == "precious", "report wrote through a symlink planted at OUT.tmp")
    check(os.path.isfile(chart) and open(chart).read().startswith("<"), "report --svg: no chart written")
    fifo = os.path.join(tmp, "fifo.svg")
    os.mkfifo(fifo)
    expect_refused(specgen, "report --svg FIFO", ["report", results, "--svg", fifo], ["FIFO"], tmp)

    text = os.path.join(tmp, "text.txt")
    shutil.copy(os.path.join(os.path.dirname(os.path.dirname(target)), "models", "heldout.txt"), text)
    expect_refused(specgen, "perplexity --save-logits onto its text",
                   ["perplexity", "-m", target, "-f", text, "-c", "64", "--save-logits", text],
                   ["--save-logits", "same file as the input"], tmp)
    base = os.path.join(tmp, "base.sglp")
    rc, _, err = run(specgen, ["perplexity", "-m", target, "-f", text, "-c", "64", "--save-logits", base])
    check(rc == 0, f"perplexity --save-logits: exit {rc}: {err.strip()[-300:]}")
    expect_refused(specgen, "perplexity --save-logits onto its --kl-base",
                   ["perplexity", "-m", target, "-f", text, "-c", "64", "--kl-base", base, "--save-logits", base],
                   ["--save-logits", "same file as the input"], tmp)


def values(specgen, target, draft, tmp):
    text = os.path.join(tmp, "text.txt")
    shutil.copy(os.path.join(os.path.dirname(os.path.dirname(target)), "models", "heldout.txt"), text)
    base = os.path.join(tmp, "base.sglp")
    rc, _, err = run(specgen, ["perplexity", "-m", target, "-f", text, "-c", "64", "--save-logits", base])
    check(rc == 0, f"perplexity --save-logits: exit {rc}: {err.strip()[-300:]}")
    # SGLP: magic, version, vocab, window (u32), n_tokens, n_positions (u64), tokens, then records of
    # nll, min_log_prob, scale (f32), top (i32), vocab x u16. Position 3's nll becomes NaN.
    with open(base, "r+b") as f:
        head = f.read(32)
        vocab, n_tokens = struct.unpack_from("<I", head, 8)[0], struct.unpack_from("<Q", head, 16)[0]
        f.seek(32 + 4 * n_tokens + 3 * (16 + 2 * vocab))
        f.write(struct.pack("<f", float("nan")))
    expect_refused(specgen, "perplexity --kl-base with a NaN field",
                   ["perplexity", "-m", target, "-f", text, "-c", "64", "--kl-base", base],
                   ["position 3", "nll = nan", "corrupt"], tmp, forbidden=["Mean    KLD"])

    def bench_json(name, counters):
        return json.dumps({"benchmarks": [dict({"name": name, "run_type": "iteration"}, **counters)]})

    for label, body, needles in [
            ("1e308 tokens/s", bench_json("g/k:2", {"tokens_per_second": 1e308}), ["'g/k:2'", "tokens_per_second"]),
            ("acceptance 7", bench_json("g/k:2", {"acceptance_rate": 7}), ["acceptance_rate = 7"]),
            ("draft length 2^31", bench_json("g/k:2147483648", {}), ["g/k:2147483648", "not specgen_bench's"]),
            ("a NaN counter", bench_json("g/k:2", {"speedup": "nan"}).replace('"nan"', "NaN"),
             ["not valid JSON"])]:
        path = os.path.join(tmp, "r.json")
        with open(path, "w") as f:
            f.write(body)
        expect_refused(specgen, f"report with {label}", ["report", path, "--svg", os.path.join(tmp, "c.svg")],
                       needles, tmp)
        check(not os.path.exists(os.path.join(tmp, "c.svg")), f"report with {label}: wrote a chart")


def causes(specgen, target, draft, tmp):
    err = expect_refused(specgen, "chat with invalid UTF-8", ["chat", "-m", target, "-n", "4", "--temp", "0"], [],
                         tmp, stdin=b"caf\xe9 \xff\n")
    check("not valid UTF-8" in err and "fills the context" not in err,
          f"chat: invalid UTF-8 not named as such: {err.strip()[-300:]}")
    expect_refused(specgen, "perplexity -f DIR", ["perplexity", "-m", target, "-f", tmp], ["-f", "is a directory"],
                   tmp, forbidden=["empty"])
    # f32 weights assumed for an untyped preset: said, and the host RAM error names --host-ram.
    expect_refused(specgen, "plan of an untyped synth preset too large for host RAM",
                   ["plan", "-m", "synth:qwen3-235b-a22b", "--vram-budget", "64GiB"],
                   ["host RAM", "--host-ram", "planned as f32"], tmp)
    rc, out, err = run(specgen, ["plan", "-m", "synth:tiny-moe", "--vram-budget", "1GiB"])
    check(rc == 0 and "planned as f32" in err and "synth:tiny-moe:q4_k_m" in err,
          f"plan synth:tiny-moe: the f32 assumption is not said: exit {rc}: {err.strip()[:300]}")
    rc, out, err = run(specgen, ["generate", "-m", target, "--prompt-ids", "1,2", "-n", "2", "--temp", "0",
                                 "--device", "cpu", "--vram-budget", "1GiB"])
    check(rc == 0 and "--vram-budget 1GiB is ignored" in err and "CPU" in err,
          f"--vram-budget on a CPU run: no note: exit {rc}: {err.strip()[:300]}")


def main():
    specgen, source = os.path.abspath(sys.argv[1]), sys.argv[2]
    target = os.path.join(source, "models", "tiny-target")
    draft = os.path.join(source, "models", "tiny-draft")
    if not os.path.exists(os.path.join(target, "model.safetensors")):
        print("FAIL: the committed bundled pair is missing", file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="specgen-hardening-")
    try:
        for section in (resources, writes, silent, messages, overflow, nonfinite, outputs, values, causes):
            sub = os.path.join(tmp, section.__name__)
            os.mkdir(sub)
            before = len(failures)
            try:
                section(specgen, target, draft, sub)
            except Exception as e:  # a case that could not even run counts as a failure
                check(False, f"{section.__name__}: {type(e).__name__}: {e}")
            print(f"{section.__name__}: {len(failures) - before} failure(s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("specgen hardening: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
