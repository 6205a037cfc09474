"""A step's batch (issue 16): no problem twice in one step, every problem once per epoch, a function of the step."""

from __future__ import annotations

import pytest

from pettingllms_cli.envs.base import Problem
from pettingllms_cli.training.loop import problems_for_step


@pytest.mark.parametrize(("size", "n"), [(10, 4), (7, 3), (5, 4), (6, 6), (3, 5)])
def test_a_step_never_holds_the_same_problem_twice(smoke_spec, size, n):
    spec = smoke_spec.model_copy(update={"train": smoke_spec.train.model_copy(update={"problems_per_step": n})})
    problems = [Problem(f"p{i}", f"q{i}", i) for i in range(size)]
    batches = [problems_for_step(problems, spec, step) for step in range(40)]
    for batch in batches:
        ids = [p.id for p in batch]
        assert len(ids) == len(set(ids)) == min(n, size), ids
    if n < size:  # epochs: every problem once per `size` positions of the stream
        stream = [p.id for batch in batches for p in batch]
        for start in range(0, len(stream) - size + 1, size):
            assert sorted(stream[start : start + size]) == sorted(p.id for p in problems)
    assert batches[7] == problems_for_step(problems, spec, 7)  # a function of the step alone (resume)
