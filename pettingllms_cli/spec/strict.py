"""The base every spec section derives from: unknown keys, NaN/inf and booleans-as-numbers are errors."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

NAME_RE = r"^[A-Za-z][A-Za-z0-9_]*$"  # use with re.fullmatch: `$` alone also matches before a trailing newline


class Strict(BaseModel):
    """Unknown keys, NaN/inf and true/false where a number belongs are errors naming the field."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and field.annotation in NUMBER_TYPES:
            raise ValueError(f"expects a number, not {str(value).lower()}")
        return value


NUMBER_TYPES = (int, float, int | None, float | None)  # fields where YAML's true/false would pass as 1/0
