"""The `pettingllms` command line. User mistakes end as one line on stderr and exit code 2."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pettingllms_cli import distributed
from pettingllms_cli.errors import Stopped, UserError
from pettingllms_cli.jsonio import write_json
from pettingllms_cli.memory import return_large_frees_to_os
from pettingllms_cli.spec.limits import MAX_PROBLEMS, MAX_SEED, MAX_SEEDS, MAX_STEPS

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Train teams of LLM agents with multi-agent RL (AT-GRPO).")
models_app = typer.Typer(no_args_is_help=True, help="Built-in offline models.")
envs_app = typer.Typer(no_args_is_help=True, help="Registered environments.")
app.add_typer(models_app, name="models")
app.add_typer(envs_app, name="envs")
console = Console()


def _print_version(value: bool) -> None:
    if value:
        from pettingllms_cli import __version__

        say(f"pettingllms {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Train teams of LLM agents with multi-agent RL (AT-GRPO)."""


def say(message: str) -> None:
    """Print a plain line: paths and names are never read as rich markup (`[x]` in a path stays)."""
    console.print(message, markup=False, highlight=False, soft_wrap=True)


def out_path(value: str | None) -> Path | None:
    """`--out` as a path; an empty one is a usage error (Path("") is the current folder, which --overwrite would clear)."""
    if value is None:
        return None
    if not value.strip():
        raise UserError(f"--out {value!r}: an empty path; name a folder (e.g. --out runs/my_run)")
    return Path(value)


SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a spec field: dotted.key=value (repeatable).")]


def _load(spec_path: Path, overrides: list[str] | None, max_steps: int | None = None, seed: int | None = None):
    from pettingllms_cli.spec import load_spec

    overrides = list(overrides or [])
    if max_steps is not None:
        overrides.append(f"train.steps={max_steps}")
    if seed is not None:
        overrides.append(f"seed={seed}")
    return load_spec(spec_path, overrides)


@app.command()
def train(
    spec: Annotated[Path, typer.Argument(help="Experiment YAML file.")],
    out: Annotated[str | None, typer.Option(help="Run directory (default: output_dir or runs/<name>).")] = None,
    set_: SetOpt = None,
    max_steps: Annotated[int | None, typer.Option(min=1, max=MAX_STEPS, help="Override train.steps.")] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, help="Override the seed.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue from the newest complete checkpoint in the run directory.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing run directory.")] = False,
    force: Annotated[
        bool, typer.Option(help="With --resume: continue although the spec differs from the run's (recorded in resumes.jsonl).")
    ] = False,
) -> None:
    """Train the experiment's agents together and write a run directory.

    SIGINT/SIGTERM stop after the current step with a checkpoint; --resume continues exactly.
    """
    run_dir = out_path(out)
    experiment = _load(spec, set_, max_steps, seed)
    _check_models(experiment)
    if force and not resume:
        raise UserError("--force only applies with --resume (to continue a run with a changed spec)")
    if resume and overwrite:  # before the lock, which creates the run directory
        raise UserError("--resume and --overwrite contradict each other: --resume continues the run, --overwrite deletes it")
    from pettingllms_cli.training.loop import train as run_training

    run_dir = run_dir or experiment.run_dir
    again = [*distributed.relaunch(), "train", str(spec), "--out", str(run_dir)]
    again += [arg for item in set_ or [] for arg in ("--set", item)]
    again += ["--max-steps", str(max_steps)] if max_steps is not None else []
    again += ["--seed", str(seed)] if seed is not None else []
    resume_command = shlex.join([*again, "--resume"])
    run_training(
        experiment, run_dir, resume=resume, overwrite=overwrite, console=console, force=force, resume_command=resume_command
    )


