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
    a = {"spec": "solo", "final_success": 0.25, "mean_attempts": 3.0, "convergence": None}
    b = {"spec": "team", "final_success": 0.75, "mean_attempts": 1.5, "convergence": 6.0}
    r = ratios(a, b)
    assert r["pair"] == "team/solo"
    assert r["improvement_factor"] == pytest.approx(3.0)
    assert r["success_gain"] == pytest.approx(0.5)
    assert r["attempts_factor"] == pytest.approx(2.0)  # single / team: the team needs half the attempts
    assert r["convergence_factor"] is None  # the baseline never converged (rate 0): no finite speed-up
    assert r["improvement_factor_ci"] is None and r["success_gain_ci"] is None  # one run each: no interval over seeds


def test_factors_have_intervals_over_paired_seeds():
    solo = [{"final_success": 0.4, "final_attempts": 3.0, "convergence_step": 8}] * 2
    team = [
        {"final_success": 0.6, "final_attempts": 1.5, "convergence_step": 4},
        {"final_success": 0.8, "final_attempts": None, "convergence_step": 2},
    ]
    a = {"spec": "solo", "final_success": 0.4, "mean_attempts": 3.0, "convergence": 8.0}
    b = {"spec": "team", "final_success": 0.7, "mean_attempts": 1.5, "convergence": 8 / 3}
    r = ratios(a, b, solo, team)
    # Success: factor 0.7/0.4 = 1.75; residuals 0.6 - 1.75*0.4 = -0.1 and +0.1: sd 0.1414, se 0.1414/(sqrt2*0.4) = 0.25.
    assert r["improvement_factor"] == pytest.approx(1.75)
    assert r["improvement_factor_ci"] == pytest.approx([0.0, 1.75 + 12.706 * 0.25])
    assert r["attempts_factor_ci"] is None  # seed 1 solved nothing: one pair left, no interval
    # Convergence rates: team 1/4 and 1/2 (mean 0.375), solo 1/8 each: factor 3; residuals -0.125, 0.125 -> se 1.
    assert r["convergence_factor"] == pytest.approx(3.0)
    assert r["convergence_factor_ci"] == pytest.approx([0.0, 3.0 + 12.706])
    # Paired success differences 0.2 and 0.4: mean 0.3, sd 0.1414, half 12.706 * 0.1414 / sqrt(2), cut at 1.
    assert r["success_gain"] == pytest.approx(0.3) and r["success_gain_ci"] == pytest.approx([0.3 - 1.2706, 1.0])
    assert r["seeds_to_separate"] == 4  # test_seeds_to_separate_by_hand


def test_seeds_to_separate_by_hand():
    from pettingllms_cli.analysis.stats import seeds_needed

    sd = math.sqrt(0.02)  # differences 0.2, 0.4
    assert 3.182 * sd / math.sqrt(4) < 0.3 < 4.303 * sd / math.sqrt(3)  # 4 seeds separate at mean 0.3, 3 do not
    assert seeds_needed(0.3, sd) == 4
    assert seeds_needed(0.0, sd) is None  # no difference: no number of seeds separates it


def test_factor_interval_by_hand():
    from pettingllms_cli.analysis.stats import factor_interval

    f = factor_interval([0.9, 0.8, 0.7], [0.3, 0.4, 0.35])  # ratio of means 0.8 / 0.35
    factor = 0.8 / 0.35
    residuals = [n - factor * d for n, d in [(0.9, 0.3), (0.8, 0.4), (0.7, 0.35)]]  # mean 0
    sd = math.sqrt(sum(r * r for r in residuals) / 2)
    half = 4.303 * sd / math.sqrt(3) / 0.35
    assert f["factor"] == pytest.approx(factor) and f["seeds"] == 3
    assert f["ci"] == pytest.approx([factor - half, factor + half])


def test_factor_point_lies_inside_its_interval():
    """The issue's case: a ratio of means of 0.90 (B worse) had a t interval over per-seed ratios centred near 1.83."""
    from pettingllms_cli.analysis.stats import factor_interval

    f = factor_interval([0.3, 0.6], [0.1, 0.9])
    assert f["factor"] == pytest.approx(0.9)
    lo, hi = f["ci"]
    assert lo <= f["factor"] <= hi
    # Centred on 0.9: residuals 0.3 - 0.09 = 0.21 and -0.21, se 0.297 / sqrt(2) / 0.5 = 0.42 (not around 1.83 +- 14.8).
    assert hi == pytest.approx(0.9 + 12.706 * 0.42, abs=1e-3) and lo == 0.0


