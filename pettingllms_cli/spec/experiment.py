"""The experiment spec's root: the sections together, the checks that span them, and loading a spec file.

Each section lives in its own module (env, models, team, algorithm, train). Every field is documented once,
in its `Field(description=...)`; `pettingllms schema` prints the JSON schema built from these descriptions.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from pettingllms_cli.errors import UserError
from pettingllms_cli.spec.algorithm import AlgorithmSpec
from pettingllms_cli.spec.env import EnvSpec, ToolsSpec
from pettingllms_cli.spec.limits import MAX_NODES, MAX_SEED
from pettingllms_cli.spec.models import AgentSpec, LoraSpec, ModelSpec, chat_template_problem, model_problem
from pettingllms_cli.spec.reading import apply_overrides, read_yaml
from pettingllms_cli.spec.safe_yaml import tree_problem
from pettingllms_cli.spec.sampler_settings import VllmSettings
from pettingllms_cli.spec.strict import NAME_RE, Strict
from pettingllms_cli.spec.team import AssignmentSpec, CoordinationSpec, DistillSpec, RewardSpec
from pettingllms_cli.spec.train import TrainSpec
from pettingllms_cli.spec.trl_names import did_you_mean

__all__ = [  # what callers imported from here before the sections moved to their own modules
    "Experiment", "LoraSpec", "ModelSpec", "apply_overrides", "chat_template_problem", "dump_spec", "load_spec",
    "model_problem", "parse_spec", "read_yaml",
]  # fmt: skip


class Experiment(Strict):
    name: str = Field(pattern=NAME_RE, description="Experiment name; the default run directory is `runs/<name>`.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description=f"Seed for problems, sampling and initial adapters, 0 to {MAX_SEED:,}.")
    env: EnvSpec = Field(description="The environment and its data.")
    models: dict[str, ModelSpec] = Field(min_length=1, description="Named base models.")
    agents: dict[str, AgentSpec] = Field(min_length=1, description="Trainable agents; each plays one or more roles.")
    specialization: Literal["shared", "per_agent", "separate"] = Field(
        "per_agent",
        description="`per_agent`: one LoRA adapter per agent; agents naming the same model share its base in memory. "
        "`shared`: one adapter per base plays every role. `separate`: every agent loads its own copy of its base.",
    )
    assignment: AssignmentSpec = Field(default_factory=AssignmentSpec, description="Role assignment per episode.")
    distill: list[DistillSpec] = Field(default_factory=list, description="Cross-agent distillation (none by default).")
    reward: RewardSpec = Field(default_factory=RewardSpec, description="How team and local rewards combine.")
    coordination: CoordinationSpec = Field(
        default_factory=CoordinationSpec, description="Optional intent round before each turn's actions."
    )
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec, description="AT-GRPO settings.")
    train: TrainSpec = Field(default_factory=TrainSpec, description="Training budget.")
    sampler: Literal["hf", "vllm"] = Field(
        "hf",
        description="Where `train` samples its rollouts: `hf`, the trainer's own model (HF generate with a shared prompt "
        "cache); `vllm`, one vLLM engine per base with a LoRA per agent, adapters pushed after every update "
        "(needs vLLM installed; docs/vllm.md). Evaluation samples on `hf` either way.",
    )
    vllm: VllmSettings = Field(
        default_factory=VllmSettings, description="The vLLM engines' settings, used when `sampler: vllm` (docs/vllm.md)."
    )
    tools: ToolsSpec = Field(default_factory=ToolsSpec, description="Tools that run model output: the code sandbox's mode.")
    output_dir: str | None = Field(None, description="Run directory; default `runs/<name>`.")

    @model_validator(mode="after")
    def _cross_checks(self) -> Experiment:
        from pettingllms_cli.envs import ENVS

        for name in list(self.models) + list(self.agents):
            if not re.fullmatch(NAME_RE, name):  # "caller\n" would name a folder with a newline
                raise ValueError(f"name {name!r} must be letters, digits and _ (starting with a letter)")
        env_cls = ENVS.resolve(self.env.name)  # built-in, entry point or `module:Class`; else an EnvError naming why
        if self.env.layout not in env_cls.layouts:
            raise ValueError(f"env.layout: {self.env.name} has layouts {sorted(env_cls.layouts)}, not {self.env.layout!r}")
        self._check_env_options(env_cls)
        env_roles = env_cls.layouts[self.env.layout]
        owner: dict[str, str] = {}
        for agent, a in self.agents.items():
            if a.model not in self.models:
                raise ValueError(
                    f"agents.{agent}.model: unknown model {a.model!r}; define it under `models` ({', '.join(self.models)})"
                )
            for role in a.roles:
                if role not in env_roles:
                    raise ValueError(
                        f"agents.{agent}.roles: {self.env.name} ({self.env.layout}) has no role {role!r}; "
                        f"its roles are {list(env_roles)}"
                    )
                if role in owner:
                    raise ValueError(
                        f"agents.{agent}.roles: role {role!r} is already played by agent {owner[role]!r}; "
                        "give each role one agent"
                    )
                owner[role] = agent
        missing = [r for r in env_roles if r not in owner]
        if missing:
            raise ValueError(
                f"agents: no agent plays role(s) {missing} of {self.env.name} ({self.env.layout}); add them to an agent's roles"
            )
        self._check_team_options()
        if self.algorithm.tis_cap is not None and self.sampler != "vllm":
            raise ValueError(
                f"algorithm.tis_cap: truncated importance sampling corrects a sampler other than the trainer, but with "
                f"sampler: {self.sampler} the trainer samples itself, so there is nothing to correct; remove "
                "algorithm.tis_cap, or set sampler: vllm"
            )
        self._check_dropout()
        for name, model in self.models.items():
            problem = model_problem(model)
            if problem:
                raise ValueError(f"models.{name}: {problem}")
        return self

    def _check_env_options(self, env_cls: type) -> None:
        """The env's typed options (`Options` on the env class): a misspelled or mistyped option is named."""
        try:
            env_cls.Options.model_validate(self.env.options)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(part) for part in err["loc"])
            known = ", ".join(env_cls.Options.model_fields) or "none"
            raise ValueError(f"env.options.{where}: {err['msg']} ({self.env.name} takes: {known})") from None

    def _check_dropout(self) -> None:
        """Sampling runs in eval mode (no dropout) and the update in train mode: with LoRA dropout the log-probs a later
        pass's ratio and TIS's weights are taken against come from another policy than the one that sampled."""
        algo = self.algorithm
        dropped = sorted(a for a, agent in self.agents.items() if agent.lora.dropout > 0)
        uses = [k for k, on in (("update_epochs > 1", algo.update_epochs > 1), ("tis_cap", algo.tis_cap is not None)) if on]
        if dropped and uses:
            raise ValueError(
                f"agents {dropped}: lora.dropout > 0 with algorithm.{' and '.join(uses)}: the sampling policy has no dropout "
                "and the update's has, so the ratio and importance weights compare two policies; set lora.dropout: 0"
            )

    def _check_team_options(self) -> None:
        from pettingllms_cli.envs import ENVS

        roles = ENVS[self.env.name].layouts[self.env.layout]
        if self.coordination.protocol == "intent" and len(roles) < 2:
            raise ValueError(
                f"coordination.protocol: `intent` broadcasts to the other roles, and {self.env.name} ({self.env.layout}) has "
                f"one role; use a multi-role layout or protocol: none"
            )
        self._check_credit(ENVS[self.env.name], roles)
        if self.assignment.mode != "static" and len(self.agents) < 2:
            raise ValueError(f"assignment.mode: {self.assignment.mode!r} needs at least two agents; use `static` with one agent")
        for i, d in enumerate(self.distill):
            for agent in [d.source, *d.targets]:
                if agent not in self.agents:
                    raise ValueError(f"distill.{i}: no agent {agent!r}; agents are {sorted(self.agents)}")
            if d.source in d.targets:
                raise ValueError(f"distill.{i}.targets: {d.source!r} is the source; an agent cannot distil into itself")

    def _check_credit(self, env_cls: Any, roles: tuple[str, ...]) -> None:
        """Difference credit needs a no-op for every role, and a team outcome that a deferred role can change."""
        if self.reward.credit != "difference":
            return
        where = f"{self.env.name} ({self.env.layout})"
        no_noop = [r for r in roles if r in env_cls.no_noop_roles]
        if no_noop:
            raise ValueError(
                f"reward.credit: `difference` compares each action with a no-op, and role(s) {no_noop} of {where} have none "
                "(their empty action is not a useless one); use credit: none"
            )
        deferred = [r for r in roles if r in env_cls.deferred_roles]
        if deferred and self.reward.team_signal == "immediate":
            raise ValueError(
                f"reward.credit: `difference` with team_signal `immediate` gives role(s) {deferred} of {where} exactly 0: "
                "their action changes the team reward only once a later role acts; use team_signal: deferred or turn_end"
            )

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir or f"runs/{self.name}")

    def role_owner(self) -> dict[str, str]:
        """role -> agent name."""
        return {role: agent for agent, a in self.agents.items() for role in a.roles}

    def adapter_of(self, agent: str) -> str:
        """The adapter an agent trains: its own (`per_agent`) or its base model's shared one."""
        return f"{self.agents[agent].model}_shared" if self.specialization == "shared" else agent

    def base_of(self, agent: str) -> str:
        """The base an agent runs on: its model entry, or (`separate`) its own copy of it."""
        return agent if self.specialization == "separate" else self.agents[agent].model


def parse_spec(tree: dict, origin: str = "<spec>") -> Experiment:
    problem = tree_problem(tree, MAX_NODES)  # NaN/inf anywhere (env.options too), or an alias bomb
    if problem:
        raise UserError(f"{origin}: {problem}")
    try:
        return Experiment.model_validate(tree)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; `pettingllms schema` lists the keys)"
            if ours := did_you_mean(err["loc"], Experiment):
                msg = f"unknown key; did you mean {ours}? (docs/config.md maps TRL's and PEFT's names to ours)"
        more = f" (+{len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
        raise UserError(f"{origin}: {field}: {msg}{more}") from None


def load_spec(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """Load, override and validate a spec; every failure is one UserError line naming file and field."""
    path = Path(path)
    tree = apply_overrides(read_yaml(path), overrides or [])
    return parse_spec(tree, str(path))


def dump_spec(spec: Experiment) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
