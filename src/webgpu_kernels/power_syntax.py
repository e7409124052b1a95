"""Where Jinja reads ``**`` otherwise than Python, refused before anything runs.

Manifest expressions and templates are Jinja, whose ``**`` binds looser than a unary minus and
groups to the left: ``-2 ** 30`` is ``(-2) ** 30`` (2^30, where Python gives -2^30) and
``2 ** 3 ** 2`` is ``(2 ** 3) ** 2`` (64, where Python gives 512). Either one silently gave an
author who thinks in Python another number (a clause ``min(pads) > -2 ** 30`` was false for every
call), so both are refused with the parentheses that say which is meant; a minus before a power
to an odd integer literal (``-2**31``) gives one value either way and passes. The check reads the
lexer's tokens: the parsed tree cannot tell ``-2 ** 30`` from ``(-2) ** 30``.
"""

from __future__ import annotations

from collections.abc import Iterable

#: Names the lexer gives keywords: none of them ends an operand, so a ``-`` after one is unary.
_KEYWORDS = frozenset({"and", "or", "not", "in", "is", "if", "else"})
_CLOSING = {")": "(", "]": "[", "}": "{"}
_OPENING = {"(": ")", "[": "]", "{": "}"}
_SIGNS = (("operator", "-"), ("operator", "+"))


def _ends_operand(token: tuple[str, str]) -> bool:
    kind, value = token
    if kind == "name":
        return value not in _KEYWORDS
    return kind in ("integer", "float", "string") or (kind == "operator" and value in _CLOSING)


def _partners(tokens: list[tuple[str, str]]) -> dict[int, int]:
    """Each bracket's index to its partner's, found in one pass (each ``**`` walking back over a
    group token by token made nested groups quadratic, before the parser bounds nesting); one
    without a partner (the parser reports that) points past the end: ``len(tokens)`` for an
    opening, -1 for a closing."""
    partners: dict[int, int] = {}
    open_at: dict[str, list[int]] = {opening: [] for opening in _OPENING}
    for i, (kind, value) in enumerate(tokens):
        if kind != "operator":
            continue
        if value in _OPENING:
            open_at[value].append(i)
        elif value in _CLOSING:
            stack = open_at[_CLOSING[value]]
            partners[i] = stack.pop() if stack else -1
            if partners[i] >= 0:
                partners[partners[i]] = i
    for stack in open_at.values():
        partners.update((i, len(tokens)) for i in stack)
    return partners


def _operand_start(tokens: list[tuple[str, str]], partners: dict[int, int], end: int) -> int:
    """The index of the first token of the operand whose last token is at ``end``: a name, number,
    string or bracketed group, with the attribute, subscript, call and filter parts after it."""
    i = end
    while i > 0:
        if tokens[i][0] == "operator" and tokens[i][1] in _CLOSING:
            i = partners[i]
            if i <= 0 or not _ends_operand(tokens[i - 1]):
                return max(i, 0)
            i -= 1  # a call or subscript of what comes before
        elif i >= 2 and tokens[i - 1] == ("operator", "."):
            i -= 2  # an attribute of what comes before
        elif i >= 2 and tokens[i - 1] == ("operator", "|"):
            i -= 2  # a filter of what comes before (Jinja's ** operand holds its filters)
        else:
            return i
    return 0


def _operand_end(tokens: list[tuple[str, str]], partners: dict[int, int], start: int) -> int:
    """The index just past the operand that begins at ``start``, its unary signs included."""
    i = start
    while i < len(tokens) and tokens[i] in _SIGNS:
        i += 1
    if i < len(tokens):
        i = partners[i] + 1 if tokens[i][0] == "operator" and tokens[i][1] in _OPENING else i + 1
    while i < len(tokens):
        if tokens[i] in (("operator", "."), ("operator", "|")) and i + 1 < len(tokens):
            i += 2  # an attribute, or a filter
        elif tokens[i][0] == "operator" and tokens[i][1] in _OPENING:
            i = partners[i] + 1
        else:
            return i
    return i


def _odd_literal(tokens: list[tuple[str, str]], partners: dict[int, int], start: int) -> bool:
    """Whether the exponent at ``start`` is an odd integer literal alone: then (-a) ** b is -(a ** b),
    so ``-2**31`` (the i32 minimum, as authors write it) means the same in Jinja and Python."""
    kind, value = tokens[start] if start < len(tokens) else ("", "")
    if kind != "integer" or _operand_end(tokens, partners, start) != start + 1:
        return False
    try:
        return int(value.replace("_", ""), 0) % 2 == 1
    except ValueError:  # a literal Python would not read (the parser reports it)
        return False


def ambiguous_power(tokens: Iterable[tuple[int, str, str]]) -> tuple[int, str] | None:
    """The first ``**`` that Jinja reads otherwise than Python in the lexer's raw ``tokens``
    (``(line, kind, value)``, as ``Environment.lexer.tokeniter`` gives them): its line and what
    to write instead; None where every ``**`` means what Python would mean."""
    lines: list[int] = []
    significant: list[tuple[str, str]] = []
    for line, kind, value in tokens:
        if kind != "whitespace":
            if kind == "name" and significant and significant[-1][0] == "block_begin":
                kind = "tag"  # a block's name (elif, set) ends no operand: a - after it is unary
            lines.append(line)
            significant.append((kind, value))
    partners = _partners(significant)
    for i, token in enumerate(significant):
        if token != ("operator", "**") or i == 0:
            continue
        start = _operand_start(significant, partners, i - 1)
        signs = start  # the unary signs before the base (a + among them passes a - on to it: -+2 is -2)
        while signs >= 1 and significant[signs - 1] in _SIGNS and (signs < 2 or not _ends_operand(significant[signs - 2])):
            signs -= 1
        if ("operator", "-") in significant[signs:start] and not _odd_literal(significant, partners, i + 1):
            return lines[i], ("a unary minus before ** applies to the base here, as in Jinja, not to the power as "
                              "in Python (-2 ** 2 is 4): write (-a) ** b or -(a ** b)")  # fmt: skip
        after = _operand_end(significant, partners, i + 1)
        if after < len(significant) and significant[after] == ("operator", "**"):
            return lines[i], ("a ** b ** c groups to the left here, as in Jinja, not to the right as in Python "
                              "(2 ** 3 ** 2 is 64): write (a ** b) ** c or a ** (b ** c)")  # fmt: skip
    return None
