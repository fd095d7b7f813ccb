#!/usr/bin/env python3
"""specgen_bench end to end on the bundled pair: a tiny config (2 prompts, 16 tokens) run with Google
Benchmark's own flags gives one benchmark per pairing x draft length, each with every counter, in
plausible ranges; a bad config exits 1 naming the file and line, and writes no results.

Values a run cannot use (temperature = nan, max_new_tokens past the context, one budget twice, budgets
on a CPU run, a prompt that fills the context) exit 1 naming the cause, with no result recorded.

--parallel 1,2 runs the benchmarks again through the serving pool: aggregate tokens/s, per sequence
latency, shared passes, and the acceptance of each fixed draft length equal to the one-loop run's.

Then `specgen report` on those results: a table with every pairing, and an SVG that parses as XML
with one polyline per pairing in the tokens/s panel and per drafting pairing in the acceptance panel.

usage: specgen_bench_check.py SPECGEN_BENCH SOURCE_DIR [SPECGEN]
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

COUNTERS = ["acceptance_rate", "mean_accepted_length", "mean_draft_length", "tokens_per_second",
            "time_to_first_token", "speedup", "baseline_tokens_per_second", "draft_length", "adaptive"]
# The offload counters: on the CPU every expert is resident and nothing streams.
OFFLOAD_COUNTERS = {"expert_cache_slots": -1, "h2d_bytes_per_token": 0, "expert_cache_hit_rate": 0,
                    "mean_distinct_experts": 0, "prefill_chunk": 256}


def config_text(source):
    models = os.path.join(source, "models")
    return f"""
[defaults]
target = "{models}/tiny-target"
draft = "{models}/tiny-draft"
draft_lengths = [2, "adaptive"]
adaptive_max = 4
temperature = 0.0
device = "cpu"
context = 128
max_new_tokens = 16
prompts = "held_out"

[prompts.held_out]
file = "{models}/pair_prompts.json"
limit = 2

[[pairing]]
name = "greedy"

[[pairing]]
name = "sampled"
temperature = 0.8
accept = "coupled"
draft_lengths = [3]

[[pairing]]
name = "plain"
draft = "none"
"""


def check_report(specgen, results, tmp, check):
    svg = os.path.join(tmp, "chart.svg")
    run = subprocess.run([specgen, "report", results, "--svg", svg], capture_output=True, text=True, timeout=60)
    check(run.returncode == 0, f"report: exit {run.returncode}: {run.stderr}")
    header = run.stdout.splitlines()[2] if len(run.stdout.splitlines()) > 2 else ""
    check([c.strip() for c in header.strip("|").split("|")] == ["k", "greedy", "sampled", "plain"],
          f"report: side-by-side header {header!r}")
    try:
        root = ET.parse(svg).getroot()
    except (ET.ParseError, OSError) as e:
        check(False, f"report: the SVG does not parse: {e}")
        return
    ns = "{http://www.w3.org/2000/svg}"
    panels = {g.get("id"): g for g in root.iter(ns + "g")}

    def series(panel):
        return [p.get("data-series") for p in panels[panel].iter(ns + "polyline")] if panel in panels else None
    check(series("tokens_per_second") == ["greedy", "sampled", "plain"], f"report: {series('tokens_per_second')}")
    check(series("acceptance_rate") == ["greedy", "sampled"], f"report: {series('acceptance_rate')}")
    # The heading names the device, the models and the sampling (issue 47), from the results' context.
    heading = " | ".join("".join(t.itertext()) for t in panels["title"].iter(ns + "text")) if "title" in panels else ""
    for part in ["specgen_bench on CPU", "tiny-target + tiny-draft", "tiny-target alone", "greedy",
                 "temp=0.8", "accept coupled"]:
        check(part in heading, f"report: the chart's heading {heading!r} lacks {part!r}")
    missing_svg = os.path.join(tmp, "none.svg")
    run = subprocess.run([specgen, "report", os.path.join(tmp, "missing.json"), "--svg", missing_svg],
                         capture_output=True, text=True, timeout=60)
    check(run.returncode == 1 and "missing.json: cannot open" in run.stderr, f"report of a missing file: {run.stderr}")
    check(not os.path.exists(missing_svg), "report of a missing file wrote an SVG")


def check_regimes(bench, source, tmp, specgen, check):
    """Acceptance regimes and the modelled draft length: one benchmark per draft length x regime, each
    with the prediction beside it; the scripted acceptance follows its profile; the report's budget
    chart draws one line per regime."""
    models = os.path.join(source, "models")
    config = os.path.join(tmp, "regimes.toml")
    with open(config, "w") as f:
        f.write(f"""
