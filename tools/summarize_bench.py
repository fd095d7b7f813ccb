#!/usr/bin/env python3
"""Google Benchmark JSON (--benchmark_out=FILE --benchmark_out_format=json) summarized two ways.

  summarize_bench.py FILE.json [FILE.json ...] > bench/RESULTS.md
      The whole results file: a header naming the machine, date and commit from the JSON context, then
      one table per suite (kernels, draft decode, target pass, generation, acceptance). Benchmarks the
      suites do not name are left out; a suite with no benchmark in the files is left out.
  summarize_bench.py --lines FILE.json [PREFIX]
      One short line per benchmark with the counters that say how fast, which the tabular console
      output spreads over many columns.

The commit and GPU come from custom context keys (gpu_check.sh passes
--benchmark_context=commit=...,gpu=...); without them the header says "unknown"."""
import json
import re
import sys

# ---- --lines ------------------------------------------------------------------------------------

HEADLINE = ['ms_per_pass', 'mb_streamed', 'gb_per_s', 'floor_ratio', 'hit_rate', 'us_per_token', 'hbm_fraction', 'tokens_per_s', 'ms_per_step', 'acceptance', 'tau',
            'syncs_per_step', 'us_layer_sum', 'us_per_kernel', 'us_token', 'us_per_pass', 'GB/s',
            'hbm_ratio']


def summarize_line(bench, prefix=''):
    line = f"{prefix}{bench['name']}"
    if 'error_message' in bench:
        return f"{line} ERROR {bench['error_message']}"
    line += ''.join(f" {k}={bench[k]:.4g}" for k in HEADLINE if k in bench)
    if bench.get('label'):
        line += f"  [{bench['label']}]"
    return line


# ---- the results file ---------------------------------------------------------------------------

# Name parts Google Benchmark appends that are not arguments.
RUN_SUFFIX = re.compile(r'^(manual_time|real_time|process_time|(iterations|repeats|threads|'
                        r'min_time|min_warmup_time):.*)$')
TO_US = {'ns': 1e-3, 'us': 1.0, 'ms': 1e3, 's': 1e6}


class Case:
    """One benchmark run: family, arguments (name or position -> value), counters, time in us."""

    def __init__(self, bench):
        parts = bench.get('run_name', bench['name']).split('/')
        self.family = parts[0]
        self.args = {}
        self.arg_text = []
        position = 0
        for part in parts[1:]:
            if RUN_SUFFIX.match(part):
                continue
            key, sep, value = part.partition(':')
            if not sep:
                key, value = str(position), part
            self.args[key] = value
            self.arg_text.append(part)
            position += 1
        self.bench = bench
        self.us = bench.get('real_time', 0.0) * TO_US.get(bench.get('time_unit', 'ns'), 1e-3)
        self.label = bench.get('label', '')
        self.error = bench.get('error_message', '')

    def get(self, counter):
        return self.bench.get(counter)

    def case_name(self):
        return '/'.join(self.arg_text) or '-'


def load_cases(paths):
    """Every run of the files, a median aggregate standing for its repetitions where there is one."""
    cases, contexts, medians = [], [], set()
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        contexts.append(data.get('context', {}))
        benches = data.get('benchmarks', [])
        medians |= {b.get('run_name') for b in benches if b.get('aggregate_name') == 'median'}
        cases += [b for b in benches if b.get('run_type') != 'aggregate' or b.get('aggregate_name') == 'median']
    seen, out = set(), []
    for b in cases:
        name = b.get('run_name', b['name'])
        if b.get('run_type') != 'aggregate' and name in medians:
            continue  # its median is used
        if name in seen:
            continue  # repetitions without aggregates: the first
        seen.add(name)
        out.append(Case(b))
    return out, contexts


def fmt(value, spec):
    if value is None:
        return '–'
    if spec == '%':
        return f"{100 * value:.1f}%"
    return format(value, spec)


