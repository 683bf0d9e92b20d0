#!/usr/bin/env python3
"""Head ÷ baseline figures of ferry-bench catch-up results (results.json).

Runs are paired by file and round (`run`): the system whose name holds
"baseline" against the other. For each figure: the median of the pairs'
ratios, the ratio of the medians, the geometric mean of the ratios with a
90 % bootstrap interval. Then, because a broker's CPU per GB follows the
run's length (much of it goes by the second), the least-squares fit over
all runs of each process's CPU seconds = a + b*copy_s + d*head, giving the
head's extra CPU at equal copy time (d, with its 90 % interval).

Usage: tools/bench/ratios.py results.json [results.json ...]
Standard library only.
"""
import json
import math
import random
import statistics as st
import sys

FIGURES = ['mb_per_s', 'cpu_s_per_gb', 'source_cpu_s_per_gb', 'target_cpu_s_per_gb', 'all3', 'mid']
CPU = ['target_cpu_s_per_gb', 'source_cpu_s_per_gb', 'cpu_s_per_gb']


def mid(r):
    """Records per second between 10 % and 90 % of the copy (series: cumulative records each second)."""
    s, n = r['series'], r['records']

    def t_at(x):
        prev_t, prev_v = 0, 0
        for i, v in enumerate(s):
            t = i + 1
            if v >= x:
                return prev_t + (x - prev_v) / max(1, v - prev_v) * (t - prev_t)
            prev_t, prev_v = t, v
        return None
    a, b = t_at(0.1 * n), t_at(0.9 * n)
    return 0.8 * n / (b - a) if a is not None and b is not None and b > a else None


def value(r, f):
    if f == 'all3':
        return r['cpu_s_per_gb'] + r['source_cpu_s_per_gb'] + r['target_cpu_s_per_gb']
    if f == 'mid':
        return mid(r)
    return r[f]


def solve(a, b):
    n = len(a)
    m = [row[:] + [bb] for row, bb in zip(a, b)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(m[r][i]))
        m[i], m[p] = m[p], m[i]
        for r in range(n):
            if r != i:
                f = m[r][i] / m[i][i]
                m[r] = [x - f * y for x, y in zip(m[r], m[i])]
    return [m[i][n] / m[i][i] for i in range(n)]


def main(paths):
    runs = []
    for p in paths:
        runs += [(p, r) for r in json.load(open(p))['results'] if r['workload'] == 'catch-up']
    head = {(p, r['run']): r for p, r in runs if 'baseline' not in r['system']}
    base = {(p, r['run']): r for p, r in runs if 'baseline' in r['system']}
    keys = sorted(set(head) & set(base))
    print(f'{len(keys)} pairs')
    random.seed(1)
    for f in FIGURES:
        ratios = [value(head[k], f) / value(base[k], f) for k in keys if value(head[k], f) and value(base[k], f)]
        logs = [math.log(x) for x in ratios]
        boots = sorted(math.exp(st.mean(random.choices(logs, k=len(logs)))) for _ in range(4000))
        hm = st.median([value(head[k], f) for k in keys if value(head[k], f)])
        bm = st.median([value(base[k], f) for k in keys if value(base[k], f)])
        print(f'{f:20s} median of pairs {st.median(ratios):.3f}  ratio of medians {hm / bm:.3f}  '
              f'geo-mean {math.exp(st.mean(logs)):.3f} (90% {boots[200]:.3f}-{boots[3800]:.3f})  '
              f'pairs range {min(ratios):.2f}-{max(ratios):.2f}')
    print(f'\nat equal copy time ({len(runs)} runs):')
    for f in CPU:
        x = [[1, r['copy_s'], 0 if 'baseline' in r['system'] else 1] for _, r in runs]
        y = [r[f] * r['bytes'] / 1e9 for _, r in runs]
        xtx = [[sum(row[i] * row[j] for row in x) for j in range(3)] for i in range(3)]
        c = solve(xtx, [sum(row[i] * v for row, v in zip(x, y)) for i in range(3)])
        resid = [v - sum(a * b for a, b in zip(c, row)) for row, v in zip(x, y)]
        s2 = sum(e * e for e in resid) / (len(y) - 3)
        se = (s2 * solve(xtx, [0, 0, 1])[2]) ** 0.5
        bm = st.mean(v for v, row in zip(y, x) if row[2] == 0)
        print(f'{f:20s} {c[1]:.3f} s per copy-second; head extra {c[2]:+.3f} s (se {se:.3f}) = '
              f'{100 * c[2] / bm:+.1f}% of the baseline mean {bm:.2f} s (90% {100 * (c[2] - 1.645 * se) / bm:+.1f}..{100 * (c[2] + 1.645 * se) / bm:+.1f}%)')


if __name__ == '__main__':
    if len(sys.argv) < 2 or sys.argv[1] in ('-h', '--help'):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    main(sys.argv[1:])