@app.command()
def validate(spec: Annotated[Path, typer.Argument(help="Experiment YAML file.")], set_: SetOpt = None) -> None:
    """Check a spec (names, roles, models, budgets) without loading any weights."""
    experiment = _load(spec, set_)
    _check_models(experiment)
    held_out = _check_data(experiment)
    roles = ", ".join(f"{a}: {'/'.join(s.roles)}" for a, s in experiment.agents.items())
    say(f"{spec}: ok ({experiment.env.name}, {len(experiment.agents)} agent(s): {roles}; {held_out} held-out problems)")


def _check_data(experiment) -> int:
    """Open env.data as `train` will (a missing or bad file is a UserError); returns the held-out count."""
    from pettingllms_cli.envs.loading import load_split

    env = experiment.env
    load_split(env.name, env.data, "train", experiment.seed, 1, env.options)  # one is enough to read the file
    return len(load_split(env.name, env.data, "test", experiment.seed, env.eval_problems, env.options))


def _check_models(experiment) -> None:
    from pettingllms_cli.models.loader import check_models  # imported here: torch loads only for commands that need it

    check_models(experiment.models)
    if getattr(experiment, "sampler", "hf") == "vllm":  # before any weight loads: one line, exit 2
        from pettingllms_cli.policy.vllm_sampler import sampler_problem

        problem = sampler_problem(experiment)
        if problem:
            raise UserError(problem)
    _check_sandbox(experiment)


def _check_sandbox(experiment) -> None:
    """An env that runs model code needs the kernel's sandbox, or `tools.sandbox: best_effort` (docs/sandbox.md)."""
    from pettingllms_cli.envs import ENVS
    from pettingllms_cli.tools.sandbox import require

    if ENVS[experiment.env.name].runs_model_code:
        require(experiment.tools.sandbox, warn=say)


@app.command()
def schema() -> None:
    """Print the experiment spec's JSON schema."""
    from pettingllms_cli.spec import Experiment

    print(json.dumps(Experiment.model_json_schema(), indent=2))


@models_app.command("list")
def models_list() -> None:
    """List built-in models and whether they are ready offline."""
    from pettingllms_cli.models.loader import source_problem
    from pettingllms_cli.spec.builtin_models import BUILTINS, cache_root

    table = Table("name", "status", "description")
    for name, b in BUILTINS.items():
        cached = (cache_root() / name / "config.json").is_file()
        status = "cached" if cached else (source_problem(name) or "available (run `models pull`)")
        table.add_row(name, status, b.description)
    console.print(table)


@models_app.command("pull")
def models_pull(name: Annotated[str, typer.Argument(help="Built-in model alias.")]) -> None:
    """Materialise a built-in model in the local cache (converted once, then loads in a second)."""
    from pettingllms_cli.models.loader import pull

    say(f"{name}: {pull(name)}")


@envs_app.command("list")
def envs_list() -> None:
    """List environments with their versions and role layouts."""
    from pettingllms_cli.envs import ENVS
    from pettingllms_cli.envs.registry import ENTRY_POINT_GROUP as ENVS_GROUP

    table = Table("name", "version", "layouts")
    for name, env in sorted(ENVS.items()):
        table.add_row(name, str(env.version), "; ".join(f"{k}: {', '.join(v)}" for k, v in env.layouts.items()))
    for name in ENVS.entry_point_names():  # installed packages' envs, loaded only when used
        table.add_row(name, "-", f"entry point {ENVS_GROUP}")
    console.print(table)


@envs_app.command("check")
def envs_check(
    name: Annotated[str, typer.Argument(help="Registered env name (see `pettingllms envs list`) or import path `module:Class`.")],
    data: Annotated[str, typer.Option(help="A data file in a format the env reads, or `generated`.")] = "generated",
    limit: Annotated[int, typer.Option(min=1, max=MAX_PROBLEMS, help="Problems per split (train and test) to replay.")] = 8,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED, help="Seed for generated problems.")] = 0,
) -> None:
    """Check an env's contract and replay reference (must solve) and corrupted (must fail) solutions."""
    from pettingllms_cli.envs import ENVS, EnvError
    from pettingllms_cli.envs.checker import check_env

    try:
        env = ENVS.resolve(name)  # a built-in, an entry point or `module:Class`
    except EnvError as e:
        raise UserError(str(e)) from None
    report = check_env(env, data=data, limit=limit, seed=seed)
    for failure in report.failures:
        console.print(f"[red]FAIL[/red] {escape(failure)}", highlight=False, soft_wrap=True)
    of = f" of {report.available}" if report.available is not None else ""
    more = " (raise --limit to check more)" if report.available is not None and report.checked < report.available else ""
    console.print(f"{report.passed} passed, {report.failed} failed; {report.checked}{of} problems replayed{more}")
    if not report.ok:
        raise typer.Exit(1)


