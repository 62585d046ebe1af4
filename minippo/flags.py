"""Command-line flags read from a config dataclass: one typed flag per field, grouped by the class's sections.

    add_config_flags(parser, PPOConfig)          # --iterations N, --lr FLOAT, --critic-init {...}, ...
    cfg = config_from_args(args, PPOConfig())    # the flags given replace those fields of the base config

Everything comes from the dataclass itself, so the flags follow its fields when they change:

- the field's type and default give the value's type and metavar: ``N`` (int), ``FLOAT``, ``{true,false}``
  (bool), ``FLOAT,FLOAT`` (a tuple of floats), a ``{a,b,c}`` choice list (a str field the class validates with
  :func:`minippo.checks.check_choice`: the choices are read from the message its ``__post_init__`` gives for
  a value outside them, so the validation stays their one source), ``TEXT`` (any other str); ``|none`` when the
  field may be None;
- the field's docstring (the string literal under it) gives the help: its first sentence and the default;
- the ``# ---- title ----`` comments of the class body give the groups of ``--help``.

A value that is not of the field's type is refused while the command line is read, in one line naming the
flag and what was expected (``--iterations: expected an integer (N), got 'abc'``); a value of the right type
outside the field's range is refused by the class's own validation, which names the field (and so the flag).
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
import textwrap
import types
import typing

from minippo.checks import UsageError

NONE = "none"                   # the command-line spelling of None, for fields that may be None
_SECTION = re.compile(r"^\s*#\s*-{3,}\s*(.*?)\s*-*\s*$")
_CHOICES = re.compile(r"must be one of (.+?); got ")


def flag(name: str) -> str:
    """``--field-name`` for the field ``field_name``."""
    return "--" + name.replace("_", "-")


def _dataclass_sources(cls) -> list[str]:
    """The dedented source of ``cls`` and of every dataclass it extends, base classes first."""
    return [textwrap.dedent(inspect.getsource(k))
            for k in reversed(cls.__mro__) if "__dataclass_fields__" in vars(k)]


def field_docs(cls) -> dict[str, str]:
    """Field name -> its docstring (the string literal under the field), read from the source of ``cls`` and
    of the dataclasses it extends."""
    docs = {}
    for source in _dataclass_sources(cls):
        body = ast.parse(source).body[0].body
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) \
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def field_sections(cls) -> dict[str, str]:
    """Field name -> the title of the ``# ---- title ----`` comment above it in the class body ("" before the
    first such comment); a field of a base dataclass keeps its section there."""
    names = {f.name for f in dataclasses.fields(cls)}
    out = {}
    for source in _dataclass_sources(cls):
        section = ""
        for line in source.splitlines():
            m = _SECTION.match(line)
            if m:
                section = m.group(1)
                continue
            name = re.match(r"^    (\w+)\s*:", line)
            if name and name.group(1) in names:
                out[name.group(1)] = section
    return out


def field_choices(cls, name: str) -> tuple[str, ...] | None:
    """The values a str field accepts, read from the class's validation: the ``ValueError`` that
    :func:`minippo.checks.check_choice` raises for a value outside them lists them; None when the class accepts
    any text (or validates it otherwise)."""
    probe = "\x00"
    try:
        cls(**{name: probe})
    except ValueError as exc:
        m = _CHOICES.search(str(exc))
        if m and f"`{name}`" in str(exc):
            return tuple(ast.literal_eval(f"[{m.group(1)}]"))
    except TypeError:
        return None
    return None


def _base_type(hint) -> tuple[type, bool]:
    """``(the type, may be None)`` of a field's annotation (``float | None`` -> ``(float, True)``)."""
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union \
        else ()
    if args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else str), len(rest) < len(args)
    return hint, False


def _reader(kind: str, optional: bool, size: int):
    """The argparse ``type`` of a field: text -> value, or ``ArgumentTypeError`` saying what was expected."""
    def read(text: str):
        if optional and text.lower() == NONE:
            return None
        try:
            if kind == "bool":
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                return text.lower() in ("true", "1")
            if kind == "int":
                return int(text)
            if kind == "float":
                return float(text)
            if kind == "tuple":
                values = tuple(float(x) for x in text.split(","))
                if len(values) != size:
                    raise ValueError
                return values
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {WHAT[kind].format(n=size)}, got {text!r}") from None
        return text              # a str outside the choices: the class's validation names the field and them
    return read


def integer(text: str) -> int:
    """argparse ``type`` of a flag that is not a config field: an integer (metavar ``N``)."""
    return _reader("int", False, 0)(text)


def boolean(text: str) -> bool:
    """argparse ``type`` of a flag that is not a config field: true or false (also 1 or 0)."""
    return _reader("bool", False, 0)(text)


WHAT = {"int": "an integer (N)", "float": "a number (FLOAT)", "bool": "true or false",
        "tuple": "{n} comma-separated numbers", "str": "a text"}