[defaults]
target = "{models}/tiny-target"
draft = "{models}/tiny-draft"
temperature = 0.0
device = "cpu"
context = 256
max_new_tokens = 48
prompts = "held_out"

[prompts.held_out]
file = "{models}/pair_prompts.json"
limit = 4

[[pairing]]
name = "regime"
draft_lengths = [4, "modelled"]
adaptive_max = 4
acceptance = ["flat:0.9", "typical"]
""")
    out = os.path.join(tmp, "regimes.json")
    run = subprocess.run([bench, "--config", config, "--benchmark_min_time=0.01", f"--benchmark_out={out}"],
                         capture_output=True, text=True, timeout=600)
    check(run.returncode == 0, f"regimes: exit {run.returncode}: {run.stderr[-2000:]}")
    results = json.load(open(out)) if os.path.exists(out) else {"benchmarks": []}
    by_name = {b["name"]: b for b in results["benchmarks"]}
    expected = [f"regime/k:{k}/accept:{a}/real_time" for k in ("4", "modelled4") for a in ("flat:0.9", "typical")]
    check(sorted(by_name) == sorted(expected), f"regimes: benchmarks {sorted(by_name)}")
    for name, b in by_name.items():
        for c in ("predicted_tokens_per_second_uniform", "predicted_tokens_per_second_locality",
                  "predicted_speedup_uniform", "predicted_speedup_locality"):
            check(b.get(c, 0) > 0, f"{name}: {c} {b.get(c)!r}")
    # acceptance_rate is accepted over drafted: at k = 4 under flat 0.9 a pass keeps 0.9 + 0.81 + 0.73 +
    # 0.66 = 3.1 of its 4 drafts on average (0.77), under the typical profile 0.8 + 0.6 + 0.42 + 0.27 =
    # 2.1 (0.52); over about 60 passes each the two are far apart.
    flat, typical = by_name.get(expected[0]), by_name.get(expected[1])
    if flat and typical:
        check(flat["acceptance_rate"] > typical["acceptance_rate"] + 0.1,
              f"regimes: acceptance flat:0.9 {flat['acceptance_rate']}, typical {typical['acceptance_rate']}")
        check(0.6 < flat["acceptance_rate"] < 1.0, f"regimes: flat:0.9 accepted {flat['acceptance_rate']}")
    if specgen is None or not os.path.exists(out):
        return
    svg = os.path.join(tmp, "budget.svg")
    run = subprocess.run([specgen, "report", out, "--svg-budget", svg], capture_output=True, text=True, timeout=60)
    check(run.returncode == 0, f"regimes report: exit {run.returncode}: {run.stderr}")
    check("speedup over the target alone by VRAM budget" in run.stdout, f"regimes report: {run.stdout}")
    try:
        root = ET.parse(svg).getroot()
    except (ET.ParseError, OSError) as e:
        check(False, f"regimes report: the SVG does not parse: {e}")
        return
    ns = "{http://www.w3.org/2000/svg}"
    lines = [p.get("data-series") for p in root.iter(ns + "polyline")]
    check(lines == ["regime [flat:0.9]", "regime [typical]"], f"regimes report: budget chart lines {lines}")


def check_routing(bench, tmp, check):
    """Routing regimes: an MoE target runs once per regime, named .../routing:REGIME (own unnamed)."""
    config = os.path.join(tmp, "routing.toml")
    with open(config, "w") as f:
        f.write("""
[defaults]
target = "synth:tiny-moe"
draft = "none"
temperature = 0.0
device = "cpu"
context = 128
max_new_tokens = 16
prompts = "ids"

[prompts.ids]
ids = [[1, 2, 3, 4, 5], [9, 8, 7]]

