#!/usr/bin/env python3
"""tools/summarize_bench.py on hand-made Google Benchmark JSON (the shape --benchmark_out writes).
Usage: summarize_bench_test.py PATH/TO/summarize_bench.py"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = None


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def iteration(name, real_time, time_unit='ms', **counters):
    return dict(name=name, run_name=name, run_type='iteration', iterations=3, real_time=real_time,
                cpu_time=real_time, time_unit=time_unit, **counters)


E2E = {
    'context': {'date': '2026-12-03T10:00:00+00:00', 'host_name': 'gpu-box', 'num_cpus': 16,
                'commit': 'abc1234', 'gpu': 'NVIDIA H200'},
    'benchmarks': [
        iteration('BM_DraftDecode/ctx:32/path:2/narrow:0/pdl:1/grid:8/qkv_rows:0/gu_rows:0/iterations:3',
                  0.57, us_per_token=571.8, floor_us=283.9, hbm_fraction=0.4965, label='graph, PDL'),
        iteration('BM_DraftDecode/ctx:32/path:2/narrow:0/pdl:1/grid:8/qkv_rows:4/gu_rows:3/iterations:3',
                  0.62, us_per_token=627.0),
        iteration('BM_TargetPass/model:0/n:5/fused:1/order:1/graph:1/iterations:3', 1.785,
                  us_per_pass=1785, floor_us=819, hbm_fraction=0.459, us_host_launch=6),
        iteration('BM_TargetPass/model:0/n:5/fused:1/order:0/graph:0/iterations:3', 3.0,
                  us_per_pass=3333),
        iteration('BM_SpeculativeGeneration/k:2/greedy:1/overlap:2/adaptive:0/graph_verify:1/iterations:25',
                  10.0, tokens_per_s=11776, acceptance=0.768, tau=2.5, mean_k=2, ms_per_step=0.2,
                  syncs_per_step=1),
        iteration('BM_SpeculativeGeneration/k:2/greedy:1/overlap:0/adaptive:0/graph_verify:1/iterations:25',
                  10.0, tokens_per_s=4444),
        dict(iteration('BM_SpeculativeSynthPair/k:4/sampling:0/order:1/overlap:2/adaptive:0/graph_verify:1'
                       '/iterations:3', 10.0), error_occurred=True, error_message='out of budget'),
    ],
}

KERNELS = {
    'context': {'date': '2026-12-03T10:05:00+00:00', 'host_name': 'gpu-box'},
    'benchmarks': [
        iteration('BM_Gemv/1/14336/4096/1/manual_time', 35.0, 'us', **{'GB/s': 3413, 'hbm_ratio': 0.81}),
        iteration('BM_Gemv/16/14336/4096/1/manual_time', 60.0, 'us', **{'GB/s': 1947, 'hbm_ratio': 0.46}),
        iteration('BM_Gemv/1/14336/4096/0/manual_time', 36.0, 'us', **{'GB/s': 3300, 'hbm_ratio': 0.79}),
        iteration('BM_Acceptance/4/1/manual_time', 28900, 'ns'),
        dict(iteration('BM_Acceptance/4/1/manual_time', 1, 'ns'), name='BM_Acceptance/4/1/manual_time_mean',
             run_type='aggregate', aggregate_name='mean'),
        iteration('BM_VerifySampling/4/1/manual_time', 999.0, 'us'),
        dict(iteration('BM_VerifySampling/4/1/manual_time', 97.3, 'us'),
             name='BM_VerifySampling/4/1/manual_time_median', run_type='aggregate', aggregate_name='median'),
    ],
}


class SummarizeBenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.e2e = os.path.join(cls.dir.name, 'bench_e2e.json')
        cls.kernels = os.path.join(cls.dir.name, 'bench_kernels.json')
        for path, data in ((cls.e2e, E2E), (cls.kernels, KERNELS)):
            with open(path, 'w') as f:
                json.dump(data, f)
        result = run(cls.e2e, cls.kernels)
        assert result.returncode == 0, result.stderr
        cls.md = result.stdout
        cls.lines = cls.md.splitlines()

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def row(self, *parts):
        """The one table row holding every part (fails if none or several do)."""
        rows = [l for l in self.lines if l.startswith('|') and all(p in l for p in parts)]
        self.assertEqual(len(rows), 1, f"rows with {parts}: {rows}")
        return [c.strip() for c in rows[0].strip('|').split('|')]

    def test_header_names_machine_date_and_commit_from_the_context(self):
        self.assertEqual(self.lines[0], '# Benchmark results')
        self.assertIn('Machine: NVIDIA H200 (gpu-box, 16 CPUs); date: 2026-12-03T10:00:00+00:00; '
                      'commit: abc1234.', self.md)

    def test_missing_context_keys_read_unknown(self):
        out = run(self.kernels).stdout
        self.assertIn('Machine: unknown (gpu-box, unknown CPUs)', out)
        self.assertIn('commit: unknown.', out)

    def test_one_section_per_suite_present_in_order(self):
        sections = [l for l in self.lines if l.startswith('## ')]
        self.assertEqual(sections, ['## Kernels', '## Draft decode', '## Target pass', '## Generation',
                                    '## Acceptance'])
        kernels_only = run(self.kernels).stdout
        self.assertNotIn('## Draft decode', kernels_only)
        self.assertNotIn('Device memory the instantiated graphs', self.md)  # no BM_TargetGraphMemory

    def test_gemv_is_a_grid_of_token_counts(self):
        self.assertIn('| BM_Gemv | n = 1 | n = 16 |', self.md)
        self.assertEqual(self.row('14336 x 4096, tensor order'),
                         ['14336 x 4096, tensor order', '3413 (81%)', '1947 (46%)'])
        self.assertEqual(self.row('14336 x 4096, fma order'), ['14336 x 4096, fma order', '3300 (79%)', ''])

    def test_suites_keep_only_their_default_cases(self):
        cells = self.row('BM_DraftDecode')
        self.assertEqual(cells[2:6], ['571.8', '283.9', '49.6%', 'graph, PDL'])
        self.assertNotIn('627.0', self.md)  # forced rows a warp
        self.assertEqual(self.row('BM_TargetPass')[1:], ['qwen3-1.7b', '5', '1', '1785', '819', '45.9%', '6'])
        self.assertNotIn('3333', self.md)  # FMA order, eager
        self.assertEqual(self.row('BM_SpeculativeGeneration')[2:],
                         ['11776', '0.768', '2.50', '2.00', '0.200', '1.00'])
        self.assertNotIn('4444', self.md)  # overlap off

    def test_errors_are_shown_not_dropped(self):
        self.assertEqual(self.row('BM_SpeculativeSynthPair')[1], 'ERROR out of budget')

    def test_a_median_stands_for_its_repetitions_and_times_are_in_us(self):
        self.assertEqual(self.row('BM_VerifySampling')[1:3], ['4/1', '97.3'])
        self.assertEqual(self.row('BM_Acceptance')[1:3], ['4/1', '28.9'])  # ns -> us, mean ignored

    def test_lines_mode_prints_one_line_per_benchmark(self):
        result = run('--lines', self.e2e, 'v1')
        self.assertEqual(result.returncode, 0)
        lines = result.stdout.splitlines()
        self.assertEqual(len(lines), len(E2E['benchmarks']))
        self.assertTrue(lines[0].startswith('v1 BM_DraftDecode/ctx:32/'))
        self.assertIn('us_per_token=571.8', lines[0])
        self.assertIn('ERROR out of budget', lines[-1])

    def test_a_bad_file_is_an_error_and_writes_nothing(self):
        bad = os.path.join(self.dir.name, 'bad.json')
        with open(bad, 'w') as f:
            f.write('{"benchmarks": [')
        for args in ((bad,), (self.e2e, os.path.join(self.dir.name, 'missing.json'))):
            result = run(*args)
            self.assertEqual(result.returncode, 1)
            self.assertEqual(result.stdout, '')
            self.assertIn('summarize_bench.py:', result.stderr)


if __name__ == '__main__':
    SCRIPT = sys.argv.pop(1)
    unittest.main()
