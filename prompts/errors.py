"""Errors of the prompt subsystem (docs/requirements.md, "Prompt API contract", Exceptions)."""

from __future__ import annotations


class PromptError(Exception):
    """Base of every prompt-subsystem error."""


class PromptNotFoundError(PromptError):
    def __init__(self, prompt_id: object) -> None:
        self.prompt_id = prompt_id
        self.message = f"prompt {prompt_id!s} is not in the registry"
        super().__init__(self.message)


class RenderingError(PromptError):
    def __init__(self, prompt_id: object, error: Exception) -> None:
        self.prompt_id = prompt_id
        self.error = error
        self.message = f"prompt {prompt_id!s} failed to render: {error}"
        super().__init__(self.message)


class JSONExtractionError(PromptError):
    def __init__(
        self,
        message: str,
        extraction_methods_attempted: list[str],
        prompt_id: object | None = None,
    ) -> None:
        self.message = message
        self.extraction_methods_attempted = list(extraction_methods_attempted)
        self.prompt_id = prompt_id
        tried = ", ".join(self.extraction_methods_attempted) or "none"
        super().__init__(f"{message} (prompt {prompt_id!s}; tried: {tried})")


class NoOutputModelError(PromptError):
    def __init__(self, prompt_id: object) -> None:
        self.prompt_id = prompt_id
        self.message = f"prompt {prompt_id!s} produces free-form text and has no output model"
        super().__init__(self.message)


class TemplateNotFound(PromptError):
    def __init__(self, phase: str, agent: str, tried: list[str]) -> None:
        self.phase = phase
        self.agent = agent
        self.tried = list(tried)
        where = (
            ", ".join(self.tried)
            or "no valid path (phase and agent may use A-Z a-z 0-9 _ . - only)"
        )
        super().__init__(
            f"no system template for phase {phase!r} (agent {agent!r}); looked in: {where}"
        )