[[pairing]]
name = "rt"
routing = ["own", "uniform", "locality"]
""")
    out = os.path.join(tmp, "routing.json")
    run = subprocess.run([bench, "--config", config, "--benchmark_min_time=0.01", f"--benchmark_out={out}"],
                         capture_output=True, text=True, timeout=300)
    check(run.returncode == 0, f"routing: exit {run.returncode}: {run.stderr[-2000:]}")
    results = json.load(open(out)) if os.path.exists(out) else {"benchmarks": []}
    by_name = {b["name"]: b for b in results["benchmarks"]}
    expected = ["rt/k:0/real_time", "rt/k:0/routing:uniform/real_time", "rt/k:0/routing:locality/real_time"]
    check(sorted(by_name) == sorted(expected), f"routing: benchmarks {sorted(by_name)}")
    for name, b in by_name.items():
        check(b.get("tokens_per_second", 0) > 0 and b.get("baseline_tokens_per_second", 0) > 0,
              f"{name}: tokens/s {b.get('tokens_per_second')!r}, baseline {b.get('baseline_tokens_per_second')!r}")


def check_parallel(bench, config, tmp, single, check):
    """--parallel 1,2: every benchmark again through the serving pool, 1 and 2 sequences at once. The
    two prompts each give the tokens they give alone (batch invariance), so the fixed-k runs accept
    exactly what the one-loop runs accept; with 2 at once the CPU's target passes carry both."""
    out = os.path.join(tmp, "parallel.json")
    run = subprocess.run([bench, "--config", config, "--parallel", "1,2", "--benchmark_filter=greedy/k:2|sampled|plain",
                          "--benchmark_min_time=0.05", f"--benchmark_out={out}"],
                         capture_output=True, text=True, timeout=600)
    check(run.returncode == 0, f"--parallel: exit {run.returncode}: {run.stderr[-2000:]}")
    results = json.load(open(out)) if os.path.exists(out) else {"benchmarks": []}
    by_name = {b["name"]: b for b in results["benchmarks"]}
    for base in ["greedy/k:2", "sampled/k:3", "plain/k:0"]:
        one = single.get(base + "/real_time")
        for n in (1, 2):
            name = f"{base}/parallel:{n}/real_time"
            b = by_name.get(name)
            check(b is not None, f"--parallel: no {name} in {sorted(by_name)}")
            if b is None or one is None:
                continue
            check(b.get("parallel") == n, f"{name}: parallel {b.get('parallel')}")
            check(b.get("tokens_per_second", 0) > 0 and 0 < b.get("time_to_first_token", 0) <= b.get("sequence_latency", 0) < 60,
                  f"{name}: tokens/s {b.get('tokens_per_second')}, ttft {b.get('time_to_first_token')}, "
                  f"latency {b.get('sequence_latency')}")
            # Two sequences at once share passes (between 1 and 2 sequences a pass); one never does.
            spp = b.get("sequences_per_pass", 0)
            check(spp == 1 if n == 1 else 1 < spp <= 2, f"{name}: sequences_per_pass {spp}")
            for counter in ("acceptance_rate", "mean_accepted_length", "mean_draft_length"):
                check(b.get(counter) == one.get(counter),
                      f"{name}: {counter} {b.get(counter)} differs from the one-loop run's {one.get(counter)}")
    run = subprocess.run([bench, "--config", config, "--parallel", "2,0"], capture_output=True, text=True, timeout=60)
    check(run.returncode == 1 and "--parallel 2,0: '0' is not a number of sequences in [1, 64]" in run.stderr,
          f"--parallel 2,0: exit {run.returncode}: {run.stderr[-300:]!r}")


