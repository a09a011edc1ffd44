"""What an OpenAI-compatible server has shown it cannot take, learnt once per adapter: each step
down happens once, only ever down, and is logged once, at INFO (it is how such a server works,
not a fault to warn about on every `aeon ask`).

- Structured output: a JSON prompt asks for its schema (`response_format` json_schema). A server
  that refuses it (by what it says, whatever the status: llama-cpp-python answers HTTP 500) gets
  `json_object` with the schema attached, which llama.cpp's and llama-cpp-python's servers turn
  into a grammar (with ranges it can enforce: llm.schemas), then plain `json_object`, then no
  `response_format`. A prompt gives the schema as text only on those two last steps
  (`schema_sent`): sent once, through `response_format`, where the server takes it.
- Streaming: a server that refuses `stream_options` (an HTTP 4xx naming it) gets streaming
  without it; one that refuses streaming (a 4xx naming `stream`), or answers it with something
  other than an event stream, gets whole replies.
- The reply budget's name: `max_completion_tokens` where a server refuses `max_tokens` by that.
- One call at a time: a stream that ends with no finish reason was cut short (llama-cpp-python's
  server, by default, cuts the one it serves when another request comes), so calls wait their
  turn here from then on, still streamed (`cut_short`, `turn`); only if a stream sent alone is
  cut even so (another client's requests) are calls sent whole.

Calls in flight at once are all refused alike, and only the first steps down; the others are
sent again as it left things (each says what it was sent with).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import openai

from aeonloop.exceptions import LLMError
from aeonloop.llm.base import LLMCall, StructuredOutput
from aeonloop.llm.openai_errors import error_text, is_context_error, log
from aeonloop.llm.openai_retry import seconds_left
from aeonloop.llm.schemas import enforceable

ResponseFormat = Literal["json_schema", "json_object_schema", "json_object", "off"]
#: Each step down the ladder, taken when the server refuses the step above.
_DOWNGRADE: dict[ResponseFormat, ResponseFormat] = {
    "json_schema": "json_object_schema",
    "json_object_schema": "json_object",
    "json_object": "off",
}
_SAID: dict[ResponseFormat, str] = {
    "json_schema": "json_schema",
    "json_object_schema": "json_object with the schema",
    "json_object": "json_object",
    "off": "no response_format",
}
Streaming = Literal["with_usage", "without_usage", "off"]
#: How calls are sent after each step down of streaming, as the log line says it.
_STREAMING_SAID: dict[Streaming, str] = {
    "without_usage": "stream without stream_options (usage is estimated where none comes)",
    "off": "are sent whole, not streamed",
}
#: Statuses a server refuses an option with: 400/422 by the book, 404/415/501 from servers that
#: do not know the option, 500 from llama-cpp-python, whose request validation fails that way.
_REFUSAL_STATUSES = (400, 404, 415, 422, 500, 501)
_FORMAT_ERROR = re.compile(r"response_format|json_schema|json_object|structured|grammar", re.I)
_MAX_TOKENS_NAME_ERROR = re.compile(r"max_completion_tokens", re.IGNORECASE)
#: A refusal naming streaming (`stream`, `streaming`, `stream_options`; not "upstream").
_STREAM_ERROR = re.compile(r"\bstream", re.IGNORECASE)


def schema_sent(options: dict[str, Any]) -> bool:
    """Whether a request's options send the reply's schema to the server (json_schema, or
    json_object with the schema): where they do not, the prompt carries it as text instead
    (llm.openai_transport, `prompts.registry.schema_in_text`)."""
    response_format = options.get("response_format")
    if response_format is None:
        return False
    return response_format["type"] == "json_schema" or "schema" in response_format


class StepDowns:
    """How one model's calls are sent now, stepped down as its server refuses options."""

    def __init__(self, model: str, where: str, structured_output: StructuredOutput) -> None:
        self._model = model
        self._where = where
        #: The response_format JSON prompts ask for now; only ever steps down.
        self.response_format: ResponseFormat = (
            "json_schema" if structured_output == "auto" else structured_output
        )
        #: How calls stream now; only ever steps down.
        self.streaming: Streaming = "with_usage"
        self._max_tokens_name = "max_tokens"
        #: Set once the server has shown it cuts a stream when another call comes: each call
        #: waits its turn here, not at the server (`turn`).
        self._one_at_a_time: asyncio.Lock | None = None
        #: Attempts at the server sent before the turns began (their streams may be cut).
        self._out_of_turn = 0

    def options(self, call: LLMCall, max_tokens: int | None) -> dict[str, Any]:
        """The request's options as the server takes them now."""
        options: dict[str, Any] = {}
        if self.streaming != "off":
            options["stream"] = True
            if self.streaming == "with_usage":
                options["stream_options"] = {"include_usage": True}
        if max_tokens:
            options[self._max_tokens_name] = max_tokens
        schema = call.response_schema
        if schema is None or self.response_format == "off":
            return options
        if self.response_format == "json_schema":
            named = {"name": call.prompt_id.value, "schema": schema}
            options["response_format"] = {"type": "json_schema", "json_schema": named}
        elif self.response_format == "json_object_schema":
            options["response_format"] = {"type": "json_object", "schema": enforceable(schema)}
        else:
            options["response_format"] = {"type": "json_object"}
        return options

    def step_down(
        self,
        exc: openai.APIStatusError,
        options: dict[str, Any],
        sent: ResponseFormat,
        sent_streaming: Streaming,
    ) -> bool:
        """Adapt to a server that refuses an option we sent; True to send the request again.

        `sent` and `sent_streaming` are what the refused request carried: calls in flight at once
        are all refused, and only the first steps down; the others are sent again as it left it.
        """
        if exc.status_code not in _REFUSAL_STATUSES or is_context_error(exc):
            return False
        text = error_text(exc)
        if "stream" in options and exc.status_code < 500 and _STREAM_ERROR.search(text):
            without_options = "stream_options" in options and "stream_options" in text.lower()
            lower: Streaming = "without_usage" if without_options else "off"
            said = f"refused {'stream_options' if without_options else 'streaming'}"
            self.stop_streaming(lower, f"{said} (HTTP {exc.status_code})", sent_streaming)
            return True
        if "response_format" in options and _FORMAT_ERROR.search(text):
            if sent != self.response_format:
                return True
            lower_format = _DOWNGRADE[self.response_format]
            log.info(
                "%r at %s refused response_format %s (HTTP %d); JSON prompts use %s from now on",
                self._model,
                self._where,
                _SAID[self.response_format],
                exc.status_code,
                _SAID[lower_format],
            )
            self.response_format = lower_format
            return True
        if "max_tokens" in options and _MAX_TOKENS_NAME_ERROR.search(text):
            self._max_tokens_name = "max_completion_tokens"
            return True
        return False

    def stop_streaming(self, lower: Streaming, said: str, sent: Streaming) -> None:
        """Step streaming down to `lower`, saying so once; a call that was sent before another
        stepped down (`sent` is no longer how calls go) changes nothing."""
        if sent != self.streaming:
            return
        log.info(
            "%r at %s %s; calls %s from now on",
            self._model,
            self._where,
            said,
            _STREAMING_SAID[lower],
        )
        self.streaming = lower

    def cut_short(self, sent: Streaming, *, alone: bool) -> None:
        """A stream the server ended with no finish reason: the attempt is void, and the caller
        sends it again at once, as no failure. llama-cpp-python's server ends a stream so
        whenever another request comes while it serves it (its setting `interrupt_requests`,
        on by default), which Aeon's calls in parallel make happen on every run.

        The first such stream makes calls go one at a time (`turn`): none of ours then cuts
        another's, and calls keep streaming, judged by their progress as whole calls cannot be.
        Said once, at INFO as the other step downs are (a warning would print on every `aeon
        ask` against such a server at its defaults, issue 35), naming the server's setting,
        which the user can turn off (docs/llm-servers.md says so too). A stream cut short even
        so, sent `alone` (in its turn, no call of ours sent before the turns began still at the
        server), was cut by another client's request (more processes on one server): calls are
        sent whole from then on, which such a server never cuts."""
        if alone:
            said = "cut short a stream sent alone (another client's request came?)"
            self.stop_streaming("off", said, sent)
            return
        if self._one_at_a_time is not None:
            return
        self._one_at_a_time = asyncio.Lock()
        log.info(
            "%r at %s ended a stream with no finish reason: it cuts a stream short when "
            "another request comes (llama-cpp-python's server does, unless started with "
            "--interrupt_requests false); calls are sent one at a time from now on",
            self._model,
            self._where,
        )

    @contextlib.asynccontextmanager
    async def turn(
        self, call: LLMCall, describe: Callable[[LLMCall, str], str]
    ) -> AsyncIterator[bool]:
        """The call's turn at the server; True when it is sent alone: in its turn, with no call
        sent before the turns began still at the server. Every call has its turn at once,
        unless the server has shown it cuts a stream when another call comes (`cut_short`):
        then calls are sent one at a time, so none of ours cuts another's stream. Such a server
        serves one call at a time anyway, and a call queued there would have its bound running
        while the calls before it are served; waiting here, it runs none, and never waits past
        its deadline (`describe` words the error). (Other processes' calls still queue there.)"""
        turn = self._one_at_a_time
        if turn is None:
            self._out_of_turn += 1
            try:
                yield False
            finally:
                self._out_of_turn -= 1
            return
        try:
            async with asyncio.timeout(seconds_left(call)):
                await turn.acquire()
        except TimeoutError:
            detail = "the request's deadline passed while the call waited its turn at the server"
            raise LLMError(describe(call, detail)) from None
        try:
            yield self._out_of_turn == 0
        finally:
            turn.release()
