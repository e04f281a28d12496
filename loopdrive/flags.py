"""Command-line flags from a settings model, so a setting is defined once (its pydantic field: name,
type, default, description) and the command line cannot drift from the config files.

``add_model_flags(parser, Model)`` adds ``--field-name`` for each field; ``model_from_flags(args,
Model)`` builds the model from the flags that were given (the others keep the model's defaults), so
validation and its error messages are the model's own.
"""

from __future__ import annotations

import argparse
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel


def _inner(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``| None``, and whether None was allowed."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else annotation), True
    return annotation, False


def _parser_of(annotation: Any, flag: str):
    """A function from the flag's text to the field's value, and the choices (for Literal)."""
    kind, _ = _inner(annotation)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:
        return str, list(args)
    if origin is tuple:
        element = args[0]

        def parse_tuple(text: str) -> tuple:
            parts = text.replace("x", ",").split(",")
            if len(parts) != len(args):
                raise argparse.ArgumentTypeError(f"{flag} takes {len(args)} numbers, e.g. 128x256")
            return tuple(element(p) for p in parts)

        return parse_tuple, None
    if origin is list:
        element = args[0]
        return (lambda text: [element(p) for p in text.split(",") if p]), None
    if kind in (int, float, str):
        return kind, None
    raise TypeError(f"{flag}: no command-line form for a field of type {annotation!r}")


def add_model_flags(parser: argparse.ArgumentParser, model: type[BaseModel], exclude: tuple[str, ...] = ()) -> None:
    """``--name`` for every field of ``model`` (but ``exclude``), typed and documented by the field."""
    for name, field in model.model_fields.items():
        if name in exclude:
            continue
        flag = "--" + name.replace("_", "-")
        default = field.get_default(call_default_factory=True)
        shown = ",".join(map(str, default)) if isinstance(default, (tuple, list)) else default
        help_text = f"{field.description or name} (default: {shown})"
        if _inner(field.annotation)[0] is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
            continue
        convert, choices = _parser_of(field.annotation, flag)
        parser.add_argument(flag, dest=name, type=convert, choices=choices, default=None, help=help_text)


def model_from_flags(args: argparse.Namespace, model: type[BaseModel], **fixed: Any) -> BaseModel:
    """The model from the flags that were given (and ``fixed`` values); the rest keep their defaults."""
    given = {name: getattr(args, name) for name in model.model_fields if getattr(args, name, None) is not None}
    return model.model_validate(given | fixed)