def named(case, key, names):
    value = case.args.get(key, '?')
    return names.get(value, value)


# A column: (header, function of a Case -> cell text).
def counter(name, spec='.4g'):
    return lambda c: fmt(c.get(name), spec)


def time_us(spec='.1f'):
    return lambda c: fmt(c.us, spec)


CASE = ('case', lambda c: c.case_name())
LABEL = ('label', lambda c: c.label or '')

GEMV_ORDER = {'0': 'fma', '1': 'tensor'}
KV_TYPE = {'0': 'f32', '1': 'f16', '2': 'bf16'}
ACCEPT_MODE = {'0': 'greedy', '1': 'rejection', '2': 'coupled'}
TARGET_MODEL = {'0': 'qwen3-1.7b', '1': 'qwen3-0.6b', '2': 'bundled target'}


class Table:
    """Rows of one or more benchmark families, optionally filtered, with fixed columns."""

    def __init__(self, caption, families, columns, keep=None):
        self.caption, self.families, self.columns, self.keep = caption, families, columns, keep

    def render(self, cases):
        rows = [c for c in cases if c.family in self.families and (self.keep is None or self.keep(c))]
        if not rows:
            return []
        rows.sort(key=lambda c: self.families.index(c.family))  # stable: file order within a family
        out = ([self.caption, ''] if self.caption else []) + ['| benchmark | ' + ' | '.join(h for h, _ in self.columns) + ' |',
               '|---' * (len(self.columns) + 1) + '|']
        for c in rows:
            cells = [f"ERROR {c.error}"] + [''] * (len(self.columns) - 1) if c.error else \
                    [f(c) for _, f in self.columns]
            out.append(f"| {c.family} | " + ' | '.join(cells) + ' |')
        return out + ['']


class Pivot:
    """One family as a grid: a row per value of the other arguments, a column per value of one."""

    def __init__(self, caption, family, column_arg, column_title, row_title, cell):
        self.caption, self.family, self.column_arg = caption, family, column_arg
        self.column_title, self.row_title, self.cell = column_title, row_title, cell

    def render(self, cases):
        rows, columns = {}, []
        for c in cases:
            if c.family != self.family:
                continue
            col = c.args.get(self.column_arg, '?')
            if col not in columns:
                columns.append(col)
            rows.setdefault(self.row_title(c), {})[col] = c
        if not rows:
            return []
        columns.sort(key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v))
        out = [self.caption, '', f"| {self.family} | " +
               ' | '.join(f"{self.column_title} {v}" for v in columns) + ' |',
               '|---' * (len(columns) + 1) + '|']
        for title, by_col in rows.items():
            cells = []
            for v in columns:
                c = by_col.get(v)
                cells.append('' if c is None else f"ERROR {c.error}" if c.error else self.cell(c))
            out.append(f"| {title} | " + ' | '.join(cells) + ' |')
        return out + ['']


def gb_cell(c):
    gbs, ratio = c.get('GB/s'), c.get('hbm_ratio')
    return fmt(gbs, '.0f') + ('' if ratio is None else f" ({fmt(ratio, '.0%')})")


