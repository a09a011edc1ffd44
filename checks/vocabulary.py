"""The check vocabulary as PREPARE's prompt shows it, written from the types themselves.

Each type of types.py carries its example and its gloss; `described()` writes one line a type,
in the union's order: `- {"type": ..., <the example's fields>}: <gloss>.` (types in a row shown
alike share a line, joined by "and"). A type added to the
union is shown at once, a field renamed or a value no longer accepted fails here (each example is
parsed as a check), and the units a count check may count are listed from `units.Unit`: the
prompt cannot name a check the host would refuse.

prompts/ imports nothing of Aeon but its exceptions (it runs on its own, under Pydantic 1.10), so
the prompt cannot ask for this text: the phases pass it in, as PrepareChecksInput.check_types.
"""

from __future__ import annotations

import functools
import json

from aeonloop.checks.types import CHECK_MODELS, parse_check


@functools.cache
def described() -> str:
    """The vocabulary, one line a type, or one for types in a row that are shown alike (the same
    fields, the same gloss: starts_with and ends_with); ValueError if a type's example is not a
    check it accepts (a defect of types.py, found by its tests)."""
    lines: list[tuple[list[str], str, list[str]]] = []  # (examples, gloss, fields)
    for model in CHECK_MODELS:
        shown = {"type": model.model_fields["type"].default, **model.example}
        parse_check(shown)
        fields = list(model.example)
        if lines and lines[-1][1:] == (model.gloss, fields):
            lines[-1][0].append(json.dumps(shown))
        else:
            lines.append(([json.dumps(shown)], model.gloss, fields))
    return "\n".join(
        f"- {' and '.join(examples)}{f': {gloss}' if gloss else ''}."
        for examples, gloss, _ in lines
    )
