"""A small JSON-schema checker for subtask params, deterministic and import-light for workflows.

It covers what plugin params schemas use: ``type``, ``properties``, ``required``, ``enum``,
``items``, ``minimum``/``maximum``, ``minLength``/``maxLength``, ``pattern``. Unknown keys of an
object are dropped rather than rejected (SPEC §1).
"""

from __future__ import annotations

import re
from typing import Any

from errands.errors import ModelMistake

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def check(schema: dict[str, Any], value: Any, path: str = "params") -> Any:
    """Return ``value`` cleaned (unknown object keys dropped) or raise ``ModelMistake``."""
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        ok = any(_is_type(value, name) for name in names)
        if not ok:
            raise ModelMistake(
                f"{path} must be of type {' or '.join(names)}, got {_type_name(value)}"
            )
    if "enum" in schema and value not in schema["enum"]:
        raise ModelMistake(f"{path} must be one of {schema['enum']!r}, got {value!r}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise ModelMistake(f"{path} must have at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise ModelMistake(f"{path} must have at most {schema['maxLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise ModelMistake(f"{path} must match the pattern {schema['pattern']!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise ModelMistake(f"{path} must be at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ModelMistake(f"{path} must be at most {schema['maximum']}")
    if isinstance(value, list) and "items" in schema:
        return [check(schema["items"], item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict) and ("properties" in schema or "required" in schema):
        properties: dict[str, Any] = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                raise ModelMistake(f"{path}.{name} is required")
        return {
            key: check(properties[key], item, f"{path}.{key}")
            for key, item in value.items()
            if key in properties
        }
    return value


def _is_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, (object,)))


def _type_name(value: Any) -> str:
    for name in _TYPES:
        if _is_type(value, name):
            return name
    return type(value).__name__
