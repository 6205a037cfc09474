"""Samples and advantages to weights: GRPO advantages and the PPO-clip loss (grpo.py), the update (update.py),
the optimizers and their one guarded step (optim.py), distillation (distill.py). Reads rollout records only."""
