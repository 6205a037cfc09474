"""Which role of the selection team a held-out score moves: the selector's choice, or the filler's call.

    python bench/select_roles.py RUN_DIR [RUN_DIR ...]

For each `function_select_v0` team run, reads its held-out scores before and after training (one greedy episode
per problem: compare_eval.json where `compare` rescored the run on its fixed held-out set, else eval_before.json
and eval_after.json) and the run's spec.yaml (which data, which held-out problems), and prints, before and after:
- `selector_right`: episodes whose selector named a function the ground truth calls;
- `filler_right_given_choice`: of those, episodes the filler's call solved (a wrong choice is never solved:
  the filler then sees the wrong signature);
- `solved`: episodes solved, `selector_right` x `filler_right_given_choice`.
A gain in `solved` that comes with `filler_right_given_choice` falling was bought by the selector alone.
Last line per run: `<run> selector_right=B->A filler_right_given_choice=B->A solved=B->A` (counts).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pettingllms_cli.jsonio import read_json
from pettingllms_cli.spec.experiment import load_spec
from pettingllms_cli.training.loop import held_out_problems


def right_names(run: Path) -> dict[str, set[str]]:
    """{held-out question: the function names its ground truth calls}, for the held-out set the run was scored on."""
    return {p.question: {next(iter(g)) for g in p.answer} for p in held_out_problems(load_spec(run / "spec.yaml"))}


def evals(run: Path) -> tuple[dict, dict]:
    """(before, after): compare's scoring of its fixed held-out set (compare_eval.json) where compare rescored the
    run, else train's own eval_before.json and eval_after.json."""
    scored = read_json(run / "compare_eval.json")
    if scored is not None:
        return scored["initial"], scored["final"]
    return read_json(run / "eval_before.json"), read_json(run / "eval_after.json")


def tally(scored: dict, right: dict[str, set[str]]) -> tuple[int, int, int]:
    """(selector right, solved with a right choice, solved) over one eval output's episodes."""
    chosen_right = solved_right = solved = 0
    for episode in scored["per_episode"]:
        selector = next(t for t in episode["transcript"] if t["role"] == "selector")
        ok = selector.get("function") in right[episode["question"]]
        chosen_right += ok
        solved_right += ok and bool(episode["success"])
        solved += bool(episode["success"])
    return chosen_right, solved_right, solved


def main(runs: list[str]) -> None:
    for run in map(Path, runs):
        right = right_names(run)
        (b_sel, b_fill, b_ok), (a_sel, a_fill, a_ok) = (tally(e, right) for e in evals(run))
        n = len(right)
        print(f"{run}: {n} held-out problems")
        print(f"  selector_right             {b_sel:3d} -> {a_sel:3d}")
        share = [f"{fill}/{sel} ({fill / max(sel, 1):.0%})" for fill, sel in ((b_fill, b_sel), (a_fill, a_sel))]
        print(f"  filler_right_given_choice  {share[0]} -> {share[1]}")
        print(f"{run} selector_right={b_sel}->{a_sel} filler_right_given_choice={b_fill}->{a_fill} solved={b_ok}->{a_ok}")


if __name__ == "__main__":
    main(sys.argv[1:])
