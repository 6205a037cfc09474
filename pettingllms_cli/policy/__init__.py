"""The team's policies: bases and adapters (adapters.py), prompts, decoding and log-probs, behind the `Sampler`
protocol (sampler.py) the rollout uses."""
