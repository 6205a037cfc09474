"""The env checker behind `pettingllms envs check` (in the spirit of PettingZoo's `api_test`).

For every layout it checks the contract (roles, observation and step types, JSON state),
seeded determinism (same seed, same problems and same episode), `copy()` independence, and
replays solutions on the data: the env's `reference_action` for each role must solve every
problem, and corrupted actions (the env's `corrupted_actions(role)`, plus an
empty and a junk reply) must not.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from pettingllms_cli.envs.base import Problem, StepResult, TurnEnv
from pettingllms_cli.envs.loading import read_split

GENERIC_CORRUPTIONS = ["", "I don't know."]
ALL = 10**9  # a split size no data file reaches: every record


@dataclass
class CheckReport:
    passed: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    checked: int = 0  # problems replayed
    available: int | None = None  # problems the data file holds (None: generated, as many as asked for)

    def record(self, ok: bool, what: str) -> None:
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            self.failures.append(what)

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.passed > 0


def check_env(env_cls: type[TurnEnv], data: str = "generated", limit: int = 8, seed: int = 0, max_turns: int = 2) -> CheckReport:
    """Run every check on up to `limit` train and `limit` test problems; returns the counts, and how many of the
    data file's problems were replayed (a reference that does not solve fails the check, whatever the limit)."""
    problems = load_both_splits(env_cls, data, seed, limit)
    report = CheckReport(checked=len(problems), available=None if data == "generated" else _available(env_cls, data, seed))
    again = load_both_splits(env_cls, data, seed, limit)
    report.record([asdict(p) for p in problems] == [asdict(p) for p in again], "load_problems is not deterministic for a seed")
    for layout in env_cls.layouts:
        _check_layout(report, env_cls, layout, problems, max_turns)
    return report


def _check_layout(report: CheckReport, env_cls: type[TurnEnv], layout: str, problems: list[Problem], max_turns: int) -> None:
    def make(p: Problem) -> TurnEnv:
        return env_cls(p, layout, max_turns)

    _guarded(report, f"{layout}: contract", lambda: _check_contract(make(problems[0]), env_cls.layouts[layout]))
    _guarded(report, f"{layout}: determinism", lambda: _check_determinism(make, problems[0]))
    _guarded(report, f"{layout}: copy", lambda: _check_copy(make(problems[0])))
    for p in problems:
        _guarded(report, f"{layout} {p.id}: reference does not solve", lambda p=p: _reference_solves(env_cls, make, p))
        for i in range(_n_corruptions(make(p))):
            _guarded(report, f"{layout} {p.id}: corruption {i} solves", lambda p=p, i=i: not _play(make(p), _corrupt(i)).success)


def load_both_splits(env_cls: type[TurnEnv], data: str, seed: int, limit: int) -> list[Problem]:
    train, test = (read_split(env_cls, data, split, seed, limit) for split in ("train", "test"))  # bad data: one line
    seen = {p.id for p in train}
    return train + [p for p in test if p.id not in seen]


def _available(env_cls: type[TurnEnv], data: str, seed: int) -> int:
    """Every problem of the file, both splits (loading is cheap next to replaying)."""
    return len(load_both_splits(env_cls, data, seed, ALL))


def _guarded(report: CheckReport, what: str, check: Callable[[], bool]) -> None:
    """A check that raises counts as failed (with the exception), never stops the others."""
    try:
        ok = bool(check())
    except Exception as e:  # the checker reports broken envs, it does not crash on them
        report.record(False, f"{what} ({type(e).__name__}: {e})")
        return
    report.record(ok, what)


class BadRecord(Exception):
    """The data record itself is inconsistent (the env's `data_error` says which file, record and field)."""


def _reference_solves(env_cls: type[TurnEnv], make: Callable[[Problem], TurnEnv], problem: Problem) -> bool:
    """Replay the references; when they fail, an env with `data_error` names the record's broken field."""
    if _play(make(problem), _reference).success:
        return True
    why = env_cls.data_error(problem)
    if why:
        raise BadRecord(why)  # recorded by _guarded as this check's failure, with the record and field
    return False


def _reference(env: TurnEnv, role: str) -> str:
    return env.reference_action(role)


def _corruptions(env: TurnEnv, role: str) -> list[str]:
    own = env.corrupted_actions(role)
    return list(own) + GENERIC_CORRUPTIONS


def _n_corruptions(env: TurnEnv) -> int:
    return max(len(_corruptions(env, role)) for role in env.roles)


def _corrupt(i: int) -> Callable[[TurnEnv, str], str]:
    def act(env: TurnEnv, role: str) -> str:
        options = _corruptions(env, role)
        return options[i % len(options)]

    return act


def _play(env: TurnEnv, policy: Callable[[TurnEnv, str], str]) -> TurnEnv:
    """Play an episode to the end with `policy(env, role) -> text`."""
    env.reset()
    while not env.done:
        role = env.current_role
        env.step(role, policy(env, role))
    return env


def _is_messages(obs: object) -> bool:
    return (
        isinstance(obs, list)
        and bool(obs)
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in obs)
    )


def _check_contract(env: TurnEnv, roles: tuple[str, ...]) -> bool:
    own = env.roles
    assert isinstance(own, tuple) and own == roles and all(isinstance(r, str) for r in own), "roles"
    assert env.possible_agents == own, "possible_agents (the PettingZoo name) must be the roles"
    first = env.reset(seed=0)
    assert isinstance(first, dict) and set(first) == set(own), "reset() must return one observation per role"
    assert all(_is_messages(o) for o in first.values()), "observations must be lists of chat messages"
    while not env.done:
        role = env.current_role
        assert _is_messages(env.observe(role)), f"observe({role!r})"
        res = env.step(role, env.reference_action(role))
        assert isinstance(res, StepResult), "step() must return a StepResult"
        assert isinstance(res.local_reward, float) and isinstance(res.team_reward, float), "rewards must be floats"
        assert isinstance(res.terminated, bool) and isinstance(res.truncated, bool), "terminated/truncated must be bools"
    json.dumps(env.state())  # raises if the state is not JSON-serialisable
    assert isinstance(env.success, bool), "success must be a bool"
    # Attempts exist only for solved episodes: at least the solving action, at most every action taken.
    actions = len(env.transcript)
    assert (env.attempts is None) if not env.success else (1 <= env.attempts <= actions), "success/attempts"
    return True


def _episode(env: TurnEnv) -> list:
    """Observations and results of a fixed script: first corruption, then references."""
    trace = [env.reset(seed=0)]
    script = _corrupt(0)
    while not env.done:
        role = env.current_role
        text = script(env, role) if env.turn == 0 else env.reference_action(role)
        trace += [env.observe(role), asdict(env.step(role, text))]
    return trace + [env.state()]


def _check_determinism(make: Callable[[Problem], TurnEnv], problem: Problem) -> bool:
    return json.dumps(_episode(make(problem)), default=str) == json.dumps(_episode(make(problem)), default=str)


def _check_copy(env: TurnEnv) -> bool:
    """Stepping a copy leaves the original's state and observations untouched."""
    role = env.current_role
    before = json.dumps([env.state(), env.observe(role)], default=str)
    twin = env.copy()
    twin.step(role, _corruptions(twin, role)[0])
    while not twin.done:
        twin.step(twin.current_role, twin.reference_action(twin.current_role))
    unchanged = json.dumps([env.state(), env.observe(role)], default=str) == before
    env.step(role, env.reference_action(role))  # the original still plays on
    return unchanged and twin is not env
