"""Clipping long texts that go into prompts, with a marker the model can see.

A clipped text keeps its beginning and says how much was cut, so a model reading it knows the
text goes on and does not mistake the cut for the end of the work. The markers are prompt text,
so they live here with the rest of it.
"""

from __future__ import annotations

#: Marks an output shortened so that the prompt fits the model's context window.
CONTEXT_MARKER = "[… {count} more characters clipped to fit the context window …]"
#: Marks a step output shortened when it was stored (AEON_MAX_STEP_OUTPUT_CHARS).
STORED_MARKER = "[… {count} more characters not kept: the output was longer than Aeon stores …]"


def clip(text: str, cap: int | None, marker: str = CONTEXT_MARKER) -> str:
    """`text` cut to `cap` characters plus the marker, or unchanged when it is short enough.

    Never longer than `text`: a cut that would save less than its marker costs leaves the text
    whole. That also keeps a prompt's length growing with the cap, which fitting relies on.
    """
    if cap is None or len(text) <= cap:
        return text
    clipped = f"{text[:cap].rstrip()}\n{marker.format(count=len(text) - cap)}"
    return clipped if len(clipped) < len(text) else text
