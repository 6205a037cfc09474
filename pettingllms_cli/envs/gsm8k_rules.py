"""How `math_tool_v0` reads and judges a final answer: GSM8K's official rule, and `scoring: lenient`'s relaxations.

The official rule (openai/grade-school-math, `extract_answer` and `is_correct`): a completion's answer is what
follows the first `#### ` that is followed by `-?[0-9.,]+`, commas removed, and it is right when that string
equals the reference's, read the same way from the record's worked solution. Strings, not numbers: `18.0`, `18.`
and `$18` are wrong for `18`, and no tolerance lets `1450001` pass for `1450000`.

The env's own answer format is `Answer: <number>` (the verifier's reply is prefilled with `Answer: `), read the
way the official rule reads `#### <number>`: the number right after the marker. A reply that holds GSM8K's own
`#### ` marker is read there first, so a worked solution's first number never wins over its marked answer.

`lenient` accepts all the official rule accepts and, on the same marked answer, three more forms (docs/envs.md):
a leading `$`, one trailing `.`, and the same decimal value written with other zeros (`18.0`, `18.00`, `018`).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Literal

Scoring = Literal["official", "lenient"]
OFFICIAL_NUMBER = r"-?[0-9.,]+"  # what the official rule reads after `#### `
LENIENT_NUMBER = r"\$?-?[0-9.,]+"  # lenient also reads a leading `$`
_DECIMAL_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def reference_answer(solution: str) -> str | None:
    """A GSM8K record's reference answer: the official reading of its worked solution (None: it has none).

    >>> reference_answer("3 + 4 = 7\\n#### 1,007"), reference_answer("no marker: 7")
    ('1007', None)
    """
    return _official(str(solution))


def marked_answer(reply: str, number: str = OFFICIAL_NUMBER) -> str | None:
    """The final answer a reply marks, as written: after the first `#### ` followed by `number`, else the `number`
    that opens the reply (after the env's `Answer:` marker, or bare). None: the reply marks no answer.

    >>> marked_answer("Answer: 1,450,000"), marked_answer("Answer: 16 - 3 - 4 = 9 eggs, 9 * 2 = 18\\n#### 18")
    ('1,450,000', '18')
    >>> marked_answer("Answer: retry"), marked_answer("It is 18"), marked_answer("Answer: $18", LENIENT_NUMBER)
    (None, None, '$18')
    """
    match = re.search(f"#### ({number})", reply) or re.match(rf"\s*(?:Answer:\s*)?({number})", reply)
    return match.group(1) if match else None


def reply_is_right(reply: str, gold: str, scoring: Scoring = "official") -> bool:
    """Whether a reply's marked final answer is right under `scoring`.

    >>> reply_is_right("Answer: 1,450,000", "1450000"), reply_is_right("Answer: 1450001", "1450000")
    (True, False)
    >>> [reply_is_right(f"Answer: {a}", "18", s) for s in ("official", "lenient") for a in ("18.", "$18", "18.00")]
    [False, False, False, True, True, True]
    """
    if answer_is_right(marked_answer(reply), gold, "official"):
        return True
    return scoring == "lenient" and answer_is_right(marked_answer(reply, LENIENT_NUMBER), gold, "lenient")


def answer_is_right(answer: str | None, gold: str, scoring: Scoring = "official") -> bool:
    """Whether an answer as written (a marked answer, or a calculator's shown result) is right under `scoring`.

    >>> answer_is_right("1,007", "1007"), answer_is_right("1007.0", "1007"), answer_is_right("1007.0", "1007", "lenient")
    (True, False, True)
    >>> answer_is_right("18,", "18"), answer_is_right("017", "18", "lenient"), answer_is_right("1..8", "1.8", "lenient")
    (True, False, False)
    """
    if answer is None:
        return False
    if answer.replace(",", "") == gold:
        return True
    return scoring == "lenient" and _value(answer) is not None and _value(answer) == _value(gold)


def _value(text: str) -> Decimal | None:
    """An answer's exact decimal value under lenient: a leading `$`, commas and one trailing `.` (a sentence's end) dropped.

    >>> _value("$1,007."), _value("18.50"), _value("1.8."), _value("1..8")
    (Decimal('1007'), Decimal('18.50'), Decimal('1.8'), None)
    """
    plain = text.removeprefix("$").replace(",", "").removesuffix(".")
    return Decimal(plain) if _DECIMAL_RE.fullmatch(plain) else None


def _official(completion: str) -> str | None:
    match = re.search(f"#### ({OFFICIAL_NUMBER})", completion)
    return match.group(1).replace(",", "") if match else None
