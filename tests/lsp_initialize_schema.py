"""The shape of an LSP `initialize` request's params as lsprotocol reads them, written out for
lintloop.server.handshake, which answers `initialize` before lsprotocol is imported (~0.3 s).

    python tests/lsp_initialize_schema.py   # rewrites lintloop/server/initialize_params.json

The schema is deliberately stricter than lsprotocol's converter (cattrs turns "12" into 12, and takes
a list where an object belongs): what it accepts, the converter reads without error, which
tests/test_server_handshake.py checks on real clients' capabilities and on random changes of them.
Where the schema refuses, the server answers after importing lsprotocol, as it always did.

Types: "bool", "int" (32-bit), "uint" (31-bit), "str", "number", "any"; {"enum": [values]} (closed:
the converter refuses others; an enum whose converter takes any value is its value type);
{"list": T}; {"map": T}; {"ref": class name}; {"union": [T, ...]} (of types a JSON value tells apart);
a class: {field's JSON name: [required, nullable, T]}.
"""

from __future__ import annotations

import collections.abc
import enum
import json
import types as python_types
import typing
from pathlib import Path
from typing import Any

import attrs
from lsprotocol import types as lsp
from lsprotocol import validators
from pygls.protocol import default_converter

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "lintloop" / "server" / "initialize_params.json"
_CONVERTER = default_converter()
_NONE = type(None)


def camel_case(name: str) -> str:
    """A field's JSON name, as lsprotocol's converter renames it."""
    parts = name.removesuffix("_").split("_")
    return parts[0] + "".join(part.title() for part in parts[1:])


class _Builder:
    def __init__(self) -> None:
        self.classes: dict[str, dict[str, list[Any]]] = {}

    def schema(self, hint: Any, field: attrs.Attribute | None = None) -> Any:
        origin = typing.get_origin(hint)
        if hint is Any or hint in (lsp.LSPAny, lsp.LSPObject, lsp.LSPArray) or hint is object:
            return "any"
        if hint is bool:
            return "bool"
        if hint is int:
            return "uint" if field is not None and _validated_by(field, validators.uinteger_validator) else "int"
        if hint is str:
            return "str"
        if hint is float:
            return "number"
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return self.enum(hint)
        if attrs.has(hint):
            self.add_class(hint)
            return {"ref": hint.__name__}
        if origin in (typing.Union, python_types.UnionType):
            members = [self.schema(member) for member in typing.get_args(hint) if member is not _NONE]
            return members[0] if len(members) == 1 else {"union": members}
        if origin in (list, tuple, collections.abc.Sequence):
            (item,) = {arg for arg in typing.get_args(hint) if arg is not Ellipsis}
            return {"list": self.schema(item)}
        if origin in (dict, collections.abc.Mapping):
            key, value = typing.get_args(hint)
            assert key is str, hint
            return {"map": self.schema(value)}
        if origin is typing.Literal:
            return {"enum": list(typing.get_args(hint))}
        raise TypeError(f"no schema for {hint!r}")

    def enum(self, kind: type[enum.Enum]) -> Any:
        values = [member.value for member in kind]
        probe = "lintloop: no such value" if isinstance(values[0], str) else 987654
        try:
            _CONVERTER.structure(probe, kind)
        except Exception:  # noqa: BLE001 - a closed enum: the converter refuses other values
            return {"enum": values}
        return "str" if isinstance(values[0], str) else "int"

    def add_class(self, cls: type) -> None:
        if cls.__name__ in self.classes:
            return
        self.classes[cls.__name__] = fields = {}
        hints = typing.get_type_hints(cls, vars(lsp))
        for field in attrs.fields(cls):
            hint = hints[field.name]
            nullable = _NONE in typing.get_args(hint)
            required = field.default is attrs.NOTHING
            fields[camel_case(field.name)] = [required, nullable, self.schema(hint, field)]


def _validated_by(field: attrs.Attribute, validator: Any) -> bool:
    inner = getattr(field.validator, "validator", field.validator)  # attrs.validators.optional wraps it
    return inner is validator


def build() -> dict[str, Any]:
    builder = _Builder()
    builder.add_class(lsp.InitializeParams)
    return {"root": "InitializeParams", "classes": builder.classes}


def rendered() -> str:
    return json.dumps(build(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.write_text(rendered())
