"""Samples and advantages to weights: GRPO advantages and the PPO-clip loss (grpo.py), the update (update.py) and
what it measured (stats.py), the optimizers and their one guarded step (optim.py), distillation (distill.py). Reads
rollout records and its own settings records (settings.py), never the spec."""
