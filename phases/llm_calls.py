"""How a phase talks to the LLM: registry → UnifiedPrompt → adapter → validate_output → memo.

Phases never build prompt text or parse replies themselves. This module is the one path:
the system prompt comes from the registry's *_SYSTEM template for the adapter's model family,
the instructions from the *_USER prompt, the reply goes through `validate_output` (the only JSON
extraction), a malformed reply gets exactly one repair round, and every reply is memoised per
(run, phase, pass, step, prompt) so a redelivered event does not pay for the same call again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from llm.base import LLMAdapter, LLMCall, LLMError
from phases.events import Usage
from prompts.errors import JSONExtractionError
from prompts.registry import (
    PromptId,
    PromptInput,
    PromptRegistry,
    RepairJSONInput,
    SystemPromptInput,
)
from prompts.unified import ContextItem, UnifiedPrompt

T = TypeVar("T", bound=BaseModel)

#: The system prompt that frames each user prompt the loop sends.
SYSTEM_OF: dict[PromptId, PromptId] = {
    PromptId.TASKPROFILE_INFERENCE_USER: PromptId.TASKPROFILE_INFERENCE_SYSTEM,
    PromptId.TASKPROFILE_UPDATE_USER: PromptId.TASKPROFILE_UPDATE_SYSTEM,
    PromptId.PLAN_GENERATION_USER: PromptId.PLAN_GENERATION_SYSTEM,
    PromptId.VALIDATION_SEMANTIC_USER: PromptId.VALIDATION_SEMANTIC_SYSTEM,
    PromptId.RECURSIVE_REFINEMENT_USER: PromptId.RECURSIVE_REFINEMENT_SYSTEM,
    PromptId.REASONING_STEP_USER: PromptId.REASONING_STEP_SYSTEM,
    PromptId.CONVERGENCE_ASSESSMENT_USER: PromptId.CONVERGENCE_ASSESSMENT_SYSTEM,
    PromptId.RULE_CRITIQUE_USER: PromptId.RULE_CRITIQUE_SYSTEM,
    PromptId.ANSWER_SYNTHESIS_USER: PromptId.ANSWER_SYNTHESIS_SYSTEM,
    PromptId.SUPERVISOR_REPAIR_JSON_USER: PromptId.SUPERVISOR_REPAIR_SYSTEM,
}


class Memo(Protocol):
    """Where replies are remembered between deliveries of the same event."""

    async def get(self, key: str) -> str | None: ...

    async def put(self, key: str, value: str) -> None: ...


class DictMemo:
    """An in-process memo: for tests and for one-shot runs that need no sharing."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    async def get(self, key: str) -> str | None:
        return self.values.get(key)

    async def put(self, key: str, value: str) -> None:
        self.values[key] = value


class LLMOutputError(Exception):
    """The LLM's reply could not be turned into the prompt's output model, even after repair."""

    def __init__(self, prompt_id: PromptId, error: Exception) -> None:
        self.prompt_id = prompt_id
        self.error = error
        super().__init__(f"{prompt_id.value}: unusable reply after one repair ({error})")


@dataclass
class LLMSession:
    """One handler's access to the LLM for one run; usage is added to the run's total."""

    llm: LLMAdapter
    registry: PromptRegistry
    memo: Memo
    run_key: str
    usage: Usage

    async def text(
        self,
        prompt_id: PromptId,
        data: PromptInput,
        *,
        scope: str,
        context: Sequence[ContextItem] = (),
    ) -> str:
        """A free-form reply."""
        return await self._reply(prompt_id, data, scope, context)

    async def json(
        self,
        prompt_id: PromptId,
        data: PromptInput,
        model: type[T],
        *,
        scope: str,
        context: Sequence[ContextItem] = (),
    ) -> T:
        """A reply validated against `model`, repaired once if it does not fit."""
        reply = await self._reply(prompt_id, data, scope, context)
        try:
            return self.registry.validate_output(prompt_id, reply, model)
        except (JSONExtractionError, ValidationError) as error:
            first_error = error
        repaired = await self._repair(prompt_id, reply, first_error, scope)
        try:
            return self.registry.validate_output(prompt_id, repaired, model)
        except (JSONExtractionError, ValidationError) as error:
            raise LLMOutputError(prompt_id, error) from first_error

    async def _repair(self, prompt_id: PromptId, reply: str, error: Exception, scope: str) -> str:
        repair_input = RepairJSONInput(
            expected_schema=self.registry.output_schema(prompt_id),
            malformed_output=reply,
            error=_short(error),
        )
        return await self._reply(
            PromptId.SUPERVISOR_REPAIR_JSON_USER,
            repair_input,
            f"{scope}/repair:{prompt_id.value}",
            context=(),
        )

    async def _reply(
        self,
        prompt_id: PromptId,
        data: PromptInput,
        scope: str,
        context: Sequence[ContextItem],
    ) -> str:
        key = f"{self.run_key}/{scope}/{prompt_id.value}"
        remembered = await self.memo.get(key)
        if remembered is not None:
            return remembered
        prompt = UnifiedPrompt(
            system_prompt=self._system_prompt(prompt_id),
            instructions=self.registry.get_prompt(prompt_id, data),
            context=tuple(context),
        )
        reply = await self.llm.complete(LLMCall(prompt_id=prompt_id, input=data, prompt=prompt))
        text = _storable(reply.text)
        if not text.strip():
            raise LLMError(f"{prompt_id.value}: the model returned an empty reply")
        self.usage.add(reply.usage.prompt_tokens, reply.usage.completion_tokens)
        await self.memo.put(key, text)
        return text

    def _system_prompt(self, prompt_id: PromptId) -> str:
        return _system_text(self.registry, SYSTEM_OF[prompt_id], self.llm.family)


@lru_cache(maxsize=256)
def _system_text(registry: PromptRegistry, system_id: PromptId, family: str) -> str:
    """System prompts depend only on the prompt and the model family: render each once."""
    return registry.get_prompt(system_id, SystemPromptInput(agent=family))


def _storable(text: str) -> str:
    """The reply as valid UTF-8: a lone surrogate (a model cutting an emoji in half) becomes '?'
    here, rather than making every event that carries it impossible to encode."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _short(error: Exception, limit: int = 1_000) -> str:
    text = str(error)
    return text if len(text) <= limit else text[:limit] + "…"


def as_json_text(value: BaseModel | dict | list) -> str:
    """Compact JSON of a model or structure, for prompt fields that carry an artifact."""
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()
