"""Sample episodes for a report: the same held-out problems before and after training, failures included.

eval_before.json and eval_after.json score the same held-out problems in the same order, and keep each
episode's transcript (each role's action with what the env made of it) in `per_episode`. The report
picks a few problems to show both ways, in this order of interest: fixed by training, broken by it,
failed both times, solved both times; one of each first, then more of the same order. So when any
episode failed, a failure is shown. Eval files written before transcripts were kept show their
`transcripts` (a few episodes, solved first) alone.
"""

from __future__ import annotations

import html

KINDS = [  # (solved before, solved after) -> what the pair shows
    ((False, True), "fixed by training"),
    ((True, False), "broken by training"),
    ((False, False), "failed before and after"),
    ((True, True), "solved before and after"),
]


def paired(before: dict | None, after: dict | None, n: int = 4) -> list[tuple[str, dict, dict]]:
    """Up to n (kind, before record, after record) on the same problems; [] without both evals' transcripts.

    >>> rec = lambda i, ok: {"id": f"t{i}", "question": f"q{i}", "success": ok, "transcript": []}
    >>> b = {"per_episode": [rec(0, True), rec(1, False), rec(2, False)]}
    >>> a = {"per_episode": [rec(0, True), rec(1, True), rec(2, False)]}
    >>> [(kind, x["id"]) for kind, x, _ in paired(b, a)]
    [('fixed by training', 't1'), ('failed before and after', 't2'), ('solved before and after', 't0')]
    """
    pairs = list(zip(_records(before), _records(after), strict=False))
    pairs = [(x, y) for x, y in pairs if x.get("question") == y.get("question")]  # the same problem, or not a pair
    by_kind = {kind: [(x, y) for x, y in pairs if (bool(x.get("success")), bool(y.get("success"))) == key] for key, kind in KINDS}
    chosen: list[tuple[str, dict, dict]] = []
    for round_ in range(n):  # one of each kind, then a second of each, ...
        for _, kind in KINDS:
            if len(chosen) < n and round_ < len(by_kind[kind]):
                chosen.append((kind, *by_kind[kind][round_]))
    order = {kind: i for i, (_, kind) in enumerate(KINDS)}
    return sorted(chosen, key=lambda c: order[c[0]])


def _records(ev: dict | None) -> list[dict]:
    records = (ev or {}).get("per_episode")
    if not isinstance(records, list):
        return []
    return [r for r in records if isinstance(r, dict) and isinstance(r.get("transcript"), list)]


def messages(transcript: list) -> list[tuple[str, str, list[str]]]:
    """(speaker, text, notes) per action; notes say which tool ran with what result, the answer, a verdict.

    >>> messages([{"turn": 0, "role": "caller", "text": "x", "tool_call": "1+1 = 2"}])
    [('turn 1 · caller', 'x', ['tool_call: 1+1 = 2'])]
    """
    out = []
    for entry in transcript:
        if not isinstance(entry, dict):
            continue
        notes = [f"{k}: {v}" for k, v in entry.items() if k not in ("turn", "role", "text")]
        turn = entry.get("turn") if isinstance(entry.get("turn"), int) else 0
        out.append((f"turn {turn + 1} · {entry.get('role', '?')}", str(entry.get("text", "")), notes))
    return out


def outcome(record: dict) -> str:
    return "solved" if record.get("success") else "not solved"


def from_state(state: dict) -> dict:
    """An episode state (eval files' `transcripts`) as a per-episode record."""
    problem = state.get("problem") if isinstance(state.get("problem"), dict) else {}
    return {
        "id": problem.get("id", "?"),
        "question": f"{problem.get('question', '')} (gold answer {problem.get('answer')})",
        "success": state.get("success"),
        "transcript": state.get("transcript") if isinstance(state.get("transcript"), list) else [],
    }


def fallback(before: dict | None, after: dict | None) -> tuple[str, list[dict]]:
    """(which, records): the few transcripts older eval files kept, after training's when there are any."""
    for which, ev in (("after training", after), ("before training", before)):
        states = (ev or {}).get("transcripts")
        if isinstance(states, list) and states:
            return which, [from_state(s) for s in states if isinstance(s, dict)]
    return "", []


# --- markdown and html ---------------------------------------------------------------------------------------------
def record_md(title: str, record: dict) -> list[str]:
    lines = [f"*{title}: {outcome(record)}*", ""]
    for speaker, text, notes in messages(record["transcript"]):
        quoted = text.replace("`", "'").replace("\n", " ")  # keep the inline code span closed and on one line
        lines += [f"- {speaker}: `{quoted}`"] + [f"  - {n}" for n in notes]
    return [*lines, ""]


def record_html(title: str, record: dict) -> str:
    cls = "ok" if record.get("success") else "fail"
    msgs = "".join(
        f'<div class="msg"><span class="role">{html.escape(speaker)}</span><pre>{html.escape(text)}</pre>'
        + "".join(f'<div class="note">{html.escape(n)}</div>' for n in notes)
        + "</div>"
        for speaker, text, notes in messages(record["transcript"])
    )
    return f'<div class="episode"><p class="{cls}">{html.escape(title)}: {outcome(record)}</p>{msgs}</div>'


def problem_line(record: dict) -> str:
    return f"{record.get('id', '?')}: {record.get('question', '')}"


def samples_md(before: dict | None, after: dict | None) -> list[str]:
    """The section's markdown lines ([] when there is nothing to show)."""
    pairs = paired(before, after)
    if pairs:
        lines = ["## Sample episodes: the same held-out problems before and after training", ""]
        for kind, b, a in pairs:
            lines += [f"### {problem_line(b)} ({kind})", "", *record_md("Before training", b), *record_md("After training", a)]
        return lines
    which, records = fallback(before, after)
    if not records:
        return []
    lines = [f"## Sample episodes (held-out, {which})", ""]
    for r in records:
        lines += [f"### {problem_line(r)}", "", *record_md(which.capitalize(), r)]
    return lines


def samples_html(before: dict | None, after: dict | None) -> str:
    pairs = paired(before, after)
    if pairs:
        body = "".join(
            f'<div class="pair"><h3>{html.escape(problem_line(b))} <span class="kind">({kind})</span></h3>'
            f'<div class="cols">{record_html("Before training", b)}{record_html("After training", a)}</div></div>'
            for kind, b, a in pairs
        )
        return f"<h2>Sample episodes: the same held-out problems before and after training</h2>{body}"
    which, records = fallback(before, after)
    if not records:
        return ""
    body = "".join(f"<h3>{html.escape(problem_line(r))}</h3>{record_html(which.capitalize(), r)}" for r in records)
    return f"<h2>Sample episodes (held-out, {html.escape(which)})</h2>{body}"
