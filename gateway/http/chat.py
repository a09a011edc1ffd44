"""Aeon behind OpenAI's Chat Completions API, for the clients that speak it (docs/chat.md).

    POST /v1/chat/completions    a run, asked as a chat: its answer as the assistant's message
    GET  /v1/models              the one model, `aeon` (and GET /v1/models/aeon)

A completion is an ordinary run: its messages become the request (the last user message) and
its earlier turns (gateway.conversation.split_messages), a run's own options come as extra body
fields, and all of it is checked as `POST /v1/runs` checks it (gateway.http.bodies) before
anything is published. It is submitted through the same client, so it has its correlation id
(the completion's `id`, and the `X-Aeon-Run-Id` header), shows on the run page, and can be
cancelled.

- `stream: false` waits for the answer and returns it as a `chat.completion`, `usage` being the
  run's own token counts.
- `stream: true` sends `chat.completion.chunk` events: each progress line `aeon ask` prints
  (gateway.progress) as `reasoning_content`, the field chat UIs show as thinking; the answer's
  text as the model writes it (runs.answer_text), a candidate the host's checks may still set
  aside as `reasoning_content` too, a text the host publishes as written as `content` (a
  chat client cannot take back what it was sent, `_AnswerRelay`); once the answer is
  published, what of it was not sent yet as `content`, so the `content` deltas join to the
  published text exactly; a chunk with `finish_reason`; the usage, when
  `stream_options.include_usage` asks; `data: [DONE]`.
- A client that goes before the answer (a stream closed, a request dropped) has its run
  cancelled, as nobody will read the answer, unless AEON_CHAT_FINISH_ON_DISCONNECT says to
  let it finish. Either way the run is answered once, by the pipeline.
- Refusals are OpenAI's shape (gateway.http.errors), so its clients raise the exception the
  status calls for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import orjson
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from aeonloop.bus.redis_errors import FAILURES, said
from aeonloop.exceptions import AnswerTimeout, ApiError, BadInput
from aeonloop.gateway.client import ANSWER_GRACE_S, AeonClient
from aeonloop.gateway.conversation import split_messages
from aeonloop.gateway.http.bodies import checked_run, parsed, read_json, status_of
from aeonloop.gateway.http.chat_models import (
    MODEL_ID,
    ChatRequest,
    Chunks,
    Model,
    ModelList,
    answer_pieces,
    completion,
    unknown_field,
    unknown_field_reason,
)
from aeonloop.gateway.http.errors import (
    CLIENT_CLOSED,
    error_response,
    json_response,
    openai_error,
    redis_reason,
)
from aeonloop.gateway.http.guards import TenantGate
from aeonloop.gateway.http.models import RunOptions, RunRequest
from aeonloop.gateway.http.run_feed import RunFeed
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.gateway.progress import SET_ASIDE_WORDS, Progress, Silence
from aeonloop.phases.events import ExecutionResult
from aeonloop.runs.answer_text import DELTA, RESET, TextEntry, TextWatch

log = logging.getLogger("aeon.http")

#: The header naming a completion's run, on every answer to a request that started one.
RUN_ID_HEADER = "X-Aeon-Run-Id"
#: Keep-alive comments while a stream waits for the run's next line, so proxies do not cut it.
PING_S = 15
#: A stream whose socket took no bytes for this long is dropped (its client has gone).
SEND_TIMEOUT_S = 30.0
#: A stream's last event, as OpenAI's API ends one.
DONE = "[DONE]"


class ChatApi:
    """The endpoints, bound to the API's client, run feed and settings."""

    def __init__(
        self,
        client: AeonClient,
        feed: RunFeed,
        settings: HttpSettings,
        tenants: TenantGate | None = None,
    ) -> None:
        self.client = client
        self.feed = feed
        self.settings = settings
        self.tenants = tenants or TenantGate()
        self.model = Model(created=int(time.time()))

    async def models(self, request: Request) -> Response:
        """`GET /v1/models`: the one model."""
        return json_response(ModelList(data=[self.model]).model_dump(mode="json"))

    async def model_of(self, request: Request) -> Response:
        """`GET /v1/models/{model}`: the model, if it is `aeon`."""
        _check_model(request.path_params["model"])
        return json_response(self.model.model_dump(mode="json"))

    async def completions(self, request: Request) -> Response:
        """`POST /v1/chat/completions`: checked, submitted, then answered or streamed."""
        body, run = _checked(await read_json(request, self.settings), self.client)
        lines: asyncio.Queue[Progress] = asyncio.Queue()
        try:
            correlation_id = await self.tenants.submit(
                request.scope,
                self.client,
                **run,
                effort=body.effort(),
                on_progress=lines.put_nowait if body.stream else None,
            )
        except BadInput as error:  # the whole event over AEON_MAX_EVENT_BYTES
            raise ApiError(status_of(error), "body", str(error)) from None
        self.feed.note_submitted(correlation_id)
        created = int(time.time())
        log.info(
            "run %s submitted as a chat completion%s",
            correlation_id,
            " (streamed)" if body.stream else "",
        )
        waiting = asyncio.ensure_future(
            self.client.wait(correlation_id, run["timeout"] + ANSWER_GRACE_S)
        )
        headers = {RUN_ID_HEADER: correlation_id}

        async def left() -> None:
            await self._left(correlation_id, waiting)

        if body.stream:
            chunks = Chunks(correlation_id, created, body.include_usage())
            text = self.feed.runs.watch(correlation_id)

            async def over() -> None:
                self.feed.runs.release(text)
                await left()

            return _Stream(_events(chunks, lines, text, waiting), over, headers)
        try:
            return await _answer(request, correlation_id, created, waiting, headers)
        finally:
            await left()

    async def _left(self, correlation_id: str, waiting: asyncio.Future[ExecutionResult]) -> None:
        """The completion is over: if its answer had not come, its client has gone (or the
        server is stopping), and nobody will read it. Its run is cancelled, unless
        AEON_CHAT_FINISH_ON_DISCONNECT says to let it finish."""
        if waiting.done():
            return
        waiting.cancel()
        if self.settings.chat_finish_on_disconnect:
            log.info(
                "run %s: its chat client left before the answer; it runs on "
                "(AEON_CHAT_FINISH_ON_DISCONNECT)",
                correlation_id,
            )
            return
        # Shielded: this runs as the request's scope is being cancelled, which would stop it.
        with anyio.CancelScope(shield=True):
            try:
                outcome = await self.client.cancel(correlation_id)
            except FAILURES as error:
                log.warning(
                    "run %s: its chat client left before the answer, and it could not be "
                    "cancelled (%s); it runs to its end",
                    correlation_id,
                    said(error),
                )
                return
        log.info(
            "run %s: its chat client left before the answer; cancel %s",
            correlation_id,
            outcome.value,
        )


