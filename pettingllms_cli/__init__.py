"""pettingllms: train teams of LLM agents together with reinforcement learning (AT-GRPO)."""

__version__ = "0.1.0"
