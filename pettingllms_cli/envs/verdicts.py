"""`reward.balance_verdicts`, beside the judges it serves: each judge's tally of the cases it met (how many of its
judged actions were due approval and how many due sending back, review.py's `DUE`) and the weights that make the two
kinds count equally in its advantages. The training loop adds the tally up over ranks and steps and weights the
advantages with it (training/advantages.py)."""

from __future__ import annotations

from collections.abc import Sequence

Tally = dict[str, list[int]]  # judge -> [actions due approval, actions due sending back]


def verdict_tally(agents: Sequence[str], due: Sequence[bool | None]) -> Tally:
    """Per agent, how many of its judged actions called for approval and how many for sending back.

    Under `tree` rollouts a group's K candidates judge one case, so this is K x the cases and the
    shares are the cases' own; under `parallel` each action is its own case.

    >>> verdict_tally(["v", "v", "v", "v", "p"], [True, True, False, False, None])
    {'v': [2, 2]}
    """
    tally: Tally = {}
    for agent, d in zip(agents, due, strict=True):
        if d is not None:
            tally.setdefault(agent, [0, 0])[0 if d else 1] += 1
    return tally


def add_tallies(seen: Tally, step: Tally) -> Tally:
    """The cases so far: `seen` plus this step's, for the agents of `step` that judged any (in `step`'s order).

    >>> add_tallies({"v": [0, 4]}, {"p": [0, 0], "v": [2, 2]})
    {'v': [2, 6]}
    """
    total = {}
    for agent, (approve, send_back) in step.items():
        was_approve, was_send_back = seen.get(agent, [0, 0])
        if approve + send_back + was_approve + was_send_back:  # a judge
            total[agent] = [was_approve + approve, was_send_back + send_back]
    return total


def verdict_weights(agents: Sequence[str], due: Sequence[bool | None], seen: Tally) -> list[float]:
    """Weights that make a judge's two kinds of case count equally: an action whose due verdict is c weighs
    n / (2 n_c), n_c of the agent's n judged actions so far (`seen`, from `verdict_tally`) having called for c; 1 for
    other samples.

    A judge that cannot tell the cases apart is pushed towards approving by the first kind and towards sending back by
    the second, each in proportion to how often it occurs; weighted, the two pushes cancel and a constant verdict gains
    nothing in expectation, while a verdict that follows the case still does.

    >>> verdict_weights(["v", "v", "p"], [True, False, None], {"v": [1, 3]})
    [2.0, 0.6666666666666666, 1.0]
    """
    weights = []
    for agent, d in zip(agents, due, strict=True):
        approve, send_back = seen.get(agent, [0, 0])
        n_c = approve if d else send_back
        weights.append(1.0 if d is None or n_c == 0 else (approve + send_back) / (2 * n_c))
    return weights
