"""A planner and a calculator caller, written with nothing but the `openai` package: the kind of program
`env: {name: external}` trains as it is (docs/external.md).

The planner names the operation the question needs; the caller writes the arithmetic expression; the program runs
it and hands the value back as its answer, which the trainer checks against the problem's. The caller's call also
gets a small local reward when its expression runs (the per-call `rewards`). Pointed at any OpenAI-compatible server
(`pettingllms serve`, or another provider with models named `planner` and `caller`), it runs unchanged.
"""

from __future__ import annotations

from openai import OpenAI

from examples.openai_team.arithmetic import evaluate

PLANNER_SYSTEM = "Say which operation answers the question: add, subtract, multiply or divide."
CALLER_SYSTEM = "Write the arithmetic expression whose value answers the question, using the plan."
SHOTS = [  # (question, operation, expression): one worked example per operation
    ("Ann has 12 pens and buys 7 more. How many pens does Ann have?", "add", "12+7"),
    ("Joe had 30 cups and broke 4. How many cups are left?", "subtract", "30-4"),
    ("A box holds 6 eggs. How many eggs are in 4 boxes?", "multiply", "4*6"),
    ("Kim splits 18 nuts equally among 3 kids. How many nuts does each kid get?", "divide", "18/3"),
]
RAN, FAILED = 0.1, -0.1  # the caller's local reward: an expression that ran, or one that did not


def planner_messages(question: str) -> list[dict]:
    messages = [{"role": "system", "content": PLANNER_SYSTEM}]
    for q, op, _ in SHOTS:
        messages += [{"role": "user", "content": f"Question: {q}"}, {"role": "assistant", "content": op}]
    return messages + [{"role": "user", "content": f"Question: {question}"}]


def caller_messages(question: str, plan: str) -> list[dict]:
    messages = [{"role": "system", "content": CALLER_SYSTEM}]
    for q, op, expression in SHOTS:
        messages += [{"role": "user", "content": f"Question: {q}\nPlan: {op}"}, {"role": "assistant", "content": expression}]
    return messages + [{"role": "user", "content": f"Question: {question}\nPlan: {plan.strip()[:40]}"}]


def run(problem: dict, base_url: str) -> dict:
    """One episode: plan, call, compute; returns the answer for the trainer's check and the caller's local reward."""
    client = OpenAI(base_url=base_url, api_key="unused")
    question = problem["question"]
    plan = client.chat.completions.create(model="planner", messages=planner_messages(question), max_tokens=4)
    plan_text = plan.choices[0].message.content or ""
    call = client.chat.completions.create(model="caller", messages=caller_messages(question, plan_text), max_tokens=12)
    value = evaluate(call.choices[0].message.content or "")
    return {"answer": value, "rewards": {call.id: FAILED if value is None else RAN}}