SUITES = [
    ('Kernels', 'Achieved GB/s of the weight (or KV) bytes each launch reads; in parentheses the share '
     'of the HBM peak the benchmark assumes (kernels_bench).', [
         Pivot('GEMV, bf16 weights [out x in], by tokens in the batch:', 'BM_Gemv', '0', 'n =',
               lambda c: f"{c.args.get('1')} x {c.args.get('2')}, {named(c, '3', GEMV_ORDER)} order",
               gb_cell),
         Pivot('Routed experts (128 experts of 2048 x 768, top 8), by positions:', 'BM_RoutedExperts',
               '0', 'n =', lambda c: f"{named(c, '1', GEMV_ORDER)} order", gb_cell),
         Pivot('GEMV on packed blocks (llama.cpp\'s block types, kept as the file stores them), by tokens:',
               'BM_PackedGemv', '1', 'n =',
               lambda c: f"{c.args.get('2')} x {c.args.get('3')}, {c.label or named(c, '0', {})}", gb_cell),
         Pivot('Routed experts on packed blocks (q4_k; 2048 x 768 experts, one token a expert), by experts in the union:',
               'BM_PackedRoutedExperts', '0', 'union', lambda c: 'q4_k', gb_cell),
         Pivot('Decode attention, by queries:', 'BM_AttentionDecode', '0', 'n =',
               lambda c: f"{c.args.get('1')} keys, {named(c, '2', KV_TYPE)} cache", gb_cell),
     ]),
    ('Draft decode', 'One draft token through the decode path named in the label; floor: the token\'s '
     'weight bytes at the HBM rate (e2e_gpu_bench).', [
         Table('', ['BM_DraftDecode', 'BM_DraftDecodeQwen3_1_7B', 'BM_BundledDraftDecode'],
               [CASE, ('us a token', counter('us_per_token', '.1f')),
                ('floor us', counter('floor_us', '.1f')), ('of floor', counter('hbm_fraction', '%')),
                LABEL],
               keep=lambda c: c.args.get('qkv_rows', '0') == '0' and c.args.get('grid', '8') == '8'),
         Table('An empty kernel chain (the cost of a kernel boundary):', ['BM_KernelChainFloor'],
               [CASE, ('us a kernel', counter('us_per_kernel', '.2f'))],
               keep=lambda c: c.args.get('work') in ('0', '1')),
     ]),
    ('Target pass', 'The target\'s pass over n consecutive positions (synthetic weights of the named '
     'shape, tensor-core order); floor as above (e2e_gpu_bench).', [
         Table('', ['BM_TargetPass'],
               [('model', lambda c: named(c, 'model', TARGET_MODEL)), ('n', lambda c: c.args.get('n')),
                ('graph', lambda c: c.args.get('graph')), ('us a pass', counter('us_per_pass', '.0f')),
                ('floor us', counter('floor_us', '.0f')), ('of floor', counter('hbm_fraction', '%')),
                ('host us a pass', counter('us_host_launch', '.0f'))],
               keep=lambda c: c.args.get('order') == '1' and c.args.get('fused') == '1'),
         Table('Device memory the instantiated graphs hold outside the arena:', ['BM_TargetGraphMemory'],
               [('model', lambda c: named(c, 'model', TARGET_MODEL)),
                ('capped', lambda c: c.args.get('capped')), ('graphs', counter('graphs', '.0f')),
                ('kept', counter('live_graphs', '.0f')), ('MiB', counter('graph_mib', '.1f')),
                ('KiB a graph', counter('kib_per_graph', '.0f'))]),
     ]),
    ('Generation', 'Whole generations through the GPU-resident loop: the bundled pair (BM_Speculative'
     'Generation; greedy 1 or T = 0.8) and a Qwen3-sized synthetic pair (BM_SpeculativeSynthPair, '
     'acceptance 1 by construction: cost only); k = 0 is the target alone; adaptive 1: k is the '
     'controller\'s bound. Default overlap and graph-replayed verification only.', [
         Table('', ['BM_SpeculativeGeneration', 'BM_SpeculativeSynthPair'],
               [CASE, ('tokens/s', counter('tokens_per_s', '.0f')),
                ('acceptance', counter('acceptance', '.3f')), ('τ', counter('tau', '.2f')),
                ('mean k', counter('mean_k', '.2f')), ('ms a step', counter('ms_per_step', '.3f')),
                ('host syncs a step', counter('syncs_per_step', '.2f'))],
               keep=lambda c: c.args.get('overlap') == '2' and c.args.get('graph_verify') == '1'),
     ]),
    ('Offload', 'A verification pass of synth:qwen3-30b-a3b at q4_k_m with its experts in pinned host RAM, '
     'streamed into a VRAM expert cache under the budget (streamed_bench); floor: the streamed bytes at '
     '55 GB/s of PCIe (docs/design.md §2). Case names: budget, positions, cold or warm cache, the '
     'routing regime (routing 0: the model\'s own router, 1 uniform, 2 locality).', [
         Table('', ['BM_StreamedVerifyPass', 'BM_StreamedDensePass'],
               [CASE, ('ms a pass', counter('ms_per_pass', '.2f')), ('MB streamed', counter('mb_streamed', '.0f')),
                ('GB/s', counter('gb_per_s', '.1f')), ('of floor', counter('floor_ratio', '%')),
                ('distinct experts', counter('distinct_experts', '.1f')), ('hit rate', counter('hit_rate', '.2f'))]),
         Table('Generation with the streamed target (k 0: no draft; else a synth:qwen3-0.6b q8_0 draft)',
               ['BM_StreamedGeneration'],
               [CASE, ('tokens/s', counter('tokens_per_s', '.1f')), ('MB a token', counter('mb_per_token', '.0f')),
                ('hit rate', counter('hit_rate', '.2f')), ('distinct experts', counter('distinct_experts', '.1f')),
                ('acceptance', counter('acceptance', '.3f')), ('τ', counter('tau', '.2f'))]),
     ]),
    ('Acceptance', 'Sampling and acceptance on the device (kernels_bench; a 151936-token vocabulary). '
     'Case k/mode for BM_VerifySampling (a step\'s processing of k + 1 target rows plus the '
     'acceptance) and BM_Acceptance, mode 0 greedy, 1 rejection, 2 coupled; rows/mode/path for '
     'BM_ProcessAndSample, mode 0 T = 1, 1 the CLI\'s sampling defaults. Acceptance rates: the '
     'generation table.', [
         Table('', ['BM_VerifySampling', 'BM_Acceptance', 'BM_GreedyDraftDraw', 'BM_ProcessAndSample'],
               [CASE, ('us', time_us('.1f')), LABEL],
               keep=lambda c: c.family != 'BM_ProcessAndSample' or c.args.get('2') == '0'),
     ]),
]


