"""Running a training job: the loop (loop.py), its metrics, checkpoints, resume, run directory and lock, and the
commands that train or load runs (`eval` of a run, `compare`)."""
