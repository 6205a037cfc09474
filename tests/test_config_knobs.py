"""The settings TRL users reach for: an LR schedule with warmup (kept across --resume), top_p/top_k with the update's
log-probs taken from the distribution sampled from, a prompt-length cap, save_total_limit, clip-higher, and a
"did you mean" naming our field for a TRL or PEFT name. Their defaults leave a run as it was."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pettingllms_cli.algorithms.grpo import ppo_clip_loss
from pettingllms_cli.algorithms.optim import make_optimizers
from pettingllms_cli.algorithms.update import update
from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.decoding import gumbel_picker
from pettingllms_cli.policy.logprobs import group_logprobs
from pettingllms_cli.policy.sampling import truncate
from pettingllms_cli.spec import parse_spec
from pettingllms_cli.training.checkpoint import complete_checkpoints, load_checkpoint, read_state, save_checkpoint
from pettingllms_cli.training.update_settings import optim_settings, update_settings
from tests.test_resume import final_state, metrics, train_in_process

pytestmark = pytest.mark.usefixtures("one_thread")


def _spec(tree: dict, algorithm: dict | None = None, train: dict | None = None):
    sections = {"algorithm": {**tree["algorithm"], **(algorithm or {})}, "train": {**tree["train"], **(train or {})}}
    return parse_spec({**tree, **sections})


def _lrs(team: Team, optimizers, steps: int) -> list[float]:
    """The learning rate each of `steps` training steps runs at (update() with no samples steps only the schedule)."""
    seen = []
    for _ in range(steps):
        seen.append(optimizers["caller"].param_groups[0]["lr"])
        update(team, optimizers, [], [], update_settings(team.spec))
    return seen


# --- defaults: today's behaviour ---------------------------------------------------------------------------------
def test_defaults_resolve_to_todays_behaviour(smoke_tree) -> None:
    spec = parse_spec(smoke_tree)
    algo, train = spec.algorithm, spec.train
    assert (algo.lr_scheduler_type, algo.warmup_steps, algo.warmup_ratio, algo.clip_eps_high) == ("constant", 0, 0.0, None)
    assert (train.top_p, train.top_k, train.max_prompt_length, train.save_total_limit) == (1.0, 0, None, None)
    team = Team(spec)
    assert all(
        st.lr is None
        for st in update(team, make_optimizers(team, optim_settings(team.spec)), [], [], update_settings(team.spec)).values()
    )  # no lr/<agent> column
    assert _lrs(team, make_optimizers(team, optim_settings(team.spec)), 5) == [algo.lr] * 5  # no schedule: lr at every step
    scores = torch.randn(3, 50)
    assert truncate(scores) is scores  # sampling and log-probs untouched
    ratio_logp, adv = torch.log(torch.tensor([[1.5, 0.5]])), torch.tensor([1.0])
    assert ppo_clip_loss(ratio_logp, torch.zeros(1, 2), adv, 0.2)[0][0].tolist() == pytest.approx([-1.2, -0.5])
    context = team.model_of("caller").config.max_position_embeddings
    assert team.prompt_budget("caller") == context - max(train.max_new_tokens, spec.coordination.intent_tokens)


# --- "did you mean" ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("where", "key", "ours"),
    [
        ("algorithm", "learning_rate", "algorithm.lr"),
        ("algorithm", "beta", "algorithm.kl_coef"),
        ("algorithm", "epsilon_high", "algorithm.clip_eps_high"),
        ("train", "max_completion_length", "train.max_new_tokens"),
        ("train", "num_generations", "algorithm.group_size"),
        ("train", "lr", "algorithm.lr"),  # our own name under the wrong section
        (None, "num_iterations", "algorithm.update_epochs"),
    ],
)
def test_a_trl_name_gets_our_name_in_its_error(smoke_tree, where, key, ours) -> None:
    tree = {**smoke_tree, where: {**smoke_tree[where], key: 1}} if where else {**smoke_tree, key: 1}
    with pytest.raises(UserError) as e:
        parse_spec(tree, "x.yaml")
    assert f"did you mean {ours}?" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_peft_name_in_an_agents_lora_gets_our_name(smoke_tree) -> None:
    agent = next(iter(smoke_tree["agents"]))
    tree = {**smoke_tree, "agents": {**smoke_tree["agents"], agent: {**smoke_tree["agents"][agent], "lora": {"lora_alpha": 16}}}}
    with pytest.raises(UserError, match=r"did you mean agents\.<agent>\.lora\.alpha\?"):
        parse_spec(tree)


def test_a_plain_misspelling_keeps_its_message(smoke_tree) -> None:
    with pytest.raises(UserError, match=r"train\.stepz: unknown key \(check the spelling"):
        parse_spec({**smoke_tree, "train": {**smoke_tree["train"], "stepz": 3}})


def test_validate_prints_the_hint_in_one_line_and_exits_2(tmp_path: Path) -> None:
    spec = Path(__file__).resolve().parents[1] / "experiments" / "smoke.yaml"
    out = subprocess.run(
        [sys.executable, "-m", "pettingllms_cli", "validate", str(spec), "--set", "algorithm.learning_rate=1e-4"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1 and "algorithm.learning_rate: unknown key; did you mean algorithm.lr?" in lines[0]


def test_warmup_steps_and_ratio_together_are_refused(smoke_tree) -> None:
    with pytest.raises(UserError, match="warmup_steps .* and warmup_ratio .* both set"):
        _spec(smoke_tree, {"warmup_steps": 2, "warmup_ratio": 0.1})


# --- LR schedule -------------------------------------------------------------------------------------------------
def test_linear_schedule_warms_up_then_falls(smoke_tree) -> None:
    spec = _spec(smoke_tree, {"lr": 0.1, "lr_scheduler_type": "linear", "warmup_steps": 2}, {"steps": 6})
    team = Team(spec)
    got = _lrs(team, make_optimizers(team, optim_settings(team.spec)), 6)
    assert got == pytest.approx([0.0, 0.05, 0.1, 0.075, 0.05, 0.025])  # s/2 during warmup, then (6-s)/4


def test_cosine_with_a_warmup_ratio(smoke_tree) -> None:
    spec = _spec(smoke_tree, {"lr": 1.0, "lr_scheduler_type": "cosine", "warmup_ratio": 0.25}, {"steps": 8})
    team = Team(spec)
    got = _lrs(team, make_optimizers(team, optim_settings(team.spec)), 8)
    assert got[:3] == pytest.approx([0.0, 0.5, 1.0])  # ceil(0.25 * 8) = 2 warmup steps
    assert got[3] == pytest.approx(0.5 * (1 + torch.cos(torch.tensor(torch.pi / 6)).item()))
    assert all(a > b for a, b in zip(got[2:], got[3:], strict=False))  # falls along a half cosine


def test_the_schedule_continues_from_a_checkpoint(smoke_tree, tmp_path: Path) -> None:
    spec = _spec(smoke_tree, {"lr": 0.1, "lr_scheduler_type": "linear", "warmup_steps": 2}, {"steps": 6})
    team = Team(spec)
    optimizers = make_optimizers(team, optim_settings(team.spec))
    _lrs(team, optimizers, 3)
    folder = save_checkpoint(team, optimizers, tmp_path, 3)
    assert read_state(folder)["schedulers"]["caller"]["last_epoch"] == 3
    fresh = make_optimizers(team, optim_settings(team.spec))
    load_checkpoint(team, fresh, folder)
    assert _lrs(team, fresh, 3) == pytest.approx([0.075, 0.05, 0.025])  # not the warmup again


def test_a_checkpoint_without_a_schedule_resumes_at_its_step(smoke_tree, tmp_path: Path) -> None:
    """Checkpoints written before schedules existed hold none: the schedule stands where its step puts it."""
    spec = _spec(smoke_tree, {"lr": 0.1, "lr_scheduler_type": "linear", "warmup_steps": 2}, {"steps": 6})
    team = Team(spec)
    optimizers = make_optimizers(team, optim_settings(team.spec))
    folder = save_checkpoint(team, optimizers, tmp_path, 4)
    state = read_state(folder)
    del state["schedulers"]
    load_checkpoint(team, optimizers, folder, state)
    assert optimizers["caller"].param_groups[0]["lr"] == pytest.approx(0.05)


def test_resume_mid_schedule_ends_like_the_uninterrupted_run(tmp_path: Path) -> None:
    """A linear schedule with warmup and save_total_limit 2: the run keeps its last two checkpoints; resumed from the
    older one, it trains the last step at the same learning rate and ends with the same adapters and moments."""
    knobs = ["algorithm.lr_scheduler_type=linear", "algorithm.warmup_steps=1", "algorithm.lr=0.01"]
    knobs += ["train.checkpoint_every=1", "train.save_total_limit=2"]
    reference = train_in_process(tmp_path / "reference", *knobs)
    assert [step for step, _ in complete_checkpoints(reference)] == [3, 4]
    lrs = [row["lr/caller"] for row in metrics(reference)]
    assert lrs == pytest.approx([0.0, 0.01, 0.01 * 2 / 3, 0.01 / 3], rel=1e-3)  # warmup 1, then linear; rows are rounded
    run = tmp_path / "resumed"
    shutil.copytree(reference, run)
    shutil.rmtree(run / "checkpoints" / "step_4")
    train_in_process(run, *knobs, resume=True)
    assert metrics(run) == metrics(reference)
    got, want = final_state(run), final_state(reference)
    assert got.keys() == want.keys()
    for name in want:
        assert torch.allclose(got[name].float(), want[name].float(), rtol=0, atol=1e-6), name


# --- save_total_limit ---------------------------------------------------------------------------------------------
def test_save_total_limit_never_deletes_the_newest_or_a_newer_one(smoke_tree, tmp_path: Path) -> None:
    spec = _spec(smoke_tree, train={"save_total_limit": 1})
    team = Team(spec)
    optimizers = make_optimizers(team, optim_settings(team.spec))
    for step in (2, 4, 9):
        save_checkpoint(team, optimizers, tmp_path, step)
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [9]
    save_checkpoint(team, optimizers, tmp_path, 5)  # an earlier step after a resume: step_9 is not ours to judge
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [5, 9]


# --- clip-higher ---------------------------------------------------------------------------------------------------
def test_clip_eps_high_widens_only_the_upper_side() -> None:
    logp = torch.log(torch.tensor([[1.5, 0.5]]))  # ratios 1.5 and 0.5
    loss, clipped = ppo_clip_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), 0.2, clip_eps_high=0.28)
    assert loss[0].tolist() == pytest.approx([-1.28, -0.5])  # 1 + 0.28 above; below, min() keeps the unclipped 0.5
    assert clipped.tolist() == [[True, False]]
    loss, _ = ppo_clip_loss(logp, torch.zeros(1, 2), torch.tensor([-1.0]), 0.2, clip_eps_high=0.28)
    assert loss[0].tolist() == pytest.approx([1.5, 0.8])  # negative advantage: the lower side, still 1 - 0.2


# --- top_p / top_k -------------------------------------------------------------------------------------------------
def test_truncate_follows_generates_order_and_keeps_the_sampled_token() -> None:
    scores = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(truncate(scores, top_p=0.7)).tolist() == [[False, False, True, True]]  # 0.5 + 0.3 >= 0.7
    assert torch.isinf(truncate(scores, top_k=3, top_p=0.9)).tolist() == [[False, False, False, True]]
    kept = truncate(scores, top_k=1, keep=torch.tensor([2]))
    assert torch.isinf(kept).tolist() == [[False, True, False, True]]


def test_seeded_draws_stay_inside_top_k() -> None:
    logits = torch.randn(4, 100)
    pick = gumbel_picker([1, 2], 2, 1.0, top_k=3)
    allowed = logits.topk(3).indices
    for _ in range(20):
        picked = pick(logits)
        assert all(int(picked[r]) in allowed[r].tolist() for r in range(4))


def test_update_logprobs_are_those_of_the_truncated_distribution(smoke_tree) -> None:
    spec = _spec(smoke_tree, train={"top_k": 5, "top_p": 0.9})
    team = Team(spec)
    model = team.activate("caller")
    prompt = torch.tensor(team.encode("caller", [{"role": "user", "content": "What is 12+7?"}]))
    completions = team.sample("caller", [prompt.tolist()], 3, 6, 1.0, seeds=[7])[0]
    ids = torch.nn.utils.rnn.pad_sequence(completions, batch_first=True, padding_value=team.tokenizer_of("caller").pad_token_id)
    with torch.no_grad():
        cut, _ = group_logprobs(model, prompt, ids, 1.0, True, 5, 0.9)
        full, _ = group_logprobs(model, prompt, ids, 1.0, True)
        logits = model(input_ids=torch.cat([prompt[None].expand(3, -1), ids], 1)).logits[:, len(prompt) - 1 : -1]
    want = F.log_softmax(truncate(logits.flatten(0, 1).float(), 5, 0.9), -1).gather(-1, ids.flatten()[:, None]).view_as(ids)
    assert torch.allclose(cut, want, atol=1e-4)
    assert (cut[:, 0] > full[:, 0]).all()  # renormalised over fewer tokens: every sampled token is likelier
    assert torch.isfinite(cut).all()


# --- max_prompt_length -------------------------------------------------------------------------------------------
def test_max_prompt_length_caps_every_prompt_keeping_its_end(smoke_tree) -> None:
    team = Team(_spec(smoke_tree, train={"max_prompt_length": 40}))
    history = [{"role": "system", "content": "You add numbers."}]
    history += [{"role": r, "content": f"turn {i}: " + "seven " * 30} for i, r in enumerate(["user", "assistant"] * 3)]
    history += [{"role": "user", "content": "What is 12+7?"}]
    full = Team(parse_spec(smoke_tree)).encode("caller", history)
    capped = team.encode("caller", history)
    assert len(full) > 40 >= len(capped)  # without the cap the prompt is longer
    assert "12+7?" in team.decode("caller", torch.tensor(capped))  # the newest message stays
    assert team.prompt_budget("caller") == 40