def test_never_converged_seeds_are_not_their_last_step():
    """Convergence steps [4, 4, 4] against [4, never, never] in 4-step runs: not 'equally fast'."""
    from pettingllms_cli.analysis.stats import censored_convergence

    solo = [{"final_success": 1.0, "final_attempts": 1.0, "convergence_step": 4, "steps": 4}] * 3
    team = [{"final_success": 1.0, "final_attempts": 1.0, "convergence_step": s, "steps": 4} for s in (4, None, None)]
    a = {"spec": "solo", "final_success": 1.0, "mean_attempts": 1.0, "convergence": 4.0}
    b = {"spec": "team", "final_success": 1.0, "mean_attempts": 1.0, "convergence": 12.0}
    r = ratios(a, b, solo, team)
    assert r["convergence_factor"] == pytest.approx(1 / 3)  # mean rate (1/4 + 0 + 0)/3 over 1/4
    lo, hi = r["convergence_factor_ci"]
    assert lo <= r["convergence_factor"] <= hi
    team_conv = censored_convergence([4, None, None])
    assert team_conv["not_converged_seeds"] == 2 and team_conv["converged_seeds"] == 1
    assert team_conv["cost"] == pytest.approx(12.0) and team_conv["cost"] > 4  # never "converged at its last step"
    assert team_conv["cost_ci"][1] is None  # the interval reaches "never"
    assert censored_convergence([None, None, None])["cost"] is None


def test_convergence_is_counted_in_actions_when_the_arms_steps_differ():
    from pettingllms_cli.training.compare import convergence_unit

    same = {"a": [{"steps": 4}] * 2, "b": [{"steps": 4}] * 2}
    other = {"a": [{"steps": 4}] * 2, "b": [{"steps": 8}] * 2}
    assert convergence_unit("actions", same) == "steps"
    assert convergence_unit("actions", other) == "actions" and convergence_unit("tokens", other) == "tokens"
    # Arm b converges at step 6 of 8 on 10 actions a step (60 actions); arm a at step 4 of 4 on 20 a step (80).
    a = [{"final_success": 1.0, "final_attempts": 1.0, "convergence_actions": 80, "convergence_step": 4}]
    b = [{"final_success": 1.0, "final_attempts": 1.0, "convergence_actions": 60, "convergence_step": 6}]
    row = {"spec": "x", "final_success": 1.0, "mean_attempts": 1.0, "convergence": None}
    assert ratios(row, row, a, b, "actions")["convergence_factor"] == pytest.approx(80 / 60)  # b faster per action
    assert ratios(row, row, a, b, "steps")["convergence_factor"] == pytest.approx(4 / 6)  # though slower per step


def test_spent_reports_totals_and_means_over_every_step():
    from pettingllms_cli.training.compare import spent

    rows = [
        {"step": 1, "sampled_actions": 12, "playout_actions": 6, "intent_actions": 2, "tokens_generated": 100},
        {"step": 2, "sampled_actions": 36, "playout_actions": 0, "intent_actions": 0, "tokens_generated": 300},
    ]
    s = spent(rows)
    assert s["sampled_actions_per_step"] == pytest.approx(24.0) and s["sampled_actions"] == 48  # not step 1's 12
    assert s["actions_total"] == 56 and s["playout_actions"] == 6 and s["intent_actions"] == 2
    assert s["tokens_total"] == 400 and s["tokens_total_per_step"] == pytest.approx(200.0)


def test_spent_splits_wall_time_into_training_and_measurement():
    from pettingllms_cli.training.compare import spent

    rows = [
        {"step": 1, "seconds": 5.0, "training_seconds": 4.0, "on_policy_seconds": 1.0, "heldout_seconds": 2.0},
        {"step": 2, "seconds": 3.0, "training_seconds": 3.0, "on_policy_seconds": 0.0},
    ]
    s = spent(rows)
    assert s["wall_seconds_training"] == pytest.approx(7.0) and s["wall_seconds_measurement"] == pytest.approx(3.0)
    assert s["wall_seconds"] == pytest.approx(10.0)


def test_success_interval_over_seeds_and_fallback():
    mean, ci, method = success_interval([0.25, 0.75], 4, 8)
    assert mean == pytest.approx(0.5) and method == "t over seeds"
    half = 12.706 * (math.sqrt(0.125) / math.sqrt(2))  # sd of (0.25, 0.75) = 0.3536, t(1) = 12.706
    assert ci == [max(0.0, 0.5 - half), min(1.0, 0.5 + half)]
    mean, ci, method = success_interval([0.5, 0.5], 4, 8)  # seeds agree: Wilson over the 8 episodes
    assert method == "wilson over episodes" and ci == pytest.approx(list(wilson_interval(4, 8)))


def test_both_arms_success_intervals_use_one_method():
    """One arm's seeds vary, the other's agree: both get Wilson, never t for one and Wilson for the other."""
    from pettingllms_cli.training.compare import interval_method

    runs = {"solo": [{"final_success": 0.25}, {"final_success": 0.75}], "team": [{"final_success": 0.5}] * 2}
    method = interval_method(runs)
    assert method == "wilson over episodes"
    assert success_interval([0.25, 0.75], 4, 8, method)[2] == success_interval([0.5, 0.5], 4, 8, method)[2] == method
    assert interval_method({"solo": runs["solo"], "team": runs["solo"]}) == "t over seeds"


def test_spent_reads_a_damaged_count_as_zero():
    from pettingllms_cli.training.compare import spent

    s = spent([{"step": 1, "sampled_actions": 4, "seconds": None, "heldout_seconds": "slow"}, {"step": 2, "sampled_actions": 4}])
    assert s["sampled_actions"] == 8 and s["wall_seconds"] == 0.0 and s["effective_optimizer_steps"] is None
