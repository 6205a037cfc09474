"""Playing a batch of envs with the policies: tree and parallel rollouts, credit, role assignment, the intent round;
they hand back records (records.py, episodes.py)."""
