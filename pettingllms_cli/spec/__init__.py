"""The experiment file: one typed pydantic schema (experiment.py) that fails at load, before any weight.

This package imports no torch: `pettingllms validate` and `schema` stay fast, and the built-in
model table it checks sources against is plain data (spec/builtin_models.py).
"""

from pettingllms_cli.spec.experiment import Experiment, LoraSpec, ModelSpec, apply_overrides, dump_spec, load_spec, parse_spec

__all__ = ["Experiment", "LoraSpec", "ModelSpec", "apply_overrides", "dump_spec", "load_spec", "parse_spec"]