def header(contexts):
    def first(key):
        for ctx in contexts:
            if ctx.get(key):
                return str(ctx[key])
        return 'unknown'
    return ['# Benchmark results', '',
            'Regenerated from the benchmarks\' JSON by `tools/summarize_bench.py bench_e2e.json '
            'bench_kernels.json [bench_streamed.json] > bench/RESULTS.md` (the JSON that '
            '`tools/gpu_check.sh stream` and `bench` write); '
            'do not edit by hand. What the floors mean: docs/design.md §3. Experiments not kept: '
            'docs/experiments.md.', '',
            f"Machine: {first('gpu')} ({first('host_name')}, {first('num_cpus')} CPUs); "
            f"date: {first('date')}; commit: {first('commit')}.", '']


def results_markdown(paths):
    cases, contexts = load_cases(paths)
    out = header(contexts)
    for title, intro, parts in SUITES:
        body = []
        for part in parts:
            body += part.render(cases)
        if body:
            out += [f"## {title}", '', intro, ''] + body
    while out and out[-1] == '':
        out.pop()
    return '\n'.join(out) + '\n'


def main(argv):
    if len(argv) < 2 or argv[1] in ('-h', '--help'):
        sys.stderr.write(__doc__ + '\n')
        return 2
    if argv[1] == '--lines':
        if len(argv) < 3:
            sys.stderr.write(__doc__ + '\n')
            return 2
        try:
            with open(argv[2]) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{argv[2]}: no benchmark results ({e})")
            return 1
        prefix = argv[3] + ' ' if len(argv) > 3 else ''
        for bench in data.get('benchmarks', []):
            print(summarize_line(bench, prefix))
        return 0
    try:
        text = results_markdown(argv[1:])
    except (OSError, ValueError, KeyError) as e:
        sys.stderr.write(f"summarize_bench.py: {e}\n")
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
