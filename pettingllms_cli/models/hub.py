"""Hub ids the Hugging Face way: the local HF cache first; online, an uncached id (or revision) downloads.

With `HF_HUB_OFFLINE=1`, or when the hub cannot be reached, an uncached id fails at once in one line naming
`pettingllms models pull` and the variable. The hub is asked once, with a timeout (the client's own requests wait
without one), so no network fails within seconds. Only the files a causal LM loads from are downloaded: the
top-level config, tokenizer and template files, and the weights (safetensors where the repo has them, else `.bin`);
`validate` only asks whether the hub has the model (`check`), loading downloads it (`snapshot`).
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

from pettingllms_cli.errors import UserError

HUB_TIMEOUT_S = 5.0  # seconds to reach the hub before it counts as unreachable
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # huggingface_hub honours both
TRUE = {"1", "ON", "YES", "TRUE"}  # what huggingface_hub reads as set
KEPT_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken")  # config, tokenizer and chat-template files


def is_hub_id(source: str) -> bool:
    """`owner/name` that is not a local path (a folder of that name wins, as in transformers)."""
    return source.count("/") == 1 and not source.startswith((".", "/", "~")) and not Path(source).expanduser().exists()


def offline() -> bool:
    """Read when asked, not at import (huggingface_hub reads it once), so a test or a caller may set it late."""
    return any(os.environ.get(name, "").strip().upper() in TRUE for name in OFFLINE_VARIABLES)


def snapshot(repo_id: str, revision: str | None = None, refresh: bool = False) -> Path:
    """The local folder of a hub model at `revision` (default: its default branch): the cache's, else downloaded.

    `refresh` (`models pull`): online, ask the hub what the revision is now and fetch what the cache lacks of it.
    """
    folder = None if refresh and not offline() else cached(repo_id, revision)
    if folder is not None:
        return folder
    info = ask(repo_id, revision)
    files = model_files([s.rfilename for s in info.siblings or []])
    try:
        # by its name, not info.sha: the cache then records what the branch or tag points at, for offline use
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=files))
    except Exception as e:  # the connection dropped, the disk filled: one line, the cache keeps what it finished
        again = f"run `pettingllms models pull {repo_id}` again"
        raise UserError(f"{_what(repo_id, revision)}: the download failed ({_first_line(e)}); {again}") from None


def check(repo_id: str, revision: str | None = None) -> Path | None:
    """For `validate`: the cached folder, or None once the hub says it has the model (nothing is downloaded)."""
    folder = cached(repo_id, revision)
    if folder is None:
        ask(repo_id, revision)
    return folder


def cached(repo_id: str, revision: str | None) -> Path | None:
    """The cached snapshot (a branch or tag through the cache's refs, a commit directly), if it holds a config."""
    try:
        folder = Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, ValueError):  # not cached; ValueError: an id the hub would refuse too
        return None
    return folder if (folder / "config.json").is_file() else None


def ask(repo_id: str, revision: str | None):
    """The hub's record of the model at `revision`, from one bounded request; every way to get none is one line."""
    what = _what(repo_id, revision)
    if offline():
        raise UserError(
            f"{what} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 forbids downloading it; "
            f"run `pettingllms models pull {repo_id}` with HF_HUB_OFFLINE unset, or use a built-in alias or a local folder"
        )
    try:
        info = HfApi().model_info(repo_id, revision=revision, timeout=HUB_TIMEOUT_S)
    except RevisionNotFoundError:
        raise UserError(
            f"hub model {repo_id!r} has no revision {revision!r}; give an existing branch, tag or commit, "
            "or drop `revision` for the default branch"
        ) from None
    except RepositoryNotFoundError:  # also a gated or private repo without a token
        raise UserError(
            f"hub model {repo_id!r} does not exist, or is private or gated: check the id, or log in (`hf auth login`, HF_TOKEN)"
        ) from None
    except Exception as e:  # no route, no DNS, a timeout, a 5xx: the client raises its HTTP library's own kinds
        raise UserError(
            f"{what} is not in the local Hugging Face cache and the hub cannot be reached ({_first_line(e)}); "
            f"run `pettingllms models pull {repo_id}` where it can be, or set HF_HUB_OFFLINE=1 to use only the cache"
        ) from None
    if not any(f.endswith((".safetensors", ".bin")) for f in model_files([s.rfilename for s in info.siblings or []])):
        raise UserError(f"{what} has no safetensors or .bin weights at its top level; transformers cannot load it")
    return info


def model_files(names: list[str]) -> list[str]:
    """The repo files a causal LM loads from: top-level config/tokenizer files and one kind of weights.

    >>> model_files(["config.json", "model.safetensors", "pytorch_model.bin", "onnx/model.onnx", "tokenizer.json"])
    ['config.json', 'tokenizer.json', 'model.safetensors']
    >>> model_files(["config.json", "pytorch_model.bin", "README.md"])
    ['config.json', 'pytorch_model.bin']
    """
    top = [n for n in names if "/" not in n]
    weights = [n for n in top if n.endswith(".safetensors")] or [n for n in top if n.endswith(".bin")]
    return [n for n in top if n.endswith(KEPT_SUFFIXES)] + weights


def _what(repo_id: str, revision: str | None) -> str:
    return f"hub model {repo_id!r}" + (f" at revision {revision!r}" if revision else "")


def _first_line(error: Exception) -> str:
    text = (str(error).strip().splitlines() or [""])[0][:160]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
