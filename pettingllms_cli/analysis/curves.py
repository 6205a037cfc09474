"""The held-out success curve as reports draw it: from step 0, each point with its 95% interval.

metrics.jsonl logs `heldout_success_rate` at every `train.eval_every`-th step, on the first
`train.eval_subset` held-out problems. The point before training is not a metrics row: it is the
untrained team's greedy outcome on those same problems, read from eval_before.json's per-episode
records. Without it a rise from 0.46 to 1.00 that happened by the first logged step looks flat.
"""

from __future__ import annotations

from dataclasses import dataclass

from pettingllms_cli.analysis.stats import wilson_interval


@dataclass(frozen=True)
class Point:
    step: int
    rate: float
    episodes: int  # 0: not recorded (no interval)

    @property
    def successes(self) -> int:
        return round(self.rate * self.episodes)


def step_zero(before: dict | None, subset: int | None) -> Point | None:
    """The before-training score on the first `subset` held-out problems (all of them when None), or None when
    eval_before.json does not say (missing, or written before per-episode records).

    >>> step_zero({"per_episode": [{"success": True}, {"success": False}, {"success": True}]}, 2)
    Point(step=0, rate=0.5, episodes=2)
    """
    episodes = (before or {}).get("per_episode")
    if not isinstance(episodes, list) or not episodes:
        return None
    scored = episodes[:subset] if subset else episodes
    return Point(0, sum(bool(e.get("success")) for e in scored if isinstance(e, dict)) / len(scored), len(scored))


def logged_points(rows: list[dict]) -> list[Point]:
    """The held-out points metrics.jsonl holds (steps where `train.eval_every` scored)."""
    points = []
    for r in rows:
        n = r.get("heldout_episodes")
        if r.get("heldout_success_rate") is not None:
            points.append(Point(r["step"], r["heldout_success_rate"], n if type(n) is int and n > 0 else 0))
    return points


def heldout_curve(rows: list[dict], before: dict | None, subset: int | None) -> list[Point]:
    """Step 0, then every logged point; empty when the run logged no held-out point (no `train.eval_every`).

    >>> rows = [{"step": 2, "heldout_success_rate": 1.0, "heldout_episodes": 2}]
    >>> [(p.step, p.rate) for p in heldout_curve(rows, {"per_episode": [{"success": False}] * 3}, 2)]
    [(0, 0.0), (2, 1.0)]
    """
    logged = logged_points(rows)
    if not logged:
        return []
    start = step_zero(before, subset)
    same = start and (start.episodes == logged[0].episodes or not logged[0].episodes)  # the same problems
    return ([start] if same else []) + logged


def before_after(before: dict | None, after: dict | None, last_step: int) -> list[Point]:
    """Two points, before (step 0) and after training (`last_step`), over every held-out problem: the curve of a run
    that scored held-out problems only at its ends."""
    ends = [(0, before), (last_step, after)]
    return [Point(s, e["team_success_rate"], e.get("episodes") or 0) for s, e in ends if e]


def pooled(curves: list[list[Point]]) -> list[Point]:
    """Seeds' curves at the steps every seed scored: the mean over seeds, and (through `series`) a Wilson interval over
    all their episodes together.

    >>> pooled([[Point(0, 0.25, 4), Point(2, 0.75, 4)], [Point(0, 0.0, 4), Point(2, 1.0, 4), Point(4, 1.0, 4)]])
    [Point(step=0, rate=0.125, episodes=8), Point(step=2, rate=0.875, episodes=8)]
    """
    if not curves or not all(curves):
        return []
    common = sorted(set.intersection(*({p.step for p in c} for c in curves)))
    at = [{p.step: p for p in c} for c in curves]
    return [Point(s, sum(c[s].rate for c in at) / len(at), sum(c[s].episodes for c in at)) for s in common]


def series(points: list[Point]) -> tuple[list[int], list[float], tuple[list[float], list[float]]]:
    """(steps, rates, (lower, upper)) of a curve, the band being each point's 95% Wilson interval (none where the
    number of episodes was not recorded)."""
    bounds = [wilson_interval(p.successes, p.episodes) if p.episodes else (p.rate, p.rate) for p in points]
    return [p.step for p in points], [p.rate for p in points], ([lo for lo, _ in bounds], [hi for _, hi in bounds])
