"""The prompt of the quality benchmark's baseline: one plain call with the request and its rules.

`python -m bench --only quality` compares Aeon's loop with what a user would do without it: ask
the same model once, the rules written into the request as instructions (bench/quality.py). The
rules are shown by their descriptions, which is all of them a person reads; Aeon's loop gets the
same rules with the same descriptions.
"""

from __future__ import annotations

from collections.abc import Iterable

from aeonloop.phases.models import Rule


def plain_call(request: str, rules: Iterable[Rule]) -> str:
    """The one user message of the baseline call."""
    lines = [f"- {rule.description}" for rule in rules if rule.description]
    if not lines:
        return request
    return (
        request + "\n\nYour answer must meet every one of these requirements:\n" + "\n".join(lines)
    )
