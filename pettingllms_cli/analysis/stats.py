"""Small statistics for eval and compare: 95% intervals, smoothing, convergence steps, ratios.

Pure functions on plain lists, so the numbers in reports can be checked by hand.
"""

from __future__ import annotations

import math

Z95 = 1.959964  # two-sided 95% normal quantile
# Two-sided 95% Student t quantiles by degrees of freedom; seeds are few, so the normal value would be too narrow.
_T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    25: 2.060,
    30: 2.042,
    40: 2.021,
    60: 2.000,
    120: 1.980,
}


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (sensible at 0/n and n/n, unlike the normal one).

    >>> [round(x, 4) for x in wilson_interval(5, 10)]
    [0.2366, 0.7634]
    >>> [round(x, 4) for x in wilson_interval(0, 4)]
    [0.0, 0.4899]
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    """
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def t_quantile(df: int) -> float:
    """Two-sided 95% Student t quantile; the nearest tabled df at or below, the normal value past 120.

    >>> t_quantile(1), t_quantile(4), t_quantile(27), t_quantile(500)
    (12.706, 2.776, 2.06, 1.959964)
    """
    if df > 120:
        return Z95
    return _T95[max(k for k in _T95 if k <= max(df, 1))]


def mean_interval(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95% t interval (None for fewer than two values).

    >>> m, h = mean_interval([0.2, 0.4])
    >>> round(m, 6), round(h, 4)
    (0.3, 1.2706)
    >>> mean_interval([0.5])
    (0.5, None)
    """
    n = len(values)
    if n == 0:
        return float("nan"), None
    mean = sum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t_quantile(n - 1) * sd / math.sqrt(n)


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing means over full windows: element i is the mean of values[i : i + window].

    >>> moving_average([0, 1, 2, 3], 2)
    [0.5, 1.5, 2.5]
    """
    window = max(1, min(window, len(values)))
    return [sum(values[i : i + window]) / window for i in range(len(values) - window + 1)]


def convergence_step(steps: list[int], values: list[float], threshold: float, window: int = 1) -> int | None:
    """First step at which the trailing `window`-step mean of `values` reaches `threshold`; None if never.

    The step reported is the last step of the first window that reaches it (a window is
    shortened to the whole run when the run is shorter).

    >>> convergence_step([1, 2, 3, 4, 5], [0, 0.25, 0.5, 0.75, 1.0], 0.5)
    3
    >>> convergence_step([1, 2, 3, 4, 5], [0, 0.25, 0.5, 0.75, 1.0], 0.5, window=2)
    4
    >>> convergence_step([1, 2], [0.0, 0.1], 0.5) is None
    True
    """
    if not values:
        return None
    window = max(1, min(window, len(values)))
    for i, mean in enumerate(moving_average(values, window)):
        if mean >= threshold - 1e-12:
            return steps[i + window - 1]
    return None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is 0.

    >>> ratio(0.6, 0.3), ratio(1.0, 0.0), ratio(None, 2.0)
    (2.0, None, None)
    """
    if numerator is None or denominator is None or denominator == 0 or math.isnan(numerator) or math.isnan(denominator):
        return None
    return numerator / denominator


def factor_interval(numerators: list[float | None], denominators: list[float | None]) -> dict:
    """An improvement factor over seeds: the ratio of the means, and a 95% t interval over per-seed ratios.

    Seeds are paired by index (seed k of one arm with seed k of the other: same seed, same problems).
    Pairs with a missing value (e.g. no episode solved, so no attempts figure) are left out; the
    interval needs two or more per-seed ratios with a nonzero denominator, else it is None.

    >>> f = factor_interval([0.6, 0.8], [0.4, 0.4])  # per seed 1.5 and 2.0: 1.75 +- 12.706 * 0.25
    >>> round(f["factor"], 4), [round(x, 3) for x in f["ci"]], f["seeds"]
    (1.75, [0.0, 4.927], 2)
    >>> factor_interval([0.5], [0.25])
    {'factor': 2.0, 'ci': None, 'seeds': 1}
    >>> factor_interval([None, 2.0], [1.0, 0.0])["factor"] is None
    True
    """
    pairs = [(n, d) for n, d in zip(numerators, denominators, strict=True) if n is not None and d is not None]
    if not pairs:
        return {"factor": None, "ci": None, "seeds": 0}
    factor = ratio(sum(n for n, _ in pairs) / len(pairs), sum(d for _, d in pairs) / len(pairs))
    per_seed = [n / d for n, d in pairs if d]
    mean, half = mean_interval(per_seed) if len(per_seed) == len(pairs) else (None, None)
    ci = [max(0.0, mean - half), mean + half] if half is not None else None
    return {"factor": factor, "ci": ci, "seeds": len(pairs)}
