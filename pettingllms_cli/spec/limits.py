"""Upper bounds on every count a user types (spec fields and command-line flags), in one place for both.

A typo (an extra 000) is refused at load, naming the field or flag, instead of growing memory until the run is
killed: every problem is built up front and every episode's outcome kept, about 1 KB each (100 MB at the bound),
and a step's problems_per_step x group_size candidates are sampled and held with their activations together.
Plain numbers, so the CLI reads them without importing pydantic.
"""

MAX_PROBLEMS = 100_000  # env.eval_problems, train.eval_subset, `eval --episodes`, `compare --episodes`
MAX_PROBLEMS_PER_STEP = 4096
MAX_STEPS = 1_000_000  # train.steps and every "every N steps" count
MAX_SEED = 2**32 - 1  # numpy's seed range; `eval --seed` too
MAX_DEPTH = 32  # nesting of a spec file; a spec needs 5
MAX_NODES = 100_000  # values in a spec file once its aliases are expanded; a spec holds about 100
MAX_SEEDS = 1000  # `compare --seeds`: each seed is a whole training run per arm
