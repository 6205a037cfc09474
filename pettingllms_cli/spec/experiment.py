"""The experiment spec: one YAML file, validated by pydantic before any weight is loaded.

Every field is documented once, in its `Field(description=...)`; `pettingllms schema` prints
the JSON schema built from these descriptions.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from pettingllms_cli.errors import UserError
from pettingllms_cli.spec.limits import MAX_DEPTH, MAX_NODES, MAX_PROBLEMS, MAX_PROBLEMS_PER_STEP, MAX_SEED, MAX_STEPS
from pettingllms_cli.spec.safe_yaml import DuplicateKey, TooDeep, load_text, tree_problem
from pettingllms_cli.spec.sampler_settings import VllmSettings

NAME_RE = r"^[A-Za-z][A-Za-z0-9_]*$"  # use with re.fullmatch: `$` alone also matches before a trailing newline
MAX_GROUP_SIZE = 256  # K samples are generated in one batch per group; far past this they cannot fit in memory


class Strict(BaseModel):
    """Unknown keys, NaN/inf and true/false where a number belongs are errors naming the field."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and field.annotation in NUMBER_TYPES:
            raise ValueError(f"expects a number, not {str(value).lower()}")
        return value


NUMBER_TYPES = (int, float, int | None, float | None)  # fields where YAML's true/false would pass as 1/0


class EnvSpec(Strict):
    name: str = Field(
        description="Registered environment name with version, e.g. `math_tool_v0` (see `pettingllms envs list`), or your "
        "own env's import path `mypkg.envs:MyEnv` (docs/envs.md, 'Your own env')."
    )
    layout: str = Field(
        "multi", description="Which role layout of the env to use: `multi` (named roles) or `single` (one role does everything)."
    )
    data: str = Field(
        "generated",
        description="`generated` (problems made from the seed) or a path to a data file the env reads (e.g. GSM8K jsonl); "
        "`validate` opens it. Training and held-out problems never overlap; a file needs at least 2 records.",
    )
    max_turns: int = Field(2, ge=1, le=16, description="Rounds per episode; in each round every role acts once, in turn order.")
    eval_problems: int = Field(
        16,
        ge=1,
        le=MAX_PROBLEMS,
        description=f"Held-out problems scored greedily before and after training (report.md), 1 to {MAX_PROBLEMS:,}. "
        "A data file holds out its "
        "last fifth (at least 1; the bundled samples: code_v0 5, function_call_v0 4, sql_v0 7); asking for more is an error.",
    )
    options: dict[str, Any] = Field(default_factory=dict, description="Env-specific options (see the env's docstring).")


class ModelSpec(Strict):
    source: str = Field(description="A built-in alias (`pettingllms models list`), a hub id, a local folder or a `.gguf` file.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="The frozen base's compute dtype. `auto`: bfloat16 where the hardware computes it fast (a CUDA GPU with "
        "bf16, a CPU with AMX or AVX512-BF16), else float32; the run records what it chose (resolved.json, the report). "
        "`float32` reproduces runs bit for bit; `float16` only on a GPU. LoRA weights, their optimizer state and the "
        "loss's log-softmax stay float32 (docs/dtype.md).",
    )
    quantization: Literal["none", "nf4"] = Field("none", description="`nf4` loads the base in 4 bit with bitsandbytes (QLoRA).")
    prompt_template: str | None = Field(
        None,
        description=(
            "For bases without a chat template: a format string with `{conversation}`; "
            "each message is rendered as `role: content`."
        ),
    )


