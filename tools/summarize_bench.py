#!/usr/bin/env python3
"""One short line per benchmark of a Google Benchmark JSON file (--benchmark_format=json or
--benchmark_out): the counters that say how fast (us a token, tokens/s, share of HBM), which the
tabular console output spreads over many columns. Usage: summarize_bench.py FILE.json [PREFIX]"""
import json
import sys

HEADLINE = ['us_per_token', 'hbm_fraction', 'tokens_per_s', 'ms_per_step', 'acceptance', 'tau',
            'syncs_per_step', 'us_layer_sum', 'us_per_kernel', 'us_token', 'GB/s', 'hbm_ratio']


def summarize(bench, prefix=''):
    line = f"{prefix}{bench['name']}"
    if 'error_message' in bench:
        return f"{line} ERROR {bench['error_message']}"
    line += ''.join(f" {k}={bench[k]:.4g}" for k in HEADLINE if k in bench)
    if bench.get('label'):
        line += f"  [{bench['label']}]"
    return line


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__ + '\n')
        return 2
    try:
        with open(argv[1]) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{argv[1]}: no benchmark results ({e})")
        return 1
    prefix = argv[2] + ' ' if len(argv) > 2 else ''
    for bench in data.get('benchmarks', []):
        print(summarize(bench, prefix))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
