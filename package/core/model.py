"""The base of every validated file's models: unknown keys are errors, values are frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"     # flow, scenario, host and inventory names


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
