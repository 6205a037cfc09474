"""Playing a batch of envs with the policies, reading only `RolloutSettings` (settings.py). The pipeline:
collect.py (entry) -> tree.py / parallel.py -> act.py (one action; the intent round) and playout.py; on_policy.py
measures the policy's own episodes; credit, role assignment and the intent protocol beside them. They hand back
frozen records (records.py, episodes.py)."""
