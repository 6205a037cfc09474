"""95% intervals, convergence steps and ratios against values computed by hand."""

from __future__ import annotations

import math

import pytest

from pettingllms_cli.analysis.stats import convergence_step, mean_interval, moving_average, ratio, t_quantile, wilson_interval
from pettingllms_cli.training.compare import ratios, success_interval


def test_wilson_matches_hand_computation():
    # 3 of 10, z = 1.959964: center (0.3 + z^2/20) / (1 + z^2/10), half z*sqrt(0.021 + z^2/400) / (1 + z^2/10)
    z = 1.959964
    denom = 1 + z * z / 10
    center = (0.3 + z * z / 20) / denom
    half = z * math.sqrt(0.3 * 0.7 / 10 + z * z / 400) / denom
    lo, hi = wilson_interval(3, 10)
    assert lo == pytest.approx(center - half) and hi == pytest.approx(center + half)
    assert (round(lo, 4), round(hi, 4)) == (0.1078, 0.6032)  # published table value for 3/10


def test_wilson_edges_stay_in_unit_interval():
    assert wilson_interval(4, 4)[1] == pytest.approx(1.0)
    assert wilson_interval(4, 4)[0] == pytest.approx(0.5101, abs=1e-4)  # mirror of 0/4 -> [0, 0.4899]
    assert wilson_interval(0, 4) == (0.0, pytest.approx(0.4899, abs=1e-4))


def test_mean_interval_uses_student_t():
    # values 0.2, 0.4, 0.6: mean 0.4, sd 0.2, se 0.2/sqrt(3), t(2) = 4.303
    mean, half = mean_interval([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4)
    assert half == pytest.approx(4.303 * 0.2 / math.sqrt(3))
    assert t_quantile(2) == 4.303 and t_quantile(10_000) == pytest.approx(1.96, abs=1e-3)
    assert mean_interval([0.7]) == (0.7, None)


def test_moving_average_full_windows():
    assert moving_average([1, 2, 3, 4], 3) == [2.0, 3.0]
    assert moving_average([1, 2], 5) == [1.5]  # window shortened to the run


@pytest.mark.parametrize(
    ("values", "threshold", "window", "expected"),
    [
        ([0.0, 0.2, 0.6, 0.4, 0.8], 0.5, 1, 3),  # raw: first value >= 0.5 is at step 3
        ([0.0, 0.2, 0.6, 0.4, 0.8], 0.5, 2, 4),  # means over steps (2,3)=0.4, (3,4)=0.5 -> step 4
        ([0.0, 0.2, 0.6, 0.4, 0.8], 0.6, 3, 5),  # means 0.267, 0.4, 0.6 -> reached at step 5 only
        ([1.0, 0.0, 0.0, 0.0], 0.6, 2, None),  # a lucky first step does not count once smoothed (means 0.5, 0, 0)
        ([0.5], 0.5, 3, 1),  # threshold reached exactly
    ],
)
def test_convergence_step(values, threshold, window, expected):
    steps = list(range(1, len(values) + 1))
    assert convergence_step(steps, values, threshold, window) == expected


def test_convergence_step_reports_the_metric_step_not_the_index():
    assert convergence_step([10, 20, 30], [0.0, 0.9, 0.9], 0.5, window=2) == 30


def test_ratio_and_compare_ratios():
    assert ratio(0.9, 0.3) == pytest.approx(3.0)
    assert ratio(0.5, 0.0) is None
    a = {"spec": "solo", "final_success": 0.25, "mean_attempts": 3.0, "convergence_step": None}
    b = {"spec": "team", "final_success": 0.75, "mean_attempts": 1.5, "convergence_step": 6.0}
    r = ratios(a, b)
    assert r["pair"] == "team/solo"
    assert r["improvement_factor"] == pytest.approx(3.0)
    assert r["success_gain"] == pytest.approx(0.5)
    assert r["attempts_factor"] == pytest.approx(2.0)  # single / team: the team needs half the attempts
    assert r["convergence_factor"] is None  # the baseline never converged: no honest speed-up
    assert r["improvement_factor_ci"] is None  # one run each: no interval over seeds


def test_factors_have_intervals_over_paired_seeds():
    solo = [{"final_success": 0.4, "final_attempts": 3.0, "convergence_step": 8}] * 2
    team = [
        {"final_success": 0.6, "final_attempts": 1.5, "convergence_step": 4},
        {"final_success": 0.8, "final_attempts": None, "convergence_step": 2},
    ]
    a = {"spec": "solo", "final_success": 0.4, "mean_attempts": 3.0, "convergence_step": 8.0}
    b = {"spec": "team", "final_success": 0.7, "mean_attempts": 1.5, "convergence_step": 3.0}
    r = ratios(a, b, solo, team)
    # Success per seed 1.5 and 2.0: mean 1.75, sd 0.3536, t(1) 12.706 -> half 12.706 * 0.25 = 3.1765, cut at 0.
    assert r["improvement_factor"] == pytest.approx(0.7 / 0.4)
    assert r["improvement_factor_ci"] == pytest.approx([0.0, 1.75 + 12.706 * 0.25])
    assert r["attempts_factor_ci"] is None  # seed 1 solved nothing: one pair left, no interval
    # Convergence 8/4 = 2 and 8/2 = 4: mean 3, sd 1.4142, se 1 -> half 12.706.
    assert r["convergence_factor_ci"] == pytest.approx([0.0, 3.0 + 12.706])


def test_factor_interval_by_hand():
    from pettingllms_cli.analysis.stats import factor_interval

    f = factor_interval([0.9, 0.8, 0.7], [0.3, 0.4, 0.35])  # per seed 3.0, 2.0, 2.0
    per_seed_mean, sd = 7 / 3, math.sqrt(((3 - 7 / 3) ** 2 + 2 * (2 - 7 / 3) ** 2) / 2)
    half = 4.303 * sd / math.sqrt(3)
    assert f["factor"] == pytest.approx(0.8 / 0.35) and f["seeds"] == 3
    assert f["ci"] == pytest.approx([per_seed_mean - half, per_seed_mean + half])


def test_success_interval_over_seeds_and_fallback():
    mean, ci, method = success_interval([0.25, 0.75], 4, 8)
    assert mean == pytest.approx(0.5) and method == "t over seeds"
    half = 12.706 * (math.sqrt(0.125) / math.sqrt(2))  # sd of (0.25, 0.75) = 0.3536, t(1) = 12.706
    assert ci == [max(0.0, 0.5 - half), min(1.0, 0.5 + half)]
    mean, ci, method = success_interval([0.5, 0.5], 4, 8)  # seeds agree: Wilson over the 8 episodes
    assert method == "wilson over episodes" and ci == pytest.approx(list(wilson_interval(4, 8)))
