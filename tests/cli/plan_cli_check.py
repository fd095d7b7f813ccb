#!/usr/bin/env python3
"""Runs `specgen plan` as a user would.

usage: plan_cli_check.py SPECGEN SOURCE_DIR

Checks: a Qwen3-30B-A3B-shaped target drafted by a Qwen3-0.6B shape under an 8 GiB budget streams its
experts through a cache that holds a share of them, within budget, with 16 predicted passes whose
bytes and floors grow with n; a budget that holds everything streams nothing; a GGUF file plans the
same as the synth preset it was written from; HF directories plan; a budget below the minimum, too
little host RAM and bad flags exit 1 with a message naming the problem; --help explains every flag;
--calibrate writes the host path's calibration and --moe-host auto/off/only report the path of missed
experts from it (auto without one is off, a broken file an error naming the field).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(specgen, args, env=None):
    p = subprocess.run([specgen] + args, capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


def check_host_path(specgen, pair):
    """plan --calibrate writes the calibration file; plan reads it and says which path missed experts take."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
        calib = os.path.join(tmp, "cache", "specgen", "calibration.json")
        rc, out, err = run(specgen, ["plan", "--calibrate", "--host-threads", "1"], env)
        check(rc == 0, f"plan --calibrate: exit {rc}, stderr: {err.strip()}")
        check("16 of 16" in err, f"plan --calibrate: no progress on stderr: {err[-300:]!r}")
        check(calib in out, f"plan --calibrate does not say where it wrote: {out[:300]!r}")
        try:
            with open(calib) as f:
                c = json.load(f)
            check(c["version"] == 1 and len(c["experts_per_second"]) == 16, f"calibration file: {c}")
            check(all(r > 0 for r in c["experts_per_second"]), "calibration rates")
            check(c["expert"]["hidden"] == 2048 and c["expert"]["ffn"] == 768, "default shape")
        except (OSError, ValueError, KeyError) as e:
            check(False, f"calibration file {calib}: {e}")
        args = pair + ["--vram-budget", "8GiB", "--json"]
        for mode in ["auto", "off", "only"]:
            rc, out, err = run(specgen, ["plan"] + args + ["--moe-host", mode], env)
            check(rc == 0, f"plan --moe-host {mode}: exit {rc}: {err.strip()}")
            try:
                h = json.loads(out)["host_path"]
            except (ValueError, KeyError):
                check(False, f"plan --moe-host {mode}: no host_path in {out[:200]!r}")
                continue
            check(h["mode"] == mode and h["calibration"] == calib, f"--moe-host {mode}: {h['mode']} {h['calibration']}")
            check(len(h["passes"]) == 5, f"--moe-host {mode}: {len(h['passes'])} passes for --draft-max 4")
            for r in h["passes"]:
                missed = r["host_experts"] + r["link_experts"]
                if mode == "off":
                    check(r["host_experts"] == 0, f"--moe-host off: n={r['n']} host {r['host_experts']}")
                if mode == "only":
                    check(r["link_experts"] == 0, f"--moe-host only: n={r['n']} link {r['link_experts']}")
                check(r["layer_seconds"] <= r["all_link_seconds"] + 1e-15 or mode == "only",
                      f"--moe-host {mode}: n={r['n']} slower than all over the link")
                check(missed > 0, f"--moe-host {mode}: n={r['n']} no missed experts at 8GiB")
        rc, out, err = run(specgen, ["plan"] + pair + ["--vram-budget", "8GiB"], env)
        check("missed experts' path (--moe-host auto" in out, f"plan text: no host path section: {out[-600:]!r}")
        # No calibration: auto is off, with a note; a broken file is an error naming it and the field.
        empty = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "empty"))
        rc, out, err = run(specgen, ["plan"] + args + ["--moe-host", "auto"], empty)
        check(rc == 0 and json.loads(out or "{}").get("host_path", {}).get("mode") == "off",
              f"--moe-host auto without a calibration: exit {rc}, {out[:200]!r}")
        check("no calibration" in err, f"--moe-host auto without a calibration: no note: {err.strip()}")
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump(dict(c, experts_per_second=[1] * 15), f)
        for extra, words in [(["--calibration", bad], "experts_per_second"), (["--moe-host", "sometimes"], "--moe-host"),
                             (["--calibration", os.path.join(tmp, "none.json")], "none.json")]:
            rc, out, err = run(specgen, ["plan"] + args + extra, env)
            check(rc == 1 and words in err and out == "", f"plan {' '.join(extra)}: exit {rc}, stderr {err.strip()}")