def main():
    bench, source = sys.argv[1], os.path.abspath(sys.argv[2])
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    # --help explains --config before Google Benchmark's own flags; no --config is an error saying so.
    run = subprocess.run([bench, "--help"], capture_output=True, text=True, timeout=60)
    check(run.returncode == 0 and "--config FILE" in run.stdout and "pairing config" in run.stdout
          and "benchmark_filter" in run.stdout + run.stderr, f"--help: exit {run.returncode}: {run.stdout[:300]!r}")
    run = subprocess.run([bench], capture_output=True, text=True, timeout=60)
    check(run.returncode == 1 and "no --config FILE" in run.stderr, f"no --config: {run.returncode} {run.stderr!r}")

    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "tiny.toml")
        with open(config, "w") as f:
            f.write(config_text(source))
        out = os.path.join(tmp, "results.json")
        run = subprocess.run([bench, "--config", config, "--benchmark_min_time=0.05",
                              f"--benchmark_out={out}"],
                             capture_output=True, text=True, timeout=600)
        check(run.returncode == 0, f"exit {run.returncode}: {run.stderr[-2000:]}")
        results = json.load(open(out)) if os.path.exists(out) else {"benchmarks": []}
        by_name = {b["name"]: b for b in results["benchmarks"]}
        expected = {"greedy/k:2/real_time": 2, "greedy/k:adaptive4/real_time": 4,
                    "sampled/k:3/real_time": 3, "plain/k:0/real_time": 0}
        check(sorted(by_name) == sorted(expected), f"benchmarks {sorted(by_name)}")
        check(results.get("context", {}).get("pairing_config") == config, "context lacks pairing_config")
        context = results.get("context", {})
        check(context.get("specgen_device") == "CPU" and
              context.get("specgen_models") == "tiny-target + tiny-draft, tiny-target alone" and
              context.get("specgen_sampling", "").startswith("greedy; temp=0.8"),
              f"context: device, models, sampling {context}")
        for name, k in expected.items():
            b = by_name.get(name)
            if b is None:
                continue
            missing = [c for c in COUNTERS if c not in b]
            check(not missing, f"{name}: missing counters {missing}")
            if missing:
                continue
            check(b["draft_length"] == k, f"{name}: draft_length {b['draft_length']}")
            check(b["tokens_per_second"] > 0 and b["baseline_tokens_per_second"] > 0,
                  f"{name}: tokens/s {b['tokens_per_second']}, baseline {b['baseline_tokens_per_second']}")
            check(abs(b["speedup"] - b["tokens_per_second"] / b["baseline_tokens_per_second"]) < 1e-6 * b["speedup"] + 1e-9,
                  f"{name}: speedup {b['speedup']} is not tokens/s over the baseline's")
            check(0 < b["time_to_first_token"] < 60, f"{name}: time_to_first_token {b['time_to_first_token']}")
            if k == 0:
                check(b["acceptance_rate"] == 0 and b["mean_accepted_length"] == 1 and b["mean_draft_length"] == 0,
                      f"{name}: plain decoding drafted: {b}")
            else:
                check(0 < b["acceptance_rate"] <= 1, f"{name}: acceptance {b['acceptance_rate']}")
                # tau = 1 + accepted per pass, at most 1 + the drafted length per pass.
                check(1 < b["mean_accepted_length"] <= 1 + b["mean_draft_length"] + 1e-9,
                      f"{name}: tau {b['mean_accepted_length']} against mean k {b['mean_draft_length']}")
                check(0 < b["mean_draft_length"] <= k, f"{name}: mean k {b['mean_draft_length']} > {k}")
            check(b["adaptive"] == (1 if "adaptive" in name else 0), f"{name}: adaptive {b['adaptive']}")
            for counter, value in OFFLOAD_COUNTERS.items():
                check(b.get(counter) == value, f"{name}: {counter} {b.get(counter)!r}, want {value} on the CPU")

        if len(sys.argv) > 3 and os.path.exists(out):
            check_report(sys.argv[3], out, tmp, check)
        check_parallel(bench, config, tmp, by_name, check)

        check_regimes(bench, source, tmp, sys.argv[3] if len(sys.argv) > 3 else None, check)
        check_routing(bench, tmp, check)

        # A bad config: an error naming file, line and key; nothing run, no results file.
        bad = os.path.join(tmp, "bad.toml")
        with open(bad, "w") as f:
            f.write(config_text(source).replace('name = "plain"', 'name = "plain"\ndraft_max = 4'))
        bad_out = os.path.join(tmp, "bad.json")
        run = subprocess.run([bench, "--config", bad, f"--benchmark_out={bad_out}"],
                             capture_output=True, text=True, timeout=120)
        check(run.returncode == 1, f"bad config: exit {run.returncode}")
        check(f"{bad}:28: draft_max: unknown key" in run.stderr, f"bad config: stderr {run.stderr!r}")
        check(not os.path.exists(bad_out), "bad config: a results file was written")
        # Values refused where they are read (issue 48): each exits 1 naming the cause (file, line and
        # key where the config holds it), before anything is timed, and writes no results file.
        text = config_text(source)
        for label, body, needle in [
                ("temperature = nan", text.replace("temperature = 0.0", "temperature = nan"),
                 ":7: temperature: must be a finite number, got nan"),
                ("max_new_tokens above the context", text.replace("max_new_tokens = 16", "max_new_tokens = 4096"),
                 ":10: max_new_tokens: pairing 'greedy': max_new_tokens 4096 does not fit in a context of 128"),
                ("one budget twice", text.replace('device = "cpu"', 'device = "auto"\nvram_budget = ["1GiB", "1024MiB"]'),
                 'vram_budget: lists "1GiB" and "1024MiB", the same size'),
                ("a prompt that fills the context", text.replace('prompts = "held_out"', 'prompts = "long"') +
                 "\n[prompts.long]\nids = [[" + ", ".join(["5"] * 120) + "]]\n",
                 "the context of 128 filled after")]:
            path = os.path.join(tmp, "values.toml")
            with open(path, "w") as f:
                f.write(body)
            values_out = os.path.join(tmp, "values.json")
            run = subprocess.run([bench, "--config", path, "--benchmark_min_time=0.01", f"--benchmark_out={values_out}"],
                                 capture_output=True, text=True, timeout=300)
            check(run.returncode == 1, f"{label}: exit {run.returncode}")
            check(needle in run.stderr + run.stdout, f"{label}: the cause is not named: {run.stderr[-400:]!r}")
            if label != "a prompt that fills the context":  # refused before Google Benchmark writes
                check(not os.path.exists(values_out), f"{label}: a results file was written")
            elif os.path.exists(values_out):  # the failed benchmark is marked so, never a result
                for b in json.load(open(values_out))["benchmarks"]:
                    check(b.get("error_occurred") is True and "tokens_per_second" not in b,
                          f"{label}: reported as a result: {b}")
                os.remove(values_out)
        # Budgets on a pairing that runs on the CPU here (device auto, no CUDA) would all run the one CPU
        # benchmark: refused, not dropped.
        path = os.path.join(tmp, "budget.toml")
        with open(path, "w") as f:
            f.write(text.replace('device = "cpu"', 'device = "auto"\nvram_budget = ["1GiB", "2GiB"]'))
        run = subprocess.run([bench, "--config", path, "--benchmark_list_tests=true"], capture_output=True,
                             text=True, timeout=120)
        if run.returncode != 0:  # no CUDA device here
            check(run.returncode == 1 and ":9: vram_budget" in run.stderr and "runs on the CPU here" in run.stderr,
                  f"budgets on the CPU: exit {run.returncode}: {run.stderr[-400:]!r}")
        else:
            listed = run.stdout.split()
            check(len(listed) == len(set(listed)), f"budgets: duplicate benchmarks listed: {listed}")
        # configs/qwen3-moe.toml runs on "cuda": without a CUDA device it is refused before anything
        # loads; with one, its benchmarks are listed (one per pairing x draft length x budget).
        run = subprocess.run([bench, "--config", os.path.join(source, "configs", "qwen3-moe.toml"),
                              "--benchmark_list_tests=true"], capture_output=True, text=True, timeout=120)
        if run.returncode == 1:
            check("has no CUDA device" in run.stderr, f"cuda pairing without CUDA: {run.stderr[-300:]!r}")
        else:
            listed = run.stdout.split()
            check(run.returncode == 0 and len(listed) == 6 and "synth_qwen3-30b-a3b_plain/k:0/budget:120GiB/real_time" in listed,
                  f"qwen3-moe.toml listing: exit {run.returncode}, {listed}")
        run = subprocess.run([bench], capture_output=True, text=True, timeout=60)
        check(run.returncode == 1 and "usage" in run.stderr, "no --config: no usage line")

    for f in failures:
        print("FAIL:", f)
    print("specgen_bench_check:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