def _checked(data: Any, client: AeonClient) -> tuple[ChatRequest, dict[str, Any]]:
    """The request and the submit's arguments of its run; ApiError naming the field at fault
    (400 for the fields the checks refuse, as OpenAI answers; 413 past a limit on bytes)."""
    unknown = unknown_field(data)
    if unknown is not None:
        raise ApiError(422, unknown, unknown_field_reason())
    body = parsed(ChatRequest, data, example=_EXAMPLE)
    _check_model(body.model)
    if body.stream and body.approve_plan:
        raise ApiError(
            422,
            "approve_plan",
            "a streamed completion cannot pause for its plan's approval: send stream: false "
            "(then approve the plan on the run page or by POST /v1/runs/{id}/approve), or leave "
            "approve_plan out",
        )
    try:
        request, turns = split_messages(body.messages)
    except BadInput as error:
        raise ApiError(422, "messages", str(error)) from None
    options = {name: getattr(body, name) for name in RunOptions.model_fields}
    # Built from fields ChatRequest has checked already, by the same definitions.
    run = RunRequest.model_construct(request=request, messages=turns, **options)
    last = f"messages.{len(body.messages) - 1}.content"
    return body, checked_run(run, client, {"request": last})


_EXAMPLE = '{"model": "aeon", "messages": [{"role": "user", "content": "Explain tides"}]}'