# --- eval, compare, report (issue 5) ----------------------------------------------------------
@app.command("eval")
def eval_(
    target: Annotated[
        Path,
        typer.Argument(help="A run directory (its newest checkpoint), a checkpoints/step_N folder, or a spec (untrained base)."),
    ],
    data: Annotated[
        str | None, typer.Option(help="Problems from this data file (any format the env reads), not env.data.")
    ] = None,
    split: Annotated[str, typer.Option(help="`test` (held-out) or `train`.")] = "test",
    episodes: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_PROBLEMS, help="Problems to score, one episode each (default: env.eval_problems)."),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(min=0, max=MAX_SEED, help="Seed for generated problems and sampling (default: the spec's seed)."),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="Sample at this temperature (> 0) instead of greedy decoding.")
    ] = None,
    out: Annotated[
        str | None, typer.Option(help="Write the full result (per-episode outcomes, transcripts) to this JSON file.")
    ] = None,
) -> None:
    """Score a run, a checkpoint or an untrained spec on held-out problems."""
    from pettingllms_cli.training.eval_target import resolve_target, run_eval

    out = out_path(out)
    if temperature is not None and not (math.isfinite(temperature) and temperature > 0):
        raise UserError(f"--temperature {temperature}: must be a finite number > 0; omit it for greedy decoding")
    _check_models(resolve_target(target).spec)
    from pettingllms_cli.training.lock import writer_lock
    from pettingllms_cli.training.rundir import run_dir_of

    into_run = run_dir_of(out) if out is not None else None  # --out inside a run directory: one writer at a time
    with writer_lock(into_run, "then run this eval again") if into_run else contextlib.nullcontext():
        result = run_eval(target, data=data, split=split, episodes=episodes, seed=seed, temperature=temperature)
        console.print(_eval_table(result))
        if out is not None and distributed.is_main():
            write_json(out, result, then="choose another --out")
            say(f"wrote {out}")


def _eval_table(result: dict) -> Table:
    ci = result["team_success_ci"]
    what = f"{result['spec']} ({result['kind']}, step {result['step']})"
    table = Table("metric", "value", title=f"{what}: {result['episodes']} {result['split']} episodes, {result['decoding']}")
    table.add_row("team success rate", f"{result['team_success_rate']:.3f}  [95% CI {ci[0]:.3f}, {ci[1]:.3f}]")
    attempts = result["mean_attempts_to_success"]  # over solved episodes; None when none was solved
    table.add_row("mean attempts to success (solved)", "none solved" if attempts is None else f"{attempts:.2f}")
    table.add_row("mean turns", f"{result['mean_turns']:.2f}")
    for key in sorted(k for k in result if k.startswith(("reward/", "action_logprob/", "tool_call_validity/"))):
        table.add_row(key, f"{result[key]:.3f}")
    table.add_row("tokens generated", str(result["tokens_generated"]))
    table.add_row("seconds", f"{result['seconds']:.1f}")
    return table


