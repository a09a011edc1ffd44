"""A call judged by its progress: the reply assembled as it streams, and the bounds that cut it.

Every call to an OpenAI-compatible server streams (llm.openai_adapter), so the adapter sees each
token as the server writes it. That changes what a time limit can mean: not "the whole reply
within N seconds", which cuts a slow server that is working and had a CPU server fail every run
(issue 33), but "the server is still producing". An attempt is cut in three cases only:

- no first token within the first-token bound, which covers the prompt's processing and so grows
  with the prompt (the adapter sets it: AEON_LLM_TIMEOUT plus AEON_LLM_FIRST_TOKEN_PER_1K_S per
  1,000 prompt tokens); it runs again whenever the server writes for another of the process's
  calls, since a call queued behind that one is waiting, not stalled;
- no further token within the idle bound (AEON_LLM_IDLE_TIMEOUT) once tokens flow;
- the request's deadline.

A reply that keeps coming is never cut for its length: its token budget (`max_tokens`) bounds it.
A reply sent whole (a server that does not stream, or one that cuts streams short) has one
"token", the whole reply, so its bound is the first-token bound plus an allowance for writing
the whole reply budget (AEON_LLM_WHOLE_REPLY_PER_1K_S per 1,000 tokens of it): a slow server
that is working is given the time to write all it may write.

A stream that ends with no finish reason is not a reply but an attempt cut short (llama-cpp-
python's server ends a stream that way when another request comes while it is served): the
adapter sends it again, and its calls one at a time, which such a server never cuts; whole, if
streams are cut even so (other clients' requests).

`Assembled` is one reply as the adapter judges it, whether it came in chunks or whole, so the
rules for an answer (reasoning apart, truncation, refusal, usage) are written once. `Relay`
writes a call's answer to its sink (LLMCall.sink) as it comes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from aeonloop.llm.base import TextSink
from aeonloop.llm.reasoning import answer_so_far, reasoning_field

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

    def elsewhere(self) -> None:
        """The server wrote for another of the process's calls. One still waiting for its
        first token is queued behind that call, not stalled (a server that serves one call at
        a time answers none other meanwhile): its first-token bound runs again from now."""
        if self.tokens == 0 and self.bound == "first token":
            self._arm("first token", self.seconds)

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
    #: llama.cpp's server's own `timings` (`cache_n`: prompt tokens its cache reused), when sent.
    timings: Any = None
    model: str | None = None
    #: It came as a stream (chunks), not whole.
    streamed: bool = False
    #: Streamed chunks that carried text (content, reasoning, refusal): each holds at least one
    #: token, so a usage estimate is never below it (llama.cpp's servers send one a chunk).
    pieces: int = 0

    @property
    def cut_short(self) -> bool:
        """A stream that ended with no finish reason: the server stopped it part way (or never
        began it), so what came is no reply, whatever it holds."""
        return self.streamed and self.finish_reason is None

    @classmethod
    def whole(cls, completion: Any) -> Assembled:
        """A reply sent whole (a `chat.completion`)."""
        reply = cls(usage=getattr(completion, "usage", None), model=_model(completion))
        reply.timings = getattr(completion, "timings", None)
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
        self.streamed = True
        progressed = False
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
            progressed = True
        self.timings = getattr(chunk, "timings", None) or self.timings
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            self.answered = True
            delta = getattr(choice, "delta", None)
            if delta is not None:
                text = (getattr(delta, "content", None) or "", reasoning_field(delta))
                refusal = getattr(delta, "refusal", None) or ""
                self.content += text[0]
                self.reasoning += text[1]
                self.refusal += refusal
                self.pieces += any(text) or bool(refusal)
                progressed = progressed or _carries(delta)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
                progressed = True
        return progressed


class Relay:
    """One call's answer, written to its sink (LLMCall.sink, a TextSink) as it comes, across
    the call's attempts; a call with no sink writes nothing.

    What is written is the answer only: never reasoning (its own fields are never shown, and
    blocks in the content are held back until they close: reasoning.answer_so_far). At the end
    the call settles on the answer it returns: what was written is completed to it, or, where it
    differs (a closing tag with no opening one made thinking of what was shown), reset and
    written again, so the pieces written since the last reset always join to the reply's text.
    An attempt after one that wrote resets the sink before it writes.
    """

    def __init__(self, sink: TextSink | None, opens_in_prompt: bool = False) -> None:
        self._sink = sink
        #: The model's prompt opens a thinking block its reply closes: hold all until it does.
        self.opens_in_prompt = opens_in_prompt
        #: Written since the last reset.
        self._written = ""
        #: What was written belongs to an attempt that is void.
        self._void = False

    def next_attempt(self) -> None:
        """A new attempt: what earlier ones wrote is not the reply."""
        self._void = bool(self._written)

    async def show(self, content: str) -> None:
        """The content of a streamed reply so far: write what of it is sure to be answer."""
        if self._sink is not None:
            await self._bring_to(self._sink, answer_so_far(content, self.opens_in_prompt))

    async def settle(self, text: str) -> None:
        """The call's answer, as it returns it (a whole reply's is written here, once)."""
        if self._sink is not None:
            await self._bring_to(self._sink, text)

    async def _bring_to(self, sink: TextSink, text: str) -> None:
        """Make what was written `text`: the rest of it, or a reset and all of it."""
        if self._void or not text.startswith(self._written):
            await sink.reset()
            self._written, self._void = "", False
        if len(text) > len(self._written):
            await sink.write(text[len(self._written) :])
            self._written = text


def _carries(delta: Any) -> bool:
    """Whether a delta holds any of the reply: any field but the role that is not empty (the
    text, reasoning under whatever name a server gives it, a refusal, tool calls)."""
    said = delta.model_dump(exclude_none=True) if hasattr(delta, "model_dump") else {}
    return any(value not in ("", [], {}) for name, value in said.items() if name != "role")


def _model(reply: Any) -> str | None:
    model = getattr(reply, "model", None)
    return model if isinstance(model, str) and model else None
