"""math_tool_v0 judges answers as GSM8K's official rule does (issue 34): identical verdicts under the default scoring.

The oracle below is the official rule written out (openai/grade-school-math, `dataset.py`: `extract_answer` reads
the first `#### ` followed by `-?[0-9.,]+` and drops commas, `is_correct` compares that string with the reference's).
The env's own answer format is `Answer: <number>`, so a candidate written as `Answer: X` must get the verdict the
official rule gives `#### X`; a candidate in GSM8K's own format (a worked solution ending in `#### X`) must get the
official verdict on the same text. `scoring: lenient` may accept more, but only the forms docs/envs.md lists.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from pettingllms_cli.envs.base import Problem
from pettingllms_cli.envs.math_tool import CALL_PREFIX, MathToolEnv

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SHARED_GSM8K = SHARED / "gsm8k" / "test_200.jsonl"
needs_shared = pytest.mark.skipif(not SHARED_GSM8K.is_file(), reason="../shared/data is not checked out beside the repo")
# Records of our own beside the shipped ones: large golds (where a relative tolerance let a wrong integer pass),
# a negative, a zero and a gold the worked solution writes with a thousands comma.
OWN = [
    {"question": "A farm sells for $1,450,000. What is the price?", "answer": "It is 1,450,000.\n#### 1,450,000"},
    {"question": "Cost 109,200,000?", "answer": "100,000,000 + 9,200,000 = <<100000000+9200000=109200000>>\n#### 109200000"},
    {"question": "From 2 down by 5?", "answer": "2 - 5 = <<2-5=-3>>-3\n#### -3"},
    {"question": "Nothing left of 7 after 7?", "answer": "7 - 7 = <<7-7=0>>0\n#### 0"},
]


# --- the oracle: the official rule ------------------------------------------------------------------------------
OFFICIAL_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
INVALID = "[invalid]"


def official_extract(completion: str) -> str:
    match = OFFICIAL_RE.search(completion)
    return match.group(1).strip().replace(",", "") if match else INVALID


def official_is_correct(completion: str, record: dict) -> bool:
    gold = official_extract(record["answer"])
    assert gold != INVALID
    return official_extract(completion) == gold


# --- candidates -------------------------------------------------------------------------------------------------
# Kinds `scoring: lenient` may accept beyond the official rule (docs/envs.md), when the number's value is the gold's.
LENIENT_KINDS = {"dollar", "trailing dot", "point zero", "point zero zero", "leading zero"}


def answer_forms(gold: str) -> list[tuple[str, str]]:
    """(kind, answer as written) for one gold: the forms the issue's run used and a few more."""
    value = Decimal(gold)
    forms = [("gold", gold), ("dollar", f"${gold}"), ("trailing dot", f"{gold}."), ("point zero", f"{gold}.0")]
    forms += [("point zero zero", f"{gold}.00"), ("plus one", str(value + 1)), ("minus one", str(value - 1))]
    forms += [("negated", str(-value) if value else "-1"), ("leading zero", f"0{gold}" if value >= 0 else f"-0{gold[1:]}")]
    forms += [("times ten", str(value * 10)), ("trailing comma", f"{gold},"), ("thousands", f"{int(value):,}")]
    return forms


def replies(written: str) -> list[tuple[str, str]]:
    """(our reply, the completion the official rule reads) pairs for one answer form."""
    env_format = (f"Answer: {written}", f"#### {written}")
    worked = f"Let me think. 3 + 4 = 7 and 7 * 2 = 14.\n#### {written}"
    return [env_format, (worked, worked), ("Answer: " + worked, worked)]


def load_records(own: Path) -> list[tuple[dict, Problem]]:
    """Every record with the problem the env reads from it (both splits: every record of the file)."""
    pairs = []
    for path in ([SHARED_GSM8K] if SHARED_GSM8K.is_file() else []) + [own]:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        problems = MathToolEnv.load_problems(str(path), "train", 0, 10**6) + MathToolEnv.load_problems(
            str(path), "test", 0, 10**6
        )
        assert len(problems) == len(records)
        pairs += [(records[int(p.id.rsplit("-", 1)[1]) - 1], p) for p in problems]
    return pairs


@pytest.fixture(scope="module")
def own(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gsm8k") / "own.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in OWN))
    return path


def verifier_says_right(problem: Problem, reply: str, options: dict) -> bool:
    env = MathToolEnv(problem, "multi", 1, options)
    env.step("tool_caller", CALL_PREFIX + '0"}}</tool_call>')
    return env.step("verifier", reply).team_reward == 1.0


