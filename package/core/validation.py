"""Checking a TOML file against its pydantic model, with errors that name file, line and key."""

from __future__ import annotations

import typing

from pydantic import BaseModel, ValidationError

from longhaul.core.errors import ConfigError
from longhaul.core.tomlsource import TomlSource


def validate(source: TomlSource, model: type[BaseModel], data: dict | None = None, origins: dict | None = None):
    """model.model_validate(data or the whole file); the first problem becomes a ConfigError.
    origins maps key paths of `data` to where they were written when `data` was derived from the
    file (profile scenarios and subsets), so the message points at the line the user wrote."""
    origins = origins or {}
    try:
        return model.model_validate(source.data if data is None else data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        where = origins.get(loc) or translate(loc, origins)
        allowed = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            allowed = f"unknown key; allowed here: {', '.join(fields_at(model, loc[:-1]))}"
        value = err.get("input") if not isinstance(err.get("input"), dict) else None
        raise ConfigError(source.path, source.line_of(where), where, value, allowed) from None


def translate(loc: tuple, origins: dict) -> tuple:
    """Map a derived key path back to where it was written (longest matching prefix)."""
    for length in range(len(loc), 0, -1):
        if loc[:length] in origins:
            return origins[loc[:length]] + loc[length:]
    return loc


def fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys a model accepts at a location, walking nested models and lists of models."""
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        inner = _model_in(field.annotation) if field is not None else None
        if inner is None:
            break
        model = inner
    return list(model.model_fields)


def _model_in(annotation) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