class LoraSpec(Strict):
    r: int = Field(16, ge=1, le=512, description="LoRA rank.")
    alpha: float = Field(32, gt=0, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    target_modules: list[str] | Literal["all-linear"] = Field("all-linear", description="Modules that get adapters.")


class AgentSpec(Strict):
    model: str = Field(description="Name of an entry in `models`.")
    roles: list[str] = Field(min_length=1, description="Env roles this agent plays (static assignment).")
    lora: LoraSpec = Field(default_factory=LoraSpec, description="This agent's LoRA adapter.")


def deferred_roles_text() -> str:
    """Every env's `deferred_roles`, from the envs' own declarations (the one place they are listed).

    >>> deferred_roles_text().split("; ")[0]
    'code_v0: tester'
    """
    from pettingllms_cli.envs import ENVS  # no torch: `validate` and `schema` stay fast

    declared = {name: sorted(env.deferred_roles) for name, env in sorted(ENVS.items()) if env.deferred_roles}
    return "; ".join(f"{name}: {', '.join(roles)}" for name, roles in declared.items())


class RewardSpec(Strict):
    team_weight: float = Field(1.0, ge=0, description="Weight of the team outcome in every agent's reward.")
    local_weight: float = Field(0.5, ge=0, description="Weight of the role's own (local) reward.")
    credit: Literal["none", "difference"] = Field(
        "none",
        description="Local term: `none` uses the env's own local reward; `difference` uses the team outcome of the "
        "agent's action minus the team outcome of a no-op (empty) action in the same state, played on the same way "
        "(see team_signal), so an action that does not change the team outcome earns 0. Needs a no-op for every role.",
    )
    team_signal: Literal["deferred", "turn_end", "immediate"] = Field(
        "deferred",
        description="The team outcome an action is credited with. `deferred`: for roles whose action only matters once "
        f"later roles act (the env's deferred_roles: {deferred_roles_text()}), each of the K candidates' "
        "branches is played on to the end of the turn with one sample per later role (batched; one problem's play-outs "
        "share seeds) and scored there; other roles get the team reward right after their action. `turn_end`: every "
        "role but the turn's last is played on. Cost: K*(R-1-i) extra sampled actions per problem and turn for the "
        "role at position i of R (two roles: x1.5 tokens), + R-1-i for the no-op under `difference`; not trained; "
        "none with one role. `immediate`: never played on (no extra samples; stale for deferred roles).",
    )
    balance_verdicts: bool = Field(
        False,
        description="Judges (the `team` layouts' validator and reader) learn as if calls that should run and calls that "
        "should be sent back came equally often: each judged action's advantage is weighted n / (2 n_c), n_c of the "
        "agent's n judged actions so far having called for that verdict, so a judge that always says no (or always yes) "
        "gains nothing in expectation over steps that hold both kinds of case. Other roles are unchanged (docs/credit.md).",
    )


class AssignmentSpec(Strict):
    mode: Literal["static", "rotate", "adaptive"] = Field(
        "static",
        description="Who plays which role each episode: `static` (agents' `roles`), `rotate` (role j of episode e goes to "
        "agent (j + e) mod n, agents sorted by name), `adaptive` (UCB on each agent's recent team success per role).",
    )
    ucb_c: float = Field(1.0, ge=0, description="`adaptive`: weight of the UCB exploration bonus c * sqrt(ln N / n).")
    window: int = Field(
        32,
        ge=1,
        le=MAX_PROBLEMS,
        description=f"`adaptive`: recent episodes per (agent, role) whose mean success is the estimate (1 to {MAX_PROBLEMS:,}).",
    )


class DistillSpec(Strict):
    source: str = Field(description="Agent whose best trajectories become supervised targets.")
    targets: list[str] = Field(min_length=1, description="Agents trained to reproduce them (text level: any tokenizer).")
    every: int = Field(
        1, ge=1, le=MAX_STEPS, description=f"Distil every N steps (after that step's RL update), 1 to {MAX_STEPS:,}."
    )
    top_k: int = Field(
        4,
        ge=1,
        le=MAX_PROBLEMS_PER_STEP,
        description=f"The source's best samples (by reward) used per distillation step (1 to {MAX_PROBLEMS_PER_STEP:,}), "
        "among those that led the team to "
        "success and were not cut off at max_new_tokens.",
    )
    require_success: bool = Field(
        True,
        description="Only samples after which the team had solved the problem qualify; false: any sample with reward > 0 "
        "(e.g. before the team ever succeeds; a well-formed but wrong action then qualifies too).",
    )
    keep_truncated: bool = Field(
        False,
        description="Samples cut off at max_new_tokens qualify too, taught without EOS so the target does not learn to "
        "stop there (false: they are left out, since half an answer is not one to imitate).",
    )
    weight: float = Field(0.1, gt=0, description="Weight of the distillation NLL (token mean) in the target's extra step.")


class CoordinationSpec(Strict):
    protocol: Literal["none", "intent"] = Field(
        "none",
        description="`intent`: each turn opens with an intent round; every role, in turn order, states what it will do as "
        "<intent>...</intent>, and all roles see the turn's intents when they act. The env logs `intent_agreement`.",
    )
    intent_tokens: int = Field(24, ge=1, le=256, description="Most tokens an intent may take.")
    agreement_bonus: float = Field(
        0.0, ge=0, description="Reward added to an action that agrees with its role's intent (0: agreement is only logged)."
    )


class AlgorithmSpec(Strict):
    name: Literal["at_grpo"] = Field("at_grpo", description="Training algorithm.")
    rollout: Literal["tree", "parallel"] = Field(
        "tree",
        description="`tree`: K branches per (problem, role, turn), continue from the best; `parallel`: K independent episodes.",
    )
    group_size: int = Field(8, description=f"K, samples per group (2 to {MAX_GROUP_SIZE}).")
    clip_eps: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="PPO clip epsilon. It binds only from the second pass over a step's samples (`update_epochs` > 1): "
        "the first pass runs at the sampling policy, where every ratio is 1.",
    )
    update_epochs: int = Field(
        1,
        ge=1,
        le=16,
        description="Passes over each step's samples, each an optimizer step per adapter, with the PPO ratio taken against "
        "the log-probs of the policy that sampled them (TRL's num_iterations, verl's ppo_epochs). 1: one on-policy step.",
    )
    kl_coef: float = Field(
        0.0, ge=0, description="Weight of the k3 KL to the frozen base (adapter disabled); 0 skips the reference pass."
    )
    lr: float = Field(2e-4, gt=0, description="AdamW learning rate for each adapter.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient-norm clip per adapter.")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group",
        description="What divides the group-centred rewards. `group`: the group's std (GRPO); at K=2 any two different "
        "rewards become +-0.707, so a 0.1 format difference pushes as hard as a team success. `batch`: the std of all the "
        "step's rewards (every rank's), one scale for every group. `none`: only centred (Dr. GRPO), so an advantage is as "
        "large as the reward difference. The default stays `group` (the behaviour every README figure was measured with) "
        "until the quickstart and a showcase pair are measured under each; true/false from older specs mean group/none.",
    )
    filter_zero_std: bool = Field(False, description="Drop groups whose rewards are all equal before the update.")
    tis_cap: float | None = Field(
        None,
        gt=0,
        description="Truncated importance sampling, `sampler: vllm` only: multiply each completion token's "
        "policy-gradient loss by min(pi_trainer / pi_sampler, tis_cap), the trainer's log-prob at sampling time over "
        "vLLM's, detached (1 for tokens vLLM did not record), to correct for vLLM and the trainer disagreeing on the "
        "samples' probabilities. Typically 2 (verl, TRL); logs `tis_weight/<agent>`. Unset: no correction (docs/vllm.md).",
    )

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _scale_rewards_was_a_boolean(cls, value: Any) -> Any:
        """Specs saved when scale_rewards was true/false still load (and compare as the same run)."""
        return {True: "group", False: "none"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("group_size")
    @classmethod
    def _k_at_least_two(cls, k: int) -> int:
        if k < 2:
            raise ValueError("group_size must be at least 2: GRPO compares samples within a group")
        if k > MAX_GROUP_SIZE:
            raise ValueError(
                f"group_size {k} is past {MAX_GROUP_SIZE}: the K samples of a group are generated in one batch "
                "and would not fit in memory; GRPO uses 4 to 64"
            )
        return k


class TrainSpec(Strict):
    steps: int = Field(
        20, ge=1, le=MAX_STEPS, description=f"Optimizer steps (each over one batch of problems), 1 to {MAX_STEPS:,}."
    )
    problems_per_step: int = Field(
        4, ge=1, le=MAX_PROBLEMS_PER_STEP, description=f"Problems rolled out per step, 1 to {MAX_PROBLEMS_PER_STEP:,}."
    )
    max_new_tokens: int = Field(24, ge=1, le=4096, description="Tokens sampled per action at most.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (log-probs use the same temperature).")
    checkpoint_every: int = Field(
        5,
        ge=1,
        le=MAX_STEPS,
        description="Save adapters and optimizer state every N steps (and at the end); N up to train.steps' bound.",
    )
    log_every: int = Field(
        1,
        ge=1,
        le=MAX_STEPS,
        description="Refresh the progress bar's status (success, tokens/s) every N steps; N up to train.steps' bound.",
    )
    max_skipped_in_a_row: int = Field(
        3,
        ge=1,
        le=MAX_STEPS,
        description="Stop the run when an agent's update is skipped (non-finite loss or gradient) this many steps in a row "
        "(up to train.steps' bound).",
    )
    eval_every: int | None = Field(
        None,
        description="Every N steps, score the first `eval_subset` held-out problems greedily and log "
        "`heldout_success_rate` (and `heldout_mean_attempts_to_success`) in metrics.jsonl; `compare` takes convergence "
        "from this held-out curve. 1 <= N <= steps. Unset: held-out scores only before and after training.",
    )
    eval_subset: int = Field(
        8,
        ge=1,
        le=MAX_PROBLEMS,
        description="Held-out problems scored every `eval_every` steps: the first N of the held-out set (fixed), "
        f"1 to {MAX_PROBLEMS:,}.",
    )
    stop_at_actions: int | None = Field(
        None,
        ge=1,
        le=10**15,
        description="Stop once the run's actions (sampled, play-outs and intents, summed over its steps: `actions_total`) "
        "reach N, 1 to 10^15; `steps` is then an upper bound. `compare --budget actions` sets it. Unset: run `steps` steps.",
    )
    stop_at_tokens: int | None = Field(
        None,
        ge=1,
        le=10**15,
        description="Stop once the run's sampled tokens (play-outs and intents in: `tokens_total`) reach N, 1 to 10^15; "
        "`steps` is then an upper bound. `compare --budget tokens` sets it. Unset: run `steps` steps.",
    )
    report_to: list[Literal["tensorboard", "wandb", "trackio"]] = Field(
        default_factory=list,
        description="Experiment trackers that also get every metrics.jsonl row (docs/tracking.md): any of tensorboard "
        "(event files in the run directory's tb/), wandb, trackio. Default: none.",
    )

    @model_validator(mode="after")
    def _eval_every_fits(self) -> TrainSpec:
        if self.eval_every is not None and not 1 <= self.eval_every <= self.steps:
            raise ValueError(
                f"eval_every: {self.eval_every} must be between 1 and train.steps ({self.steps}); "
                f"e.g. eval_every: {max(1, self.steps // 4)}, or leave it out to score held-out problems only before and after"
            )
        return self


class ToolsSpec(Strict):
    sandbox: Literal["strict", "best_effort"] = Field(
        "strict",
        description="How model-written code runs (docs/sandbox.md). `strict`: confined by the kernel (namespaces, a "
        "read-only root, Landlock); a kernel lacking either is an error before any model loads. `best_effort`: on such "
        "a kernel, say what is missing in one line and run with what it has (namespaces alone, or rlimits and an audit "
        "hook).",
    )


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


def chat_template_problem(model: ModelSpec, has_chat_template: bool) -> str | None:
    """A base without a chat template needs a prompt_template: checked here for built-ins (their table says
    whether they have one) and by models/loader.py `load_model` for every base (its tokenizer says)."""
    if has_chat_template or model.prompt_template is not None:
        return None
    return (
        f"model {model.source!r} has no chat template; set its prompt_template, e.g. "
        '"{conversation}\\nassistant: " (a format string with {conversation})'
    )


def model_problem(model: ModelSpec) -> str | None:
    """Why a model spec cannot work, found without loading weights (nf4 needs bitsandbytes; template-less built-ins)."""
    import importlib.util

    from pettingllms_cli.spec.builtin_models import BUILTINS

    if model.quantization == "nf4" and importlib.util.find_spec("bitsandbytes") is None:
        return "quantization nf4 needs bitsandbytes: run `pip install bitsandbytes`, or use quantization: none"
    builtin = BUILTINS.get(model.source)
    if builtin is not None and (problem := chat_template_problem(model, builtin.chat_template)):
        return problem
    if model.prompt_template is not None and "{conversation}" not in model.prompt_template:
        return "prompt_template must contain {conversation}"
    return None


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    """Set `a.b.0.c` in a tree of mappings and lists (a number indexes an existing list item)."""
    keys = dotted.split(".")
    node: Any = tree
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise UserError(f"--set {dotted}: {key!r} is not an index of the list (0..{len(node) - 1})")
            if last:
                node[int(key)] = value
            else:
                node = node[int(key)]
        elif isinstance(node, dict):
            if last:
                node[key] = value
            else:
                node = node.setdefault(key, {})
        else:
            raise UserError(f"--set {dotted}: {key!r} is inside a value that is neither a mapping nor a list")


def apply_overrides(tree: dict, overrides: list[str]) -> dict:
    """Apply `--set a.b=value` overrides; values are parsed as YAML (`--set train.steps=3`)."""
    for item in overrides:
        if "=" not in item:
            raise UserError(f"--set {item!r}: expected dotted.key=value")
        key, raw = item.split("=", 1)
        try:
            value = load_text(raw, MAX_DEPTH)
        except (DuplicateKey, TooDeep) as e:
            raise UserError(f"--set {item!r}: {getattr(e, 'problem', None) or e}") from None
        except yaml.YAMLError:
            value = raw
        _set_dotted(tree, key.strip(), value)
    return tree


def read_yaml(path: Path) -> dict:
    """Read a spec file as a mapping, or raise a one-line UserError naming the file."""
    if not path.is_file():
        raise UserError(f"{path}: no such spec file")
    try:
        text = path.read_text(encoding="utf-8")
        tree = load_text(text, MAX_DEPTH)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file; a spec is UTF-8 YAML") from None
    except (DuplicateKey, TooDeep) as e:
        raise UserError(f"{path}: {getattr(e, 'problem', None) or e}") from None
    except RecursionError:  # past what the depth scan caught (a complex key): still one line
        raise UserError(f"{path}: nested too deeply to read; a spec needs about 5 levels") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise UserError(f"{path}:{where} YAML syntax error: {problem}") from None
    if tree is None:
        raise UserError(f"{path}: the file is empty; see experiments/smoke.yaml for a minimal spec")
    if not isinstance(tree, dict):
        raise UserError(f"{path}: a spec is a YAML mapping at the top level, not {type(tree).__name__}")
    return tree


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
        more = f" (+{len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
        raise UserError(f"{origin}: {field}: {msg}{more}") from None


def load_spec(path: str | Path, overrides: list[str] | None = None) -> Experiment:
    """Load, override and validate a spec; every failure is one UserError line naming file and field."""
    path = Path(path)
    tree = apply_overrides(read_yaml(path), overrides or [])
    return parse_spec(tree, str(path))


def dump_spec(spec: Experiment) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
