"""JSON Schema validators for the package files, with JSON Schema's reading of ``pattern``.

jsonschema checks ``pattern`` with Python's ``re.search``, where ``$`` also matches before a
final newline: ``"main\\n"`` passed ``^[A-Za-z_][A-Za-z0-9_]*$`` as an identifier and failed
later, as a shader entry point that does not exist. In JSON Schema's (ECMA-262) regexes ``$`` is
the end of the string, which Python spells ``\\Z``.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from .errors import names_meant

# An unescaped $: the package schemas use $ only as the anchor, and \$ for a literal dollar.
_END_ANCHOR = re.compile(r"(?<!\\)\$")


@cache
def _end_anchored(pattern: str) -> re.Pattern[str]:
    return re.compile(_END_ANCHOR.sub(r"\\Z", pattern))


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    if validator.is_type(instance, "string") and not _end_anchored(pattern).search(instance):
        # The field's description says what is expected; a 400-character regex says it to no one.
        description = schema.get("description") if isinstance(schema, dict) else None
        if isinstance(description, str) and description:
            rule = f" (pattern {pattern!r})" if len(pattern) <= 60 else ""  # a short one says which characters
            yield ValidationError(f"{instance!r} is not what this field takes: {description}{rule}")
        else:
            yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _field_meant(instance: dict[str, Any], schema: dict[str, Any]) -> str:
    """" (did you mean 'attributes'?)" for misspelt fields: the schema's message names the field that
    came, not the one it takes, and what a misspelt field held then reads as missing elsewhere."""
    known = [k for k in schema.get("properties", {}) if isinstance(k, str)]
    return names_meant(sorted(str(k) for k in instance if k not in known), known)


def validator(schema: dict[str, Any], keywords: dict[str, Any] | None = None) -> Any:
    """A validator of ``schema``'s draft whose ``pattern`` anchors ``$`` at the end of the string,
    and whose unknown-field errors name the field meant where one is close; ``keywords``: more
    keywords (name -> jsonschema keyword function) that ``schema`` may use."""
    cls = jsonschema.validators.validator_for(schema)
    additional = cls.VALIDATORS["additionalProperties"]

    def additional_properties(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        for error in additional(validator, value, instance, schema):
            if value is False and isinstance(instance, dict) and "patternProperties" not in schema:
                error.message += _field_meant(instance, schema)
            yield error

    own = {"pattern": _pattern, "additionalProperties": additional_properties, **(keywords or {})}
    return jsonschema.validators.extend(cls, own)(schema)
