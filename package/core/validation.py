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
    data = source.data if data is None else data
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        loc = _written(tuple(err["loc"]), data, err["type"] == "missing")
        where = origins.get(loc) or translate(loc, origins)
        allowed = err["msg"].removeprefix("Value error, ")
        if len(loc) < len(err["loc"]):
            # pydantic tried each member of a union (int | float | str | bool) and put its name in
            # the location: name the key once, with everything it would have taken
            tried = [e["msg"].removeprefix("Input should be ") for e in errors
                     if tuple(e["loc"][:len(loc)]) == loc and len(e["loc"]) > len(loc)]
            allowed = "one of: " + ", ".join(dict.fromkeys(tried))
        if err["type"] == "extra_forbidden":
            allowed = f"unknown key; allowed here: {', '.join(fields_at(model, loc[:-1]))}"
        value = err.get("input") if not isinstance(err.get("input"), dict) else None
        raise ConfigError(source.path, source.line_of(where), where, value, allowed) from None


def _written(loc: tuple, data, missing: bool) -> tuple:
    """`loc` as far as `data` holds it, and for a missing key that key: past that, pydantic's
    location names a union member it tried (("options", "x", "int")), no key of the file."""
    for depth, part in enumerate(loc):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return loc[:depth] + loc[-1:] if missing else loc[:depth]
    return loc


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