@app.command()
def compare(
    specs: Annotated[
        list[Path], typer.Argument(help="Two or more experiment YAML files; the first is baseline A of the ratios.")
    ],
    seeds: Annotated[int, typer.Option(min=1, max=MAX_SEEDS, help="Seeds per spec (0..N-1); each spec x seed is one run.")] = 3,
    max_steps: Annotated[int | None, typer.Option(min=1, max=MAX_STEPS, help="Override train.steps for every spec.")] = None,
    out: Annotated[str, typer.Option(help="Folder for the runs (<out>/<name>/seed<k>) and compare.md/json/html.")] = (
        "runs/compare"
    ),
    allow_unequal: Annotated[
        bool,
        typer.Option(
            help="Compare specs that differ in more than what defines a team (layout, agents and roles, specialization, "
            "assignment, distill, coordination, credit: reward.credit, team_signal, balance_verdicts), e.g. in algorithm.lr "
            "or models."
        ),
    ] = False,
    episodes: Annotated[
        int | None, typer.Option(min=1, max=MAX_PROBLEMS, help="Held-out problems (default: the first spec's eval_problems).")
    ] = None,
    threshold: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Held-out success (train.eval_every curve) that counts as converged.")
    ] = 0.5,
    window: Annotated[int, typer.Option(min=1, help="Held-out points averaged before checking the threshold.")] = 3,
    budget: Annotated[
        str,
        typer.Option(
            help="What is held equal: `actions` (actions_total: sampled, play-outs and intents) or `tokens` "
            "(tokens_total). The budget of each seed is what the arm with the most roles (the first on a tie) spends in "
            "train.steps steps; every other arm trains until its running total reaches it, so totals agree within one "
            "step. `steps`: nothing levelled."
        ),
    ] = "actions",
    data: Annotated[
        str | None, typer.Option(help="Score every arm on this data file's held-out problems (as `eval --data`).")
    ] = None,
) -> None:
    """Train each spec for N seeds at equal compute, score all on the same held-out problems, write the verdict and tables."""
    from pettingllms_cli.analysis.budget import BUDGETS
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.compare import compare as run_compare
    from pettingllms_cli.training.compare import console_table, ratios_table

    out = out_path(out)
    if budget not in BUDGETS:
        raise UserError(f"--budget {budget!r}: use one of {', '.join(BUDGETS)}")
    for path in specs:
        _check_models(load_spec(path))
    again = shlex.join([*distributed.relaunch(), *sys.argv[1:]])  # the rerun that continues a stopped compare
    result = run_compare(
        specs,
        seeds,
        max_steps,
        out,
        allow_unequal,
        episodes,
        threshold,
        window,
        console=console,
        budget=budget,
        data=data,
        again=again,
    )
    console.print(result["verdict"], markup=False, highlight=False)
    console.print(console_table(result))
    console.print(ratios_table(result))
    say(f"wrote {out / 'compare.md'}, {out / 'compare.json'}, {out / 'compare.html'}")


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A run directory written by `pettingllms train`.")]) -> None:
    """(Re)write a run's report.md and self-contained report.html with plots."""
    from pettingllms_cli.analysis.report import write_report
    from pettingllms_cli.training.lock import writer_lock

    if not run_dir.is_dir() or not ((run_dir / "metrics.jsonl").is_file() or (run_dir / "spec.yaml").is_file()):
        raise UserError(f"{run_dir}: not a run directory (no metrics.jsonl or spec.yaml); pass the --out folder of `train`")
    with writer_lock(run_dir, "then run `pettingllms report` again once it ends (train writes the report itself)"):
        md = write_report(run_dir)
    say(f"wrote {md} and {run_dir / 'report.html'}")


# --- play, export (issue 29) -------------------------------------------------------------------
RunArg = Annotated[Path, typer.Argument(help="A run directory written by `pettingllms train` (or its checkpoints/step_N).")]
CheckpointOpt = Annotated[int | None, typer.Option(min=0, help="Use checkpoints/step_N (default: the newest complete one).")]


