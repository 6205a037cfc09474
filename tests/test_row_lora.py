"""Per-row LoRA (policy/row_lora.py): one masked product per layer gives what PEFT's mixed-adapter batch and one
forward per adapter give, for every row, with several adapters, a row on the bare base, and ranks that differ."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from pettingllms_cli.models.tiny import tiny_model
from pettingllms_cli.policy import row_lora
from pettingllms_cli.policy.row_lora import PATCHED, per_row_lora

pytestmark = pytest.mark.usefixtures("one_thread")

RANKS = {"a": 4, "b": 8, "c": 2}  # three adapters with their own ranks


@pytest.fixture(scope="module")
def model():
    base, _ = tiny_model("tiny-llama")
    names = sorted(RANKS)
    config = lambda r: LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear")  # noqa: E731
    peft = get_peft_model(base, config(RANKS[names[0]]), adapter_name=names[0])
    for name in names[1:]:
        peft.add_adapter(name, config(RANKS[name]))
    with torch.no_grad():
        torch.manual_seed(3)
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.3)
    return peft.eval()


ROWS = ["a", "b", "__base__", "c", "a", "b"]


def _ids() -> torch.Tensor:
    return torch.randint(3, 300, (len(ROWS), 7), generator=torch.Generator().manual_seed(0))


def _alone(model, ids: torch.Tensor) -> torch.Tensor:
    """Each row through its own adapter in a forward of its own (the bare base for `__base__`)."""
    rows = []
    for i, name in enumerate(ROWS):
        if name == "__base__":
            with model.disable_adapter():
                rows.append(model(input_ids=ids[i : i + 1]).logits)
        else:
            model.set_adapter(name)
            rows.append(model(input_ids=ids[i : i + 1]).logits)
    return torch.cat(rows)


@torch.no_grad()
def test_per_row_lora_gives_each_row_its_own_adapter(model):
    ids = _ids()
    with per_row_lora(model, ROWS, torch.float32) as fused:
        got = model(input_ids=ids, adapter_names=ROWS).logits
    assert fused == sum(1 for m in model.modules() if isinstance(m, row_lora.LoraLinear))  # every layer is plain LoRA
    peft = model(input_ids=ids, adapter_names=ROWS).logits  # PEFT's own mixed path, after the block
    torch.testing.assert_close(got, peft, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, _alone(model, ids), rtol=1e-5, atol=1e-5)
    with model.disable_adapter():
        bare = model(input_ids=ids).logits
    for i, name in enumerate(ROWS):  # the adapters matter: no row is what another adapter would give it
        assert (name == "__base__") == torch.allclose(got[i], bare[i], atol=1e-4), name


@torch.no_grad()
def test_the_layers_get_peft_back_after_the_block(model):
    with per_row_lora(model, ROWS, torch.float32):
        assert all(PATCHED in vars(m) for m in model.modules() if isinstance(m, row_lora.LoraLinear))
    assert not any(PATCHED in vars(m) for m in model.modules())


@torch.no_grad()
def test_a_layer_of_another_lora_kind_keeps_peft_path(model, monkeypatch):
    """A layer whose adapters are not plain LoRA (DoRA, a LoRA bias) is left to PEFT; the rows still come out right."""
    layers = [m for m in model.modules() if isinstance(m, row_lora.LoraLinear)]
    odd = layers[0]
    plain = row_lora.plain
    monkeypatch.setattr(row_lora, "plain", lambda layer, adapters: layer is not odd and plain(layer, adapters))
    ids = _ids()
    with per_row_lora(model, ROWS, torch.float32) as fused:
        assert PATCHED not in vars(odd)
        got = model(input_ids=ids, adapter_names=ROWS).logits
    assert fused == len(layers) - 1
    torch.testing.assert_close(got, _alone(model, ids), rtol=1e-5, atol=1e-5)


def test_masks_are_made_once_per_row_list_and_layout():
    masks = row_lora.Masks(torch.float32, torch.device("cpu"))
    rows = ["b", "a", "__base__"]
    blocks = (("a", 2), ("b", 3))
    mask = masks.of(blocks, rows)
    assert mask.tolist() == [[0, 0, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]]
    assert masks.of(blocks, rows) is mask  # the same list: the same mask, every layer of a forward
    assert masks.of(blocks, list(rows)) is not mask  # another list object is never taken for it