def plan_json(specgen, args, what):
    rc, out, err = run(specgen, ["plan"] + args + ["--json"])
    check(rc == 0, f"{what}: exit {rc}, stderr: {err.strip()}")
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        check(False, f"{what}: stdout is not one JSON object: {out[:200]!r}")
        return None


def main():
    specgen, source = sys.argv[1], sys.argv[2]
    target, draft = "synth:qwen3-30b-a3b:q4_k", "synth:qwen3-0.6b:q8_0"
    pair = ["-m", target, "-md", draft, "--host-ram", "256GiB"]

    p = plan_json(specgen, pair + ["--vram-budget", "8GiB"], "plan at 8GiB")
    if p is not None:
        check(p["vram_budget"] == 8 << 30, f"budget {p['vram_budget']}")
        check(sum(p["resident"].values()) == p["resident_total"], "resident kinds do not sum to the total")
        check(p["resident_total"] <= p["vram_budget"], f"resident {p['resident_total']} over the budget")
        check(p["total_experts"] == 48 * 128, f"total_experts {p['total_experts']}")
        check(0 < p["expert_cache_slots"] < p["total_experts"], f"slots {p['expert_cache_slots']}")
        check(abs(p["slot_share"] - p["expert_cache_slots"] / p["total_experts"]) < 1e-12, "slot_share")
        check(p["resident"]["draft"] > 0 and p["resident"]["kv_draft"] > 0, "the draft is not resident")
        check(p["streamed"]["experts"] > 0 and p["host_bytes"] >= p["streamed"]["experts"], "experts stream")
        check(p["cache_type"] == "f16" and p["draft_max"] == 4 and p["context"] == 4096, "defaults")
        # Streamed experts: prompts in larger chunks, each streaming nearly the whole model once.
        check(p["prefill_chunk"] == 1024, f"prefill_chunk {p['prefill_chunk']} with streamed experts")
        passes = p["passes"]
        check([x["n"] for x in passes] == list(range(1, 17)), "passes are not n = 1..16")
        for a, b in zip(passes, passes[1:]):
            check(b["streamed_bytes"] > a["streamed_bytes"] and b["floor_seconds"] > a["floor_seconds"],
                  f"pass {b['n']} predicts no more than pass {a['n']}")
        check(abs(passes[0]["distinct_experts_per_layer"] - 8) < 1e-9, "one token routes to 8 experts")
        # A smaller budget holds fewer slots; f32 K/V take more of it.
        q = plan_json(specgen, pair + ["--vram-budget", "6GiB"], "plan at 6GiB")
        if q is not None:
            check(q["expert_cache_slots"] < p["expert_cache_slots"], "6GiB holds no fewer slots than 8GiB")
        q = plan_json(specgen, pair + ["--vram-budget", "8GiB", "--cache-type", "f32", "-c", "8192"], "f32 KV")
        if q is not None:
            check(q["resident"]["kv_target"] == 4 * p["resident"]["kv_target"], "f32 at 2x context: 4x KV")

    rc, out, err = run(specgen, ["plan"] + pair + ["--vram-budget", "8GiB"])
    check(rc == 0, f"text plan: exit {rc}, stderr: {err.strip()}")
    for words in ["in GPU memory", "streamed from pinned host RAM", "expert cache:", "least ms", "how fast",
                  "target alone", "with the draft", "of host RAM, pinned", "assumed rates", "NVIDIA H200",
                  "assumed acceptance: typical"]:
        check(words in out, f"text plan lacks '{words}':\n{out}")
    # User words, not the planner's internal names (the JSON keeps those).
    for internal in ["kv_target", "kv_draft", "slot_table", "expert_cache_slots", "expert_slots", "slots -1"]:
        check(internal not in out, f"text plan says '{internal}':\n{out}")
    # Pass sizes up to --draft-max + 1 (4 + 1), not 16; draft lengths 0..4 in the speed table.
    rows = [l.split() for l in out.splitlines() if l.startswith("  ") and l.split()[:1] and l.split()[0].isdigit()]
    check(sum(1 for r in rows if r[0] == "5") >= 1 and not any(r[0] == "16" for r in rows),
          f"text plan's tables do not stop at n = 5:\n{out}")
    rc, out6, _ = run(specgen, ["plan"] + pair + ["--vram-budget", "8GiB", "--draft-max", "6"])
    check(rc == 0 and any(l.split()[:1] == ["7"] for l in out6.splitlines()), f"--draft-max 6 shows no n = 7:\n{out6}")

    # The speed prediction: locality is never slower than uniform, a draft at acceptance 0.9 beats one at
    # 0.6, and the rows cover draft lengths 0..--draft-max.
    sp = {}
    for acc in ("typical", "0.6", "0.9"):
        q = plan_json(specgen, pair + ["--vram-budget", "8GiB", "--acceptance", acc], f"--acceptance {acc}")
        if q is None:
            continue
        s = q["speed"]
        check([r["draft_length"] for r in s["by_draft_length"]] == list(range(5)), f"{acc}: rows {s}")
        for r in s["by_draft_length"]:
            check(r["tokens_per_second_locality"] >= r["tokens_per_second_uniform"] > 0, f"{acc}: row {r}")
        check(s["rates"]["source"].find("H200") >= 0, f"{acc}: the rates' source is not named: {s['rates']}")
        sp[acc] = s
    if "0.6" in sp and "0.9" in sp:
        k4 = lambda s: s["by_draft_length"][4]
        check(k4(sp["0.9"])["tokens_per_pass"] > k4(sp["0.6"])["tokens_per_pass"], "0.9 yields no more than 0.6")
        check(abs(k4(sp["0.9"])["tokens_per_pass"] - (1 - 0.9 ** 5) / 0.1) < 1e-9, "tokens per pass at 0.9, k 4")
    if "typical" in sp:
        check(sp["typical"]["acceptance"]["by_depth"] == [0.8, 0.75, 0.7, 0.65, 0.6, 0.55], "the typical profile")
    # The flat and list forms of a profile, and what the draft's VRAM costs the expert cache.
    q = plan_json(specgen, pair + ["--vram-budget", "8GiB", "--acceptance", "flat:0.6"], "--acceptance flat:0.6")
    if q is not None and "0.6" in sp:
        check(q["speed"]["acceptance"]["by_depth"] == [0.6], f"flat:0.6: {q['speed']['acceptance']}")
        check(q["speed"]["by_draft_length"] == sp["0.6"]["by_draft_length"], "flat:0.6 predicts unlike 0.6")
        lost = q["slots_lost_to_draft"]
        check(lost > 0 and lost == q["expert_cache_slots_without_draft"] - q["expert_cache_slots"],
              f"slots lost to the draft: {lost}, {q['expert_cache_slots_without_draft']}, {q['expert_cache_slots']}")
    q = plan_json(specgen, pair + ["--vram-budget", "8GiB", "--acceptance", "0.9,0.5"], "--acceptance 0.9,0.5")
    if q is not None:
        check(abs(q["speed"]["by_draft_length"][2]["tokens_per_pass"] - (1 + 0.9 + 0.45)) < 1e-9,
              f"0.9,0.5 at k 2: {q['speed']['by_draft_length'][2]}")
    rc, out, err = run(specgen, ["plan"] + pair + ["--vram-budget", "8GiB"])
    check(rc == 0 and "expert-cache slots from the target" in out, f"text plan lacks the slots the draft takes:\n{out}")
    # Without a draft: the target alone, one row.
    q = plan_json(specgen, ["-m", target, "--host-ram", "256GiB", "--vram-budget", "8GiB"], "no draft")
    if q is not None:
        check(len(q["speed"]["by_draft_length"]) == 1, f"no draft: {q['speed']}")

    p = plan_json(specgen, pair + ["--vram-budget", "80GiB"], "plan at 80GiB")
    if p is not None:
        check(p["expert_cache_slots"] == -1 and p["host_bytes"] == 0, "80GiB does not hold everything")
        check(all(x["streamed_bytes"] == 0 for x in p["passes"]), "a resident plan streams")
        check(p["prefill_chunk"] == 256, f"prefill_chunk {p['prefill_chunk']} with every expert resident")

    # A GGUF file plans as the preset it was written from.
    tmp = tempfile.mkdtemp(prefix="specgen_plan_")
    try:
        gguf = os.path.join(tmp, "tiny-moe.gguf")
        rc, _, err = run(specgen, ["synth", "--preset", "tiny-moe", "--type", "q8_0", "--out", gguf])
        check(rc == 0, f"synth tiny-moe: exit {rc}: {err.strip()}")
        # A budget between the minimum and what holds every expert streams them.
        probe = plan_json(specgen, ["-m", gguf, "--vram-budget", "1GiB"], "GGUF plan at 1GiB") or {}
        budget = str((probe.get("minimum_budget", 0) + probe.get("resident_total", 0)) // 2)
        a = plan_json(specgen, ["-m", gguf, "--vram-budget", budget, "--host-ram", "1GiB"], "GGUF plan")
        b = plan_json(specgen, ["-m", "synth:tiny-moe:q8_0", "--vram-budget", budget, "--host-ram", "1GiB"],
                      "synth plan")
        if a is not None and b is not None:
            for key in ["resident", "expert_cache_slots", "host_bytes", "minimum_budget", "passes"]:
                check(a[key] == b[key], f"GGUF and synth plans differ in {key}: {a[key]} / {b[key]}")
            check(0 < a["expert_cache_slots"] < a["total_experts"], f"the GGUF plan streams no experts: {a}")
    finally:
        shutil.rmtree(tmp)
    # The bundled pair (Hugging Face directories) fits a small budget whole.
    p = plan_json(specgen, ["-m", os.path.join(source, "models", "tiny-target"), "-md",
                            os.path.join(source, "models", "tiny-draft"), "--vram-budget", "2GiB"], "HF pair")
    if p is not None:
        check(p["expert_cache_slots"] == -1 and p["resident"]["draft"] > 0, "the bundled pair does not fit 2GiB")

    check_host_path(specgen, pair)

    # Errors: each exits 1 and names the problem.
    for args, words in [
        (pair + ["--vram-budget", "100MiB"], "below the minimum of"),
        (["-m", target, "--vram-budget", "8GiB", "--host-ram", "1GiB"], "host RAM"),
        (["-m", target, "--vram-budget", "8GiB", "--host-ram", "1GiB"], "--host-ram"),
        (pair + ["--vram-budget", "8GiB", "--acceptance", "often"], "--acceptance"),
        (pair + ["--vram-budget", "8GiB", "--acceptance", "1.5"], "--acceptance"),
        (pair + ["--vram-budget", "8GiB", "--acceptance", "0.9,2"], "value 2"),
        (["-m", target], "--vram-budget"),
        (["-m", target, "--vram-budget", "lots"], "lots"),
        (["-m", target, "--vram-budget", "8GiB", "--cache-type", "q4"], "--cache-type"),
        (pair + ["--vram-budget", "8GiB", "--draft-max", "40"], "--draft-max"),
        (["-m", target, "--vram-budget", "8GiB", "-c", "-1"], "-c"),
        (["-m", "synth:no-such-preset", "--vram-budget", "8GiB"], "no-such-preset"),
        (["-m", "/nonexistent/model.gguf", "--vram-budget", "8GiB"], "/nonexistent/model.gguf"),
        (["-m", target, "-md", "synth:tiny-dense", "--vram-budget", "8GiB"], "vocabulary"),
    ]:
        rc, out, err = run(specgen, ["plan"] + args)
        check(rc == 1, f"plan {' '.join(args)}: exit {rc}, want 1")
        check(words in err, f"plan {' '.join(args)}: stderr does not name '{words}': {err.strip()}")
        check(out == "", f"plan {' '.join(args)}: printed to stdout on error: {out[:200]!r}")

    rc, out, _ = run(specgen, ["plan", "--help"])
    check(rc == 0, f"plan --help: exit {rc}")
    for flag in ["--model", "--model-draft", "--vram-budget", "--ctx-size", "--draft-max", "--cache-type",
                 "--host-ram", "--acceptance", "--json", "--calibrate", "--calibration", "--moe-host"]:
        check(flag in out, f"plan --help does not explain {flag}")

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("plan CLI checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