def _check_model(model: str) -> None:
    if model != MODEL_ID:
        raise ApiError(
            404,
            "model",
            f"no model {model[:80]!r} here: the one model is {MODEL_ID!r} (GET /v1/models)",
        )


async def _answer(
    request: Request,
    correlation_id: str,
    created: int,
    waiting: asyncio.Future[ExecutionResult],
    headers: dict[str, str],
) -> Response:
    """The completion once the answer is in; 499 if the client went first."""
    gone = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not waiting.done():  # nobody reads this: it is what the metrics count
        reason = "the client closed the connection before the answer"
        return error_response(CLIENT_CLOSED, None, reason, headers, request.url.path)
    try:
        result = waiting.result()
    except AnswerTimeout as error:
        raise ApiError(504, None, str(error), {**headers, "x-should-retry": "false"}) from None
    body = completion(correlation_id, created, result).model_dump(mode="json")
    return json_response(body, headers=headers)


async def _disconnected(receive: Receive) -> None:
    """Return once the client has closed its connection (its body is read by then)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _events(
    chunks: Chunks,
    lines: asyncio.Queue[Progress],
    text: TextWatch,
    waiting: asyncio.Future[ExecutionResult],
) -> AsyncIterator[ServerSentEvent]:
    """A streamed completion's events: the role, the run's progress lines and its answer's
    text as they come, the rest of the answer once published, the finish, the usage if asked,
    `[DONE]`; an error event if no answer comes."""
    yield _event(chunks.delta(role="assistant", content=""))
    relay = _AnswerRelay()
    silence = Silence()
    seen = 0
    line: asyncio.Future[Progress] | None = None  # the wait for the next line, kept across rounds
    try:
        while True:
            heard = []
            if line is not None and line.done():
                heard.append(line.result())
                line = None
            while not lines.empty():
                heard.append(lines.get_nowait())
            for progress in heard:
                silence.heard(progress.phase)
                for piece in relay.progress(progress.line):
                    yield _event(chunks.delta(reasoning_content=piece))
            quiet = silence.due()
            if quiet is not None:
                for piece in relay.progress(quiet):
                    yield _event(chunks.delta(reasoning_content=piece))
            while seen < len(text.entries):  # entries may come while a yield waits
                entry, seen = text.entries[seen], seen + 1
                silence.writing()
                for field, piece in relay.take(entry):
                    yield _event(chunks.delta(**{field: piece}))
            if waiting.done():
                break
            line = line or asyncio.ensure_future(lines.get())
            more = asyncio.ensure_future(text.more_than(seen))
            try:
                await asyncio.wait(
                    {line, more, waiting},
                    timeout=silence.next_in(),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                more.cancel()
    finally:
        if line is not None:
            line.cancel()
    try:
        result = waiting.result()
    except AnswerTimeout as error:
        yield _event(openai_error(504, None, str(error)))
        return
    except FAILURES as error:
        yield _event(openai_error(503, None, redis_reason(error)))
        return
    for piece in relay.held():  # the candidate text they waited on ended mid-line
        yield _event(chunks.delta(reasoning_content=piece))
    for piece in relay.rest(result.final_answer.answer_text):
        yield _event(chunks.delta(content=piece))
    yield _event(chunks.finish(result))
    if chunks.include_usage:
        yield _event(chunks.usage(result))
    yield _event(DONE)


class _AnswerRelay:
    """What of the answer's text a streamed completion sends, and as which field.

    A chat client shows `content` as the answer and cannot take any of it back, so `content`
    is only ever a prefix of the text to be published: a candidate the host's checks may still
    set aside (`provisional`) goes to `reasoning_content`, with a line when it is set aside;
    text the host will publish as written goes to `content` as far as it extends what was sent
    (a call made again after its worker died writes the same text again: only what it adds is
    sent). Once the answer is published, `rest` is what of it was not sent."""

    def __init__(self) -> None:
        #: The `content` sent so far.
        self.sent = ""
        #: The text written since the last reset.
        self._attempt = ""
        self._provisional_shown = False
        #: Whether the reasoning sent so far ends inside a line (of a candidate's text).
        self._mid_line = False
        self._held: list[str] = []

    def progress(self, line: str) -> list[str]:
        """The reasoning for a progress line, a line of its own: now, or once the candidate
        text being written ends its line (`take`, `held`). The progress and the text are read
        apart, so a line can come while a candidate's text is mid-sentence; it was spliced into
        it (`Explain how tides A  profiled: ...\nwork.`, issue 41)."""
        if self._mid_line:
            self._held.append(f"{line}\n")
            return []
        return [f"{line}\n"]

    def held(self) -> list[str]:
        """The progress lines held while a candidate's text was mid-line, to send now."""
        held, self._held = self._held, []
        return held

    def take(self, entry: TextEntry) -> list[tuple[str, str]]:
        """The deltas to send for `entry`: (field, text) pairs, then the progress lines held
        while the text was mid-line, if it ends its line."""
        sent = self._take(entry)
        if self._mid_line or not self._held:
            return sent
        return [*sent, *(("reasoning_content", line) for line in self.held())]

    def _take(self, entry: TextEntry) -> list[tuple[str, str]]:
        if entry.kind == RESET:
            self._attempt = ""
            shown, self._provisional_shown = self._provisional_shown, False
            self._mid_line = False
            return [("reasoning_content", SET_ASIDE_LINE)] if shown else []
        if entry.kind != DELTA:
            return []
        if entry.provisional:
            self._provisional_shown = True
            if entry.text:
                self._mid_line = not entry.text.endswith("\n")
            return [("reasoning_content", entry.text)]
        self._mid_line = False  # the answer's own text: the thinking is over
        self._attempt += entry.text
        if len(self._attempt) <= len(self.sent) or not self._attempt.startswith(self.sent):
            return []
        new, self.sent = self._attempt[len(self.sent) :], self._attempt
        return [("content", new)]

    def rest(self, published: str) -> list[str]:
        """The `content` pieces that complete what was sent to the published text. Should
        it not extend what was sent (a call whose worker died mid-answer, made again by a
        model that wrote other words), the published text follows whole after a line saying
        so: what was sent cannot be taken back."""
        if published.startswith(self.sent):
            return answer_pieces(published[len(self.sent) :])
        log.warning("a streamed completion's content was not the start of the answer published")
        return answer_pieces(CUT_LINE + published)


#: The reasoning line after a candidate answer the host set aside (its checks failed, the run
#: went on, or the call was made again).
SET_ASIDE_LINE = f"\n{SET_ASIDE_WORDS}\n"
#: Before the published answer when the `content` sent is not its start (`_AnswerRelay.rest`).
CUT_LINE = "\n\n(the text above was cut off; the answer is:)\n\n"


def _event(data: str | dict[str, object]) -> ServerSentEvent:
    """One `data:` event: a chunk's JSON, an error as JSON, or `[DONE]`."""
    return ServerSentEvent(data if isinstance(data, str) else orjson.dumps(data).decode())


class _Stream(EventSourceResponse):
    """An event stream that calls `left` once it is over, however it ended: done, its client
    gone, its socket stalled, or the server stopping."""

    def __init__(
        self,
        events: AsyncIterator[ServerSentEvent],
        left: Callable[[], Awaitable[None]],
        headers: dict[str, str],
    ) -> None:
        super().__init__(
            events,
            headers=headers,
            ping=PING_S,
            send_timeout=SEND_TIMEOUT_S,
            sep="\n",  # as OpenAI's API writes its streams
        )
        self._left = left

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._left()
