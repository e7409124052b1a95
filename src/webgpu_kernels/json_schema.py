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


def validator(schema: dict[str, Any]) -> Any:
    """A validator of ``schema``'s draft whose ``pattern`` anchors ``$`` at the end of the string."""
    cls = jsonschema.validators.validator_for(schema)
    return jsonschema.validators.extend(cls, {"pattern": _pattern})(schema)