@pytest.fixture(scope="module")
def records(own: Path) -> list[tuple[dict, Problem]]:
    return load_records(own)


# --- the tests --------------------------------------------------------------------------------------------------
def test_the_reference_answer_is_the_official_one(records) -> None:
    for record, problem in records:
        gold = official_extract(record["answer"])
        env = MathToolEnv(problem, "multi", 1)
        assert env.reference_action("verifier") == f"Answer: {gold}", problem.id
        assert official_is_correct("#### " + env.reference_action("verifier").removeprefix("Answer: "), record)


def test_every_answer_form_gets_the_official_verdict_by_default(records) -> None:
    checked = departures = 0
    for record, problem in records:
        for kind, written in answer_forms(official_extract(record["answer"])):
            for reply, completion in replies(written):
                official = official_is_correct(completion, record)
                assert verifier_says_right(problem, reply, {}) is official, (problem.id, kind, reply[-40:], official)
                assert verifier_says_right(problem, reply, {"scoring": "official"}) is official
                checked += 1
                departures += official is False and kind in LENIENT_KINDS
    assert checked >= len(records) * 12 * 3 and departures > 0
    if SHARED_GSM8K.is_file():
        assert len(records) == 200 + len(OWN)


def test_lenient_departs_only_in_the_documented_forms(records) -> None:
    for record, problem in records:
        for kind, written in answer_forms(official_extract(record["answer"])):
            for reply, completion in replies(written):
                expected = official_is_correct(completion, record) or kind in LENIENT_KINDS
                assert verifier_says_right(problem, reply, {"scoring": "lenient"}) is expected, (problem.id, kind, reply[-40:])


def test_the_datasets_own_worked_solutions_are_right(records) -> None:
    """The issue's run: reading the reply's first number, the worked solutions scored 29 of 1,319."""
    for record, problem in records:
        assert official_is_correct(record["answer"], record)
        for reply in (record["answer"], "Answer: " + record["answer"]):
            for options in ({}, {"scoring": "lenient"}):
                assert verifier_says_right(problem, reply, options), (problem.id, options)


def test_a_worked_solution_is_wrong_when_its_marked_answer_is(records) -> None:
    for record, problem in records:
        wrong = record["answer"].rsplit("#### ", 1)[0] + f"#### {Decimal(official_extract(record['answer'])) + 1}"
        assert not verifier_says_right(problem, wrong, {}) and not verifier_says_right(problem, wrong, {"scoring": "lenient"})


@pytest.mark.parametrize("scoring", ["official", "lenient"])
def test_a_calculator_result_gets_the_official_verdict_on_what_it_shows(records, scoring: str) -> None:
    """single/solo/team hand in the calculator's result: right exactly when the official rule accepts the number."""
    for record, problem in records:
        gold = official_extract(record["answer"])
        for expression, shown in ((gold, gold), (f"{gold}+1", str(Decimal(gold) + 1)), (f"{gold}-1", str(Decimal(gold) - 1))):
            env = MathToolEnv(problem, "solo", 1, {"scoring": scoring})
            env.step("solver", CALL_PREFIX + f'{expression}"}}}}</tool_call>')
            assert bool(env.success) is official_is_correct(f"#### {shown}", record), (problem.id, expression)


def test_a_wrong_integer_never_passes_for_a_large_gold(own: Path) -> None:
    problem = MathToolEnv.load_problems(str(own), "train", 0, 1)[0]
    assert problem.meta["gold"] == "1450000"
    for scoring in ("official", "lenient"):
        assert not verifier_says_right(problem, "Answer: 1450001", {"scoring": scoring})
        assert not verifier_says_right(problem, "Answer: 1,449,999", {"scoring": scoring})
        assert verifier_says_right(problem, "Answer: 1,450,000", {"scoring": scoring})


def test_the_validator_reads_the_questions_numbers_exactly() -> None:
    """A call using 1450001 where the question says 1,450,000 is sent back (a relative tolerance let it through)."""
    problem = Problem("p", "A farm costs $1,450,000 and a barn 3. What is the total?", 1450003.0, {"gold": "1450003"})
    env = MathToolEnv(problem, "team", 2)
    env.step("planner", CALL_PREFIX + '1450001+3"}}</tool_call>')
    assert env.step("validator", "Yes.").local_reward == 0.0 and "1450001" in env.reference_action("validator")


def test_unknown_scoring_value_is_refused_naming_the_choices() -> None:
    with pytest.raises(Exception, match="official.*lenient"):
        MathToolEnv.Options.model_validate({"scoring": "loose"})
    assert MathToolEnv.Options.model_validate({}).scoring == "official"
