#!/usr/bin/env python3
"""Where one verification pass goes, kernel by kernel, from ncu's CSV.

Reads `ncu --csv --print-units base --metrics gpu__time_duration.sum` output of streamed_bench run with
SPECGEN_PROFILE_PASS=1 (each BM_ResidentVerifyPass benchmark profiles one pass between
cudaProfilerStart and Stop; `tools/gpu_check.sh profile` runs it). The passes are told apart by the
order of their kernels: the CSV holds `passes` passes of equal kernel count, in the order they ran.
Prints, per pass, the kernels' summed time and the kernels by total time. ncu runs each kernel alone
with its caches flushed, so a time here bounds the kernel's time inside the graph from above.
  tools/ncu_pass_summary.py NCU.csv [--passes 2] [--names "n=1,n=16"]
"""
import argparse
import collections
import csv
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--names", default="")
    args = ap.parse_args()
    rows = [r for r in csv.reader(open(args.csv, newline="")) if len(r) > 10]
    if not rows or "Kernel Name" not in rows[0] or "Metric Value" not in rows[0]:
        sys.exit(f"{args.csv}: not ncu --csv output with Kernel Name and Metric Value columns")
    head, rows = rows[0], rows[1:]
    ki, vi = head.index("Kernel Name"), head.index("Metric Value")
    seq = []
    for r in rows:
        try:
            seq.append((re.sub(r"\(.*", "", r[ki])[:80], float(r[vi].replace(",", ""))))
        except ValueError:
            continue
    if not seq or len(seq) % args.passes:
        sys.exit(f"{args.csv}: {len(seq)} kernel times do not split into {args.passes} equal passes")
    names = args.names.split(",") if args.names else [f"pass {i + 1}" for i in range(args.passes)]
    per = len(seq) // args.passes
    for i in range(args.passes):
        part = seq[i * per:(i + 1) * per]
        agg = collections.defaultdict(lambda: [0, 0.0])
        for k, v in part:
            agg[k][0] += 1
            agg[k][1] += v
        total = sum(v for _, v in part)
        print(f"== {names[i] if i < len(names) else f'pass {i + 1}'}: {len(part)} kernels, {total / 1e3:.1f} us")
        for k, (c, v) in sorted(agg.items(), key=lambda x: -x[1][1])[:25]:
            print(f"{v / 1e3:9.1f} us {c:5d}x {v / c / 1e3:7.2f} us each  {k}")


if __name__ == "__main__":
    main()