@app.command()
def play(
    run: RunArg,
    checkpoint: CheckpointOpt = None,
    question: Annotated[str | None, typer.Option(help="A new problem in free text (envs whose problem is a question).")] = None,
    data: Annotated[str | None, typer.Option(help="A data file (or `generated`): play one of its held-out problems.")] = None,
    index: Annotated[
        int | None, typer.Option(min=0, help="With --data: which held-out problem, from 0 (as `eval` orders them).")
    ] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Print the episode as JSON: every role's prompt, action and tokens.")
    ] = False,
    prompts: Annotated[bool, typer.Option(help="Show each role's prompt in the transcript.")] = False,
    temperature: Annotated[
        float | None, typer.Option(help="Sample at this temperature (> 0) instead of greedy decoding.")
    ] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, help="Seed for sampling (default: the spec's seed).")] = None,
) -> None:
    """Play one episode with the trained team and the env's real tools (greedy by default)."""
    from pettingllms_cli.training.play import play as run_play
    from pettingllms_cli.training.play import show

    record = run_play(run, question, data, index, checkpoint, temperature, seed)
    if json_:
        print(json.dumps(record, indent=2))
    else:
        show(record, console, prompts)


@app.command()
def export(
    run: RunArg,
    out: Annotated[str, typer.Option(help="A new or empty folder (or an earlier export, with --overwrite).")],
    checkpoint: CheckpointOpt = None,
    merge: Annotated[bool, typer.Option(help="Also write each agent's full merged weights (safetensors) under merged/.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace an earlier export at --out (never any other folder).")] = False,
) -> None:
    """Write each trained agent as a standalone folder: PEFT adapter, tokenizer, prompt.json, model card."""
    from pettingllms_cli.training.export import export as run_export

    where = run_export(run, out_path(out), checkpoint, merge, overwrite)
    say(f"wrote {where} ({where / 'README.md'} says how to serve it)")


INTERRUPTED = 130  # exit code of a command stopped by Ctrl-C or a second SIGINT/SIGTERM (128 + SIGINT)


def _say_interrupted() -> None:
    """One line on stderr: what stopped the command and what it left behind."""
    from pettingllms_cli.training.graceful import abort_reason

    reason = abort_reason() or "interrupted (Ctrl-C); the command did not finish"
    Console(stderr=True).print(f"aborted: {reason}", markup=False, highlight=False, soft_wrap=True)


def _say_error(message: str) -> None:
    """One `error:` line on stderr, never read as rich markup."""
    Console(stderr=True).print(f"[red]error:[/red] {escape(' '.join(message.splitlines()))}", highlight=False, soft_wrap=True)


def main() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)  # library deprecation notes are not for users
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    # bitsandbytes warns at import, on CPUs with AVX512-BF16, that an optional kernel for its bf16 CPU
    # inference path is missing; pettingllms keeps that path off (models/loader.py, keep_4bit_layout).
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    return_large_frees_to_os()  # N agents' activations, freed in turn, must not pile up
    try:
        distributed.init()  # under torchrun / accelerate launch; a no-op in one process
        console.quiet = not distributed.is_main()  # rank 0 alone prints
        # Without standalone mode click returns, not raises, the code of a typer.Exit (and typer turns
        # Ctrl-C into Exit(130)): pass it on, or `envs check` failures and aborts would exit 0.
        code = app(standalone_mode=False)
        if isinstance(code, int) and code != 0:
            if code == INTERRUPTED:
                _say_interrupted()
            sys.exit(code)
        distributed.shutdown(succeeded=True)
    except Stopped as e:  # a graceful stop: what was kept, what is missing, how to go on
        Console(stderr=True).print(" ".join(str(e).splitlines()), markup=False, highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except UserError as e:
        _say_error(str(e))
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        _say_interrupted()
        sys.exit(INTERRUPTED)
    except Exception as e:  # usage errors (a bad flag value, an unknown option) carry their own exit code
        import click

        if type(e).__name__ == "NoArgsIsHelpError":  # a bare `pettingllms` (or group): its help is already printed
            sys.exit(0)
        if isinstance(e, click.exceptions.ClickException | typer.TyperException) and hasattr(e, "format_message"):
            _say_error(e.format_message())  # click's and typer's own (typer >= 0.29 vendors click): one line each
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Exit | typer.Exit):
            sys.exit(e.exit_code)
        raise
    finally:
        distributed.shutdown()
