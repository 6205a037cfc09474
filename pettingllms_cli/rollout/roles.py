"""Role assignment per episode: `static`, `rotate`, or `adaptive` (UCB on recent success).

`RoleAssigner.assign(step, n)` gives the role -> agent map of each of the step's n episodes;
`record(assignment, successes)` feeds the team outcome back (adaptive). Its `state_dict()` goes
into every checkpoint, so a resumed run assigns as an uninterrupted one would.
"""

from __future__ import annotations

import math

from pettingllms_cli.rollout.settings import AssignmentSettings

Assignment = dict[str, str]  # role -> agent


class RoleAssigner:
    def __init__(self, settings: AssignmentSettings):
        self.settings = settings
        self.roles = settings.roles  # turn order
        self.agents = list(settings.agents)
        self.history: dict[str, list[float]] = {}  # "agent/role" -> recent successes (last `window`)
        self.tries: dict[str, int] = {}  # "agent/role" -> episodes played, all time (logged; UCB counts the window)

    def assign(self, step: int, n: int) -> list[Assignment]:
        """The role -> agent map of each of the step's n episodes."""
        mode = self.settings.mode
        if mode == "static":
            return [dict(self.settings.role_owner) for _ in range(n)]
        if mode == "rotate":
            return [rotation(self.roles, self.agents, step * n + i) for i in range(n)]
        pending: dict[str, int] = {}  # tries handed out in this batch, so its episodes explore
        out = []
        for _ in range(n):
            assignment = {role: self._ucb_pick(role, pending) for role in self.roles}
            for role, agent in assignment.items():
                pending[f"{agent}/{role}"] = pending.get(f"{agent}/{role}", 0) + 1
            out.append(assignment)
        return out

    def _ucb_pick(self, role: str, pending: dict[str, int]) -> str:
        """Argmax over agents of mean recent success + c * sqrt(ln N / n); untried agents first.

        n counts the episodes the mean is taken over (the last `window`, plus those handed out in this
        batch), not all time: an all-time n would shrink the bonus of a mean that only sees `window`.
        """
        counts = {a: len(self.history.get(f"{a}/{role}", [])) + pending.get(f"{a}/{role}", 0) for a in self.agents}
        total = sum(counts.values())

        def score(agent: str) -> float:
            if counts[agent] == 0:
                return math.inf
            recent = self.history.get(f"{agent}/{role}", [])
            mean = sum(recent) / len(recent) if recent else 0.0
            return mean + self.settings.ucb_c * math.sqrt(math.log(total) / counts[agent])

        return max(self.agents, key=lambda a: (score(a), -self.agents.index(a)))

    def best(self) -> Assignment:
        """The assignment evaluation uses: each role to the agent with the best recent success on it, no exploration.

        Ties (and roles nobody has played yet) go to the role's static owner, so `static` runs and
        untrained teams evaluate with the agents' own roles.
        """
        owner = dict(self.settings.role_owner)
        if self.settings.mode == "static":
            return owner

        def recent(agent: str, role: str) -> float:
            history = self.history.get(f"{agent}/{role}", [])
            return sum(history) / len(history) if history else -1.0

        def rank(agent: str, role: str) -> tuple:
            return recent(agent, role), agent == owner[role], -self.agents.index(agent)

        return {role: max(self.agents, key=lambda a, role=role: rank(a, role)) for role in self.roles}

    def record(self, assignments: list[Assignment], successes: list[float]) -> None:
        """Feed each episode's team success back to the (agent, role) pairs that played it."""
        window = self.settings.window
        for assignment, success in zip(assignments, successes, strict=True):
            for role, agent in assignment.items():
                key = f"{agent}/{role}"
                self.history[key] = (self.history.get(key, []) + [float(success)])[-window:]
                self.tries[key] = self.tries.get(key, 0) + 1

    def state_dict(self) -> dict:
        return {"mode": self.settings.mode, "history": self.history, "tries": self.tries}

    def load_state_dict(self, state: dict | None) -> None:
        if state and "history" in state:
            self.history = {k: list(v) for k, v in state["history"].items()}
            self.tries = dict(state["tries"])

    def metrics(self) -> dict[str, float]:
        """`role_success/<agent>/<role>`: mean recent team success of each pair that has played."""
        return {f"role_success/{k}": sum(v) / len(v) for k, v in sorted(self.history.items()) if v}


def rotation(roles: tuple[str, ...], agents: list[str], episode: int) -> Assignment:
    """Role j of episode e goes to agents[(j + e) % n]: over len(roles) episodes each agent plays each role.

    >>> rotation(("a", "b"), ["x", "y"], 1)
    {'a': 'y', 'b': 'x'}
    """
    return {role: agents[(j + episode) % len(agents)] for j, role in enumerate(roles)}
