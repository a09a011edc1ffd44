"""The task profile as phases A and D take it from the LLM's reply.

Phase A infers the first profile; Phase D re-profiles the task when a pass shows it was
misjudged. Both read the same reply model (TaskProfileOutput) into the same domain profile, and
both keep going without it: a profile only estimates effort, so a reply that cannot be had or
read leaves the profile in force (A's default, or the one D was given).
"""

from __future__ import annotations

from pydantic import ValidationError

from aeonloop.exceptions import LLMFailure
from aeonloop.phases.models import TaskProfile
from aeonloop.prompts.registry import TaskProfileOutput

#: What a profile inference or update may fail with, and be done without.
PROFILE_FAILURES: tuple[type[Exception], ...] = (LLMFailure, ValidationError)


def profile_from_output(output: TaskProfileOutput, version: int) -> TaskProfile:
    """The domain profile from the LLM's reply (only the fields TaskProfile knows)."""
    known = TaskProfile.model_fields  # a class property: read once, not once per field
    fields = {k: v for k, v in output.model_dump().items() if k in known}
    fields["profile_version"] = version
    return TaskProfile(**fields)
