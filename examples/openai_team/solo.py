"""The one-agent version of team.py: a single `solver` writes the expression straight from the question. `compare`
runs it against the team like any other arm (experiments/external_openai_single.yaml)."""

from __future__ import annotations

from openai import OpenAI

from examples.openai_team.arithmetic import evaluate
from examples.openai_team.team import FAILED, RAN, SHOTS

SYSTEM = "Write the arithmetic expression whose value answers the question."


def run(problem: dict, base_url: str) -> dict:
    client = OpenAI(base_url=base_url, api_key="unused")
    messages = [{"role": "system", "content": SYSTEM}]
    for q, _, expression in SHOTS:
        messages += [{"role": "user", "content": f"Question: {q}"}, {"role": "assistant", "content": expression}]
    messages.append({"role": "user", "content": f"Question: {problem['question']}"})
    call = client.chat.completions.create(model="solver", messages=messages, max_tokens=12)
    value = evaluate(call.choices[0].message.content or "")
    return {"answer": value, "rewards": {call.id: FAILED if value is None else RAN}}
