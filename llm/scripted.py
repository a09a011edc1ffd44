"""Replies per PromptId chosen by a test, malformed ones included, with the offline model behind.

A reply is a string (returned as is, so it may be broken JSON), an LLMReply (returned as is, for
a reply cut at the length limit or a refusal), an exception instance (raised as is, so an
LLMError reaches the caller unchanged), or a callable taking the LLMCall and returning
the string. A list of replies is used in order and its last one repeats, which scripts "fail
twice, then succeed" in one line. Prompt ids without a script go to the fallback adapter.

`ScriptedLLM.from_file` reads the same script from JSON, so worker subprocesses started by
end-to-end tests can be given one through AEON_LLM_SCRIPT.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aeonloop.exceptions import LLMError
from aeonloop.llm.base import LLMAdapter, LLMCall, LLMReply, TokenUsage, approx_tokens
from aeonloop.llm.offline import OfflineLLM
from aeonloop.llm.outage import Outage
from aeonloop.llm.reasoning import split_reasoning
from aeonloop.prompts.registry import PromptId

Reply = str | LLMReply | BaseException | Callable[[LLMCall], str | Awaitable[str]]
Script = Mapping[PromptId | str, Reply | Sequence[Reply]]

MODEL_NAME = "aeon-scripted"

_DEFAULT_FALLBACK: Any = object()


class ScriptedLLM:
    """LLMAdapter replaying a script; records every call it receives."""

    family = "scripted"

    def __init__(
        self,
        script: Script,
        fallback: LLMAdapter | None = _DEFAULT_FALLBACK,
        delay: float = 0.0,
    ) -> None:
        self._script = {_key(prompt_id): _as_list(replies) for prompt_id, replies in script.items()}
        self._used: dict[str, int] = {}
        self.fallback = OfflineLLM(delay) if fallback is _DEFAULT_FALLBACK else fallback
        self.delay = delay
        #: Prompt ids of every call, in order, scripted or not.
        self.calls: list[PromptId] = []
        #: The calls themselves, for tests that check what a phase sent.
        self.history: list[LLMCall] = []

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        fallback: LLMAdapter | None = _DEFAULT_FALLBACK,
        delay: float = 0.0,
    ) -> ScriptedLLM:
        """Load `{prompt_id: reply | [reply, ...]}` where a reply is a string or {"error": msg}."""
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read the LLM script {path}: {exc}") from exc
        if not isinstance(document, dict):
            raise ValueError(f"the LLM script {path} must be a JSON object of prompt id → replies")
        script = {key: _replies_from_json(key, value) for key, value in document.items()}
        return cls(script, fallback=fallback, delay=delay)

    async def complete(self, call: LLMCall) -> LLMReply:
        """The next scripted reply for the call's prompt id, else the fallback's reply."""
        self.calls.append(call.prompt_id)
        self.history.append(call)
        key = _key(call.prompt_id)
        if key not in self._script:
            return await self._fall_back(call)
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        played = await _play(self._next(key), call)
        if isinstance(played, LLMReply):
            reply = played
        else:
            usage = TokenUsage(
                approx_tokens(len(call.prompt.instructions)),
                approx_tokens(len(played)),
                estimated=True,
            )
            # A scripted string stands for what a model sent: its reasoning is kept out, as by
            # every adapter (LLMReply's contract); a string without reasoning is returned as is.
            answer, thinking = split_reasoning(played)
            reply = LLMReply(text=answer if thinking else played, usage=usage, model=MODEL_NAME)
        if call.sink is not None:  # a reply had whole is written whole (llm.base.TextSink)
            await call.sink.write(reply.text)
        return reply

    @property
    def outage(self) -> Outage | None:
        """The fallback's: the script itself is never away."""
        return self.fallback.outage if self.fallback is not None else None

    async def check(self) -> None:
        """Ready when its fallback is (the script itself was read at start)."""
        if self.fallback is not None:
            await self.fallback.check()

    async def aclose(self) -> None:
        """Close the fallback, which may hold connections."""
        if self.fallback is not None:
            await self.fallback.aclose()

    def _next(self, key: str) -> Reply:
        replies = self._script[key]
        index = self._used.get(key, 0)
        self._used[key] = index + 1
        return replies[min(index, len(replies) - 1)]

    async def _fall_back(self, call: LLMCall) -> LLMReply:
        if self.fallback is None:
            raise LLMError(f"no scripted reply for {call.prompt_id.value}", transient=False)
        return await self.fallback.complete(call)


async def _play(reply: Reply, call: LLMCall) -> str | LLMReply:
    if isinstance(reply, BaseException):
        raise reply
    if isinstance(reply, str | LLMReply):
        return reply
    text = reply(call)
    return await text if inspect.isawaitable(text) else text


def _key(prompt_id: PromptId | str) -> str:
    return prompt_id.value if isinstance(prompt_id, PromptId) else PromptId(prompt_id).value


def _as_list(replies: Reply | Sequence[Reply]) -> list[Reply]:
    if isinstance(replies, str) or not isinstance(replies, Sequence):
        return [replies]
    if not replies:
        raise ValueError("a scripted reply list must not be empty")
    return list(replies)


def _replies_from_json(prompt_id: str, value: object) -> Reply | list[Reply]:
    if isinstance(value, list):
        return [_reply_from_json(prompt_id, item) for item in value]
    return _reply_from_json(prompt_id, value)


def _reply_from_json(prompt_id: str, value: object) -> Reply:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("error"), str):
        return LLMError(value["error"], transient=bool(value.get("transient", False)))
    raise ValueError(
        f'script entry for {prompt_id}: a reply is a string or {{"error": "message"}}, '
        f"not {value!r}"
    )
