"""Small statistics for eval and compare: 95% intervals, smoothing, convergence (censored), paired ratios and differences.

Pure functions on plain lists, so the numbers in reports can be checked by hand.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

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


def mean(values: Iterable[float | None], empty: float | None = None) -> float | None:
    """The mean; None when a value is None (a run logged before the figure existed), `empty` when there are none.

    >>> mean([True, False, True, True]), mean([1.0, None]), mean([], empty=0.0)
    (0.75, None, 0.0)
    """
    values = list(values)
    if not values:
        return empty
    return None if any(v is None for v in values) else sum(values) / len(values)


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
    """An improvement factor over paired seeds: the ratio of the means, and its 95% interval from the same estimator.

    Seeds are paired by index (seed k of one arm with seed k of the other: same seed, same problems).
    Pairs with a missing value (e.g. no episode solved, so no attempts figure) are left out. The interval
    linearises the ratio of means (the ratio estimator's standard error): factor +- t * sd(n_k - factor * d_k)
    / (sqrt(N) * mean d), cut at 0. It is centred on the factor, so the point lies inside it by construction
    (a t interval over per-seed ratios estimates their mean instead, another number). None with fewer than two
    pairs or a zero mean denominator.

    >>> f = factor_interval([0.6, 0.8], [0.4, 0.4])  # residuals -0.1, 0.1: sd 0.1414, se 0.25 -> half 12.706 * 0.25
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
    mean_n, mean_d = sum(n for n, _ in pairs) / len(pairs), sum(d for _, d in pairs) / len(pairs)
    factor = ratio(mean_n, mean_d)
    if factor is None or len(pairs) < 2:
        return {"factor": factor, "ci": None, "seeds": len(pairs)}
    _, half = mean_interval([n - factor * d for n, d in pairs])  # residuals have mean 0: only the half-width is used
    half = (half or 0.0) / abs(mean_d)
    return {"factor": factor, "ci": [max(0.0, factor - half), factor + half], "seeds": len(pairs)}


def paired_difference(a: list[float | None], b: list[float | None], bounds: tuple[float, float] | None = None) -> dict:
    """B minus A over paired seeds (same seed, same problems): the mean difference, its 95% t interval (cut to
    `bounds`, e.g. -1 and 1 for success rates), and how many seeds would make that interval exclude 0 at the
    observed spread (`seeds_to_separate`).

    >>> d = paired_difference([0.5, 0.25, 0.5], [0.75, 0.5, 0.5])  # differences 0.25, 0.25, 0: sd 0.1443
    >>> round(d["difference"], 4), [round(x, 3) for x in d["ci"]], d["separate"], d["seeds_to_separate"]
    (0.1667, [-0.192, 0.525], False, 6)
    >>> paired_difference([0.5], [0.75])["ci"] is None
    True
    """
    diffs = [y - x for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    mean, half = mean_interval(diffs)
    if half is None:
        none = {"ci": None, "separate": None, "seeds_to_separate": None}
        return {"difference": mean if diffs else None, "seeds": len(diffs), **none}
    sd = half * math.sqrt(len(diffs)) / t_quantile(len(diffs) - 1)
    lo, hi = bounds or (-math.inf, math.inf)
    return {
        "difference": mean,
        "ci": [max(lo, mean - half), min(hi, mean + half)],
        "seeds": len(diffs),
        "separate": abs(mean) > half,
        "seeds_to_separate": seeds_needed(mean, sd),
    }


def seeds_needed(mean: float, sd: float, most: int = 1000) -> int | None:
    """The fewest seeds (2 or more) whose 95% t interval around `mean` excludes 0 at spread `sd`; None past `most`
    or with no difference.

    >>> seeds_needed(0.1, 0.2), seeds_needed(0.1, 0.0), seeds_needed(0.0, 0.2)
    (18, 2, None)
    """
    if mean == 0:
        return None
    for n in range(2, most + 1):
        if t_quantile(n - 1) * sd / math.sqrt(n) < abs(mean):
            return n
    return None


def convergence_rates(costs: list[float | None]) -> list[float]:
    """Per seed, 1 / (steps, actions or tokens to reach the threshold); 0 for a seed that never reached it.

    A never-converged seed is infinitely slow, never "converged at its last step".

    >>> convergence_rates([4, None, 2])
    [0.25, 0.0, 0.5]
    """
    return [0.0 if c is None else 1.0 / max(c, 1e-12) for c in costs]


def censored_convergence(costs: list[float | None]) -> dict:
    """An arm's convergence over seeds, never-converged seeds included: the mean rate (convergence_rates) with its 95%
    t interval, and the same figures as a cost (1 / rate: the harmonic mean, `None` for never).

    >>> c = censored_convergence([4, None, None])
    >>> round(c["rate"], 4), c["cost"], c["converged_seeds"], c["not_converged_seeds"]
    (0.0833, 12.0, 1, 2)
    >>> c["cost_ci"][0] > 0 and c["cost_ci"][1] is None  # the rate's interval reaches 0: possibly never
    True
    >>> censored_convergence([None, None])["cost"] is None
    True
    """
    rates = convergence_rates(costs)
    rate, half = mean_interval(rates)
    rate_ci = None if half is None else [max(0.0, rate - half), rate + half]
    return {
        "rate": rate,
        "rate_ci": rate_ci,
        "cost": 1.0 / rate if rate > 0 else None,
        "cost_ci": None if rate_ci is None else [1.0 / rate_ci[1] if rate_ci[1] > 0 else None, _inverse(rate_ci[0])],
        "converged_seeds": sum(c is not None for c in costs),
        "not_converged_seeds": sum(c is None for c in costs),
    }


def _inverse(x: float) -> float | None:
    return 1.0 / x if x > 0 else None
