"""Errors of the prompt subsystem (docs/requirements.md, "Prompt API contract", Exceptions).

They are the `PromptError` branch of Aeon's one exception tree (aeonloop.exceptions), defined
there and importable from here; that module imports only the standard library, so this package
still works on its own, under Pydantic 1.10 too.
"""

from __future__ import annotations

from aeonloop.exceptions import (
    JSONExtractionError,
    NoOutputModelError,
    PromptError,
    PromptNotFoundError,
    RenderingError,
    TemplateNotFound,
)

__all__ = [
    "JSONExtractionError",
    "NoOutputModelError",
    "PromptError",
    "PromptNotFoundError",
    "RenderingError",
    "TemplateNotFound",
]
