"""pettingllms: train teams of LLM agents together with reinforcement learning (AT-GRPO).

The Python API (docs/python.md): `load_spec`, `train`, `evaluate`, `compare`, `play`, `export`. They are imported on
first use, so `import pettingllms_cli` stays cheap (no torch); the first use also hides library warning noise.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["compare", "evaluate", "export", "load_spec", "play", "train"]


def __getattr__(name: str):
    """The API functions, loaded (with training/api.py and torch) when first asked for."""
    if name not in __all__:
        raise AttributeError(f"module 'pettingllms_cli' has no attribute {name!r}")
    from pettingllms_cli.training import api

    api.quiet_libraries()
    value = getattr(api, name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
