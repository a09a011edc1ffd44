"""A call judged by its progress: the reply assembled as it streams, and the bounds that cut it.

Every call to an OpenAI-compatible server streams (llm.openai_adapter), so the adapter sees each
token as the server writes it. That changes what a time limit can mean: not "the whole reply
within N seconds", which cuts a slow server that is working and had a CPU server fail every run
(issue 33), but "the server is still producing". An attempt is cut in three cases only:

- no first token within the first-token bound, which covers the prompt's processing and so grows
  with the prompt (the adapter sets it: AEON_LLM_TIMEOUT plus AEON_LLM_FIRST_TOKEN_PER_1K_S per
  1,000 prompt tokens);
- no further token within the idle bound (AEON_LLM_IDLE_TIMEOUT) once tokens flow;
- the request's deadline.

A reply that keeps coming is never cut for its length: its token budget (`max_tokens`) bounds it.
A reply sent whole (a server that does not stream) has one "token", the whole reply, so the
first-token bound covers it all.

`Assembled` is one reply as the adapter judges it, whether it came in chunks or whole, so the
rules for an answer (reasoning apart, truncation, refusal, usage) are written once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from aeonloop.llm.reasoning import reasoning_field

#: What an attempt was waiting for when it was cut.
Bound = Literal["first token", "idle", "deadline"]


class Watch:
    """Cuts one attempt that stops making progress, through the `asyncio.timeout` it runs in.

    Armed with the first-token bound; each token re-arms it with the idle bound from that moment.
    Never later than the request's deadline: whichever comes first is the bound in force, and
    `bound` says which, for the error that names it.
    """

    def __init__(
        self, timer: asyncio.Timeout, first_token_s: float, idle_s: float, left_s: float | None
    ) -> None:
        self._timer = timer
        self._loop = asyncio.get_running_loop()
        self._deadline = None if left_s is None else self._loop.time() + left_s
        self.idle_s = idle_s
        #: Chunks that carried some of the reply so far.
        self.tokens = 0
        self.bound: Bound = "first token"
        self.seconds = first_token_s
        self._arm("first token", first_token_s)

    def token(self) -> None:
        """Some of the reply came: the idle bound runs again from now."""
        self.tokens += 1
        self._arm("idle", self.idle_s)

    def _arm(self, bound: Bound, seconds: float) -> None:
        when = self._loop.time() + seconds
        if self._deadline is not None and self._deadline <= when:
            bound, when = "deadline", self._deadline
        self.bound, self.seconds = bound, seconds
        self._timer.reschedule(when)


@dataclass
class Assembled:
    """One reply (its first choice) as the server gave it, before it is judged an answer."""

    #: A choice came at all: a reply without one is no reply.
    answered: bool = False
    content: str = ""
    reasoning: str = ""
    refusal: str = ""
    finish_reason: str | None = None
    #: The server's `usage` object, when it sent one.
    usage: Any = None
    model: str | None = None

    @classmethod
    def whole(cls, completion: Any) -> Assembled:
        """A reply sent whole (a `chat.completion`)."""
        reply = cls(usage=getattr(completion, "usage", None), model=_model(completion))
        choices = getattr(completion, "choices", None) or []
        if choices:
            message = choices[0].message
            reply.answered = True
            reply.content = getattr(message, "content", None) or ""
            reply.reasoning = reasoning_field(message)
            reply.refusal = getattr(message, "refusal", None) or ""
            reply.finish_reason = choices[0].finish_reason
        return reply

    def add(self, chunk: Any) -> bool:
        """Take one streamed `chat.completion.chunk`; True when it carried some of the reply (a
        piece of text in any field, the finish reason, or the usage): progress. A chunk with only
        the role, as some servers send before the prompt is processed, is not."""
        self.model = self.model or _model(chunk)
        progressed = False
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
            progressed = True
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            self.answered = True
            delta = getattr(choice, "delta", None)
            if delta is not None:
                self.content += getattr(delta, "content", None) or ""
                self.reasoning += reasoning_field(delta)
                self.refusal += getattr(delta, "refusal", None) or ""
                progressed = progressed or _carries(delta)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
                progressed = True
        return progressed


def _carries(delta: Any) -> bool:
    """Whether a delta holds any of the reply: any field but the role that is not empty (the
    text, reasoning under whatever name a server gives it, a refusal, tool calls)."""
    said = delta.model_dump(exclude_none=True) if hasattr(delta, "model_dump") else {}
    return any(value not in ("", [], {}) for name, value in said.items() if name != "role")


def _model(reply: Any) -> str | None:
    model = getattr(reply, "model", None)
    return model if isinstance(model, str) and model else None