def field_flag(cls, name: str) -> dict:
    """``type``, ``metavar`` and ``default`` (None: "not given") of the flag of field ``name``."""
    f = cls.__dataclass_fields__[name]
    hint, optional = _base_type(typing.get_type_hints(cls)[name])
    default = f.default
    optional = optional or default is None
    kind = {bool: "bool", int: "int", float: "float", tuple: "tuple"}.get(hint, "str")
    choices = field_choices(cls, name) if kind == "str" else None
    size = len(default) if isinstance(default, tuple) else 2
    metavar = {"bool": "{true,false}", "int": "N", "float": "FLOAT", "tuple": ",".join(["FLOAT"] * size),
               "str": "{" + ",".join(choices) + "}" if choices else "TEXT"}[kind]
    if optional:
        metavar += "|" + NONE
    return {"type": _reader(kind, optional, size), "metavar": metavar, "default": None}


#: words whose full stop ends no sentence ("Dr. GRPO", "et al. 2019", "e.g. Pythia")
ABBREVIATIONS = ("Dr.", "al.", "e.g.", "i.e.", "vs.", "Fig.", "eq.", "sec.", "cf.")


def first_sentence(doc: str) -> str:
    """The first sentence of a field's docstring (up to a full stop followed by a capital letter, the
    full stop of an abbreviation aside: :data:`ABBREVIATIONS`)."""
    for m in re.finditer(r"\.\s+(?=[A-Z])", doc):
        word = re.split(r"[\s(]", doc[:m.start() + 1])[-1]         # the word the full stop ends
        if word not in ABBREVIATIONS:
            return doc[:m.start() + 1]
    return doc


def shown_default(value) -> str:
    """A default as it is typed on the command line (``0.9,0.95``, ``none``, ``true``)."""
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return NONE if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def owner(cls, name: str) -> str:
    """The name of the class of ``cls``'s MRO that declares the field ``name`` (a base class's field is
    listed under the base class: ``PPOConfig: optimisation`` among KnobsConfig's flags)."""
    return next(k.__name__ for k in reversed(cls.__mro__) if name in vars(k).get("__annotations__", {}))


def add_config_flags(parser, cls, *, only=None, title: str | None = None, renamed: dict | None = None,
                     full_help: bool = False) -> None:
    """One ``--field-name VALUE`` flag per field of the dataclass ``cls`` (``only``: these fields, in one group
    called ``title``), grouped under the class's section comments; ``renamed`` (old name -> new) adds the old
    spellings as hidden flags (``args.deprecated_<old>``). The help is the docstring's first sentence (all of
    it with ``full_help``) and the default."""
    docs, sections = field_docs(cls), field_sections(cls)
    names = [f.name for f in dataclasses.fields(cls) if only is None or f.name in only]
    groups = {}
    for name in names:
        key = title if only is not None else f"{owner(cls, name)}: {sections.get(name) or 'other fields'}"
        if key not in groups:
            groups[key] = parser.add_argument_group(key)
        doc = docs.get(name, "")
        doc = (doc if full_help else first_sentence(doc)).replace("``", "")
        text = f"{doc} [{shown_default(cls.__dataclass_fields__[name].default)}]"
        groups[key].add_argument(flag(name), dest=name, help=text.replace("%", "%%"), **field_flag(cls, name))
    for old in renamed or {}:
        parser.add_argument(flag(old), dest="deprecated_" + old, default=None, help=argparse.SUPPRESS)


def given_fields(args, cls) -> dict:
    """Field -> value of the flags of ``cls`` that were given (their default is None: not given)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)
            if getattr(args, f.name, None) is not None}


def replace_fields(base, overrides: dict, shown: dict | None = None):
    """``base`` with ``overrides`` (field -> value) replaced. The class validates the result; when its message
    names a field that was not given (a range that depends on a given one: DPO's ``warmup_steps < steps``),
    the flags given are put in front of it, so the line still names what the user typed. ``shown``: field ->
    how it was given (default ``--field value``)."""
    try:
        return dataclasses.replace(base, **overrides)
    except ValueError as exc:
        named = re.findall(r"`(\w+)`", str(exc))
        if not overrides or any(n in overrides for n in named):
            raise
        given = ", ".join((shown or {}).get(k) or f"{flag(k)} {shown_default(v)}" for k, v in overrides.items())
        raise UsageError(f"{given}: {exc}") from None


def config_from_args(args, base, renamed: dict | None = None):
    """``base`` with the fields given as flags replaced; an old flag (``renamed``) prints its new name on
    stderr and sets the new field."""
    for old, new in (renamed or {}).items():
        text = getattr(args, "deprecated_" + old, None)
        if text is not None:
            print(f"{flag(old)} is deprecated: it is now {flag(new)}", file=sys.stderr)
            if getattr(args, new) is not None:
                raise UsageError(f"{flag(old)} and {flag(new)} name the same field: give {flag(new)} only")
            try:
                setattr(args, new, field_flag(type(base), new)["type"](text))
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"{flag(old)}: {exc}") from None
    return replace_fields(base, given_fields(args, type(base)))
