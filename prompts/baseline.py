"""One plain call with the request and its rules: the run's draft (phases/verification.py) and
the quality benchmark's baseline, the same message, so the draft a run's answer is held to is
the one call it is compared with.

`python -m bench --only quality` compares Aeon's loop with what a user would do without it: ask
the same model once, the rules written into the request as instructions (bench/quality.py). The
rules are shown by their descriptions, which is all of them a person reads; Aeon's loop gets the
same rules with the same descriptions. It takes the descriptions as text, so prompts/ needs
nothing from the phases' models (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from collections.abc import Iterable


def plain_call(request: str, requirements: Iterable[str]) -> str:
    """The one user message of the baseline call: the request, then each rule's description
    (`requirements`) as an instruction; an empty description is left out."""
    lines = [f"- {text}" for text in requirements if text]
    if not lines:
        return request
    return (
        request + "\n\nYour answer must meet every one of these requirements:\n" + "\n".join(lines)
    )
