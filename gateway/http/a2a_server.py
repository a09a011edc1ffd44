"""Aeon as an A2A agent, for other agents (docs/a2a.md): the agent-to-agent protocol's JSON-RPC
binding on `aeon serve`, built on the official `a2a-sdk`.

    GET  /.well-known/agent-card.json    the agent card: the skill `ask`, text and text files in
    POST /a2a                            JSON-RPC: SendMessage, SendStreamingMessage, GetTask,
                                         CancelTask (and A2A 0.3's message/send, message/stream,
                                         tasks/get, tasks/cancel)

A message is an ordinary run, submitted through the Python client every gateway uses, after
the checks `aeon ask` makes: its text parts are the request, its file parts the attached files
(text, by name), its metadata may carry `rules` and `max_ttl` as the MCP tool takes them. The
SDK's request handler runs each message through this module's executor (`AeonAgent`) and keeps
the tasks in memory (`_FinishedTasks`: the running ones, and the last MAX_FINISHED_TASKS that
ended); a task's metadata names its run (`correlation_id`), so the run page, `aeon answer ID`
and `/v1/runs/{id}` show it too.

- While the run goes on, each progress line `aeon ask` prints is a `working` status update,
  and the answer's text as the model writes it is the artifact `answer`, appended as it comes
  (`_ArtifactText`: only text the host publishes as written; a candidate its checks may set
  aside is not sent). Once the run has its answer, a last chunk replaces the artifact with the
  published text, whole (`append: false`, `lastChunk: true`): a task's artifact is the
  published answer exactly, however the text came.
- The task ends with the run's answer, once: `completed`, or `canceled` for a run answered
  `cancelled`, `failed` for one that `failed`; its metadata is the answer's outcome (the MCP
  tool's structured content: status, degraded, failed rules, checks, usage).
- `CancelTask` cancels the run (`AeonClient.cancel`); it stops at its next hop, is answered
  `cancelled`, and the task ends `canceled` with that answer.
- Bad input ends the task `rejected`, its status message the one line `aeon ask` would print;
  nothing is published.

The API's guards stand before `/a2a` (gateway.http.guards: Host check, rate limit, bearer
tokens) and its body is read within AEON_HTTP_MAX_BODY_BYTES; the card is public, like the
OpenAPI document. The SDK is imported here alone, and this module only when `aeon serve`
builds its app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0, TransportProtocol
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message as AsgiMessage
from starlette.types import Receive

from aeonloop import __version__
from aeonloop.contracts import AttachedFile
from aeonloop.exceptions import AnswerTimeout, BadInput
from aeonloop.gateway.client import ANSWER_GRACE_S, DEFAULT_TIMEOUT_S, AeonClient
from aeonloop.gateway.http.bodies import read_json
from aeonloop.gateway.http.errors import json_response
from aeonloop.gateway.http.guards import A2A_PATH
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.gateway.mcp_server import ASK_DESCRIPTION, AskOutcome, outcome_of
from aeonloop.gateway.progress import Progress
from aeonloop.gateway.validation import parse_rules
from aeonloop.phases.events import ExecutionResult
from aeonloop.phases.models import ExitReason
from aeonloop.runs.answer_text import DELTA, RESET, TextEntry

log = logging.getLogger("aeon.a2a")

#: The one skill: a run.
SKILL_ID = "ask"
#: The id of the artifact that holds a task's answer.
ANSWER_ARTIFACT = "answer"
#: What a message's text and the answer are.
TEXT_MODE = "text/plain"
#: What the skill takes: the text, and text files (Aeon reads files as context in its prompts;
#: any UTF-8 text is taken, whatever its media type says).
INPUT_MODES = (TEXT_MODE, "text/markdown", "text/csv", "application/json")
#: Finished tasks kept for GetTask, newest first; an older one is read by its run's id
#: (`/v1/runs/{id}`, `aeon answer ID`).
MAX_FINISHED_TASKS = 1_000
#: The task states that end a task.
_ENDED = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_REJECTED,
}


# -- what a message asks ------------------------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """A message as a run's input: the request, its attached files, its options."""

    request: str
    files: list[AttachedFile] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


def asked(message: Message) -> Asked:
    """The run `message` asks for; BadInput naming the part or the metadata key at fault.

    Text parts, joined by blank lines, are the request; a text part with a filename, or a
    raw part (UTF-8 text), is an attached file named by its filename. A file by URL is not
    fetched and a data part has no place in a run: each is refused, saying what to send
    instead. The metadata may carry `rules` and `max_ttl`, as the MCP tool takes them."""
    texts: list[str] = []
    files: list[AttachedFile] = []
    for number, part in enumerate(message.parts):
        where = f"parts[{number}]"
        kind = part.WhichOneof("content")
        if kind == "text" and not part.filename:
            texts.append(part.text)
        elif kind in ("text", "raw"):
            files.append(_file(where, part))
        elif kind == "url":
            raise BadInput(
                f"{where}: a file by URL is not fetched: send its text in the message "
                "(a raw part, or a text part with a filename)"
            )
        else:
            raise BadInput(
                f"{where}: a {kind or 'empty'} part has no place in a run: send the request "
                "as text, and files as text with a filename"
            )
    return Asked("\n\n".join(texts), files, _options(message))


def _file(where: str, part: Part) -> AttachedFile:
    if not part.filename:
        raise BadInput(f"{where}: a file needs a filename, the name the run refers to it by")
    if part.WhichOneof("content") == "text":
        content = part.text
    else:
        try:
            content = part.raw.decode()
        except UnicodeDecodeError:
            raise BadInput(
                f"{where}: {part.filename[:80]} is not UTF-8 text: Aeon reads files as text"
            ) from None
    try:
        return AttachedFile(path=part.filename, content=content)
    except ValidationError as error:
        reason = error.errors(include_url=False)[0]["msg"]
        raise BadInput(f"{where}.filename: {reason}") from None


def _options(message: Message) -> dict[str, Any]:
    """The run's options the message's metadata carries: `rules` and `max_ttl`."""
    given = MessageToDict(message.metadata) if message.HasField("metadata") else {}
    options: dict[str, Any] = {}
    if "rules" in given:
        options["rules"] = parse_rules(given["rules"], source="metadata.rules")
    if "max_ttl" in given:
        ttl = given["max_ttl"]
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl != int(ttl):
            raise BadInput(f"metadata.max_ttl: {ttl!r} is not a whole number of passes")
        options["max_ttl"] = int(ttl)
    return options


def task_state(status: ExitReason) -> TaskState:
    """The state a task ends in, for the way its run ended: every run has an answer, so it is
    `completed` unless the run was cancelled or failed (a degraded answer is completed, and
    its metadata says `degraded`)."""
    if status is ExitReason.CANCELLED:
        return TaskState.TASK_STATE_CANCELED
    if status is ExitReason.FAILED:
        return TaskState.TASK_STATE_FAILED
    return TaskState.TASK_STATE_COMPLETED


class _ArtifactText:
    """The answer artifact's chunks while the answer is written (bus.answer_text): the text the
    host publishes as written, appended as it comes. A candidate the host's checks may still
    set aside (`provisional`) is not sent; after a reset (a candidate set aside, a call made
    again), the next chunk replaces what was sent (`append: false`), as an A2A artifact may
    be replaced."""

    def __init__(self) -> None:
        self._started = False

    def take(self, entry: TextEntry) -> tuple[str, bool] | None:
        """The chunk to send for `entry`, as (text, append); None for none."""
        if entry.kind == RESET:
            self._started = False
            return None
        if entry.kind != DELTA or entry.provisional or not entry.text:
            return None
        append, self._started = self._started, True
        return entry.text, append


# -- the agent ----------------------------------------------------------------------------------


@dataclass
class _Running:
    """A task while its `execute` runs: its run, once published, and whether it has ended."""

    correlation_id: str | None = None
    #: Set once the run is published (`correlation_id` is known).
    published: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set once `execute` has written the task's end (its answer and last state, or rejected).
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class AeonAgent(AgentExecutor):
    """Each message a run, through `client`, given `timeout_s` seconds (its deadline)."""

    def __init__(self, client: AeonClient, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self._running: dict[str, _Running] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Submit the message's run, relay its progress and text, and end the task with its
        answer (or `rejected`, naming the bad input)."""
        task_id, context_id = str(context.task_id), str(context.context_id)
        message = context.message or Message()
        # Known before the task is, so a cancel always finds it (and waits for its run).
        running = self._running[task_id] = _Running()
        try:
            await self._execute(task_id, context_id, message, event_queue, running)
        finally:
            running.ended.set()
            self._running.pop(task_id, None)

    async def _execute(
        self,
        task_id: str,
        context_id: str,
        message: Message,
        event_queue: EventQueue,
        running: _Running,
    ) -> None:
        await event_queue.enqueue_event(
            Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[message],
            )
        )
        updater = TaskUpdater(event_queue, task_id, context_id)
        updates: asyncio.Queue[Progress | TextEntry] = asyncio.Queue()
        try:
            ask = asked(message)
            correlation_id = await self.client.submit(
                ask.request,
                files=ask.files,
                timeout=self.timeout_s,
                on_progress=updates.put_nowait,
                **ask.options,
            )
        except BadInput as error:  # the one line `aeon ask` would print; nothing published
            await updater.reject(updater.new_agent_message([Part(text=str(error))]))
            return
        log.info("run %s submitted over A2A (task %s)", correlation_id, task_id)
        running.correlation_id = correlation_id
        running.published.set()
        named = {"correlation_id": correlation_id}
        submitted = updater.new_agent_message([Part(text=f"run {correlation_id} submitted")])
        await updater.update_status(TaskState.TASK_STATE_WORKING, submitted, metadata=named)
        result = await self._follow(correlation_id, updater, updates)
        await _end(updater, correlation_id, result)

    async def _follow(
        self,
        correlation_id: str,
        updater: TaskUpdater,
        updates: asyncio.Queue[Progress | TextEntry],
    ) -> ExecutionResult | AnswerTimeout:
        """Relay the run's progress lines and answer text until its answer is in; the answer,
        or the AnswerTimeout that says it did not come."""
        waiting = asyncio.ensure_future(
            self.client.wait(correlation_id, self.timeout_s + ANSWER_GRACE_S)
        )
        following = asyncio.ensure_future(
            self.client.follow_text(correlation_id, updates.put_nowait)
        )
        text = _ArtifactText()
        named = {"correlation_id": correlation_id}
        try:
            async for update in _until(updates, waiting):
                if isinstance(update, Progress):
                    line = updater.new_agent_message([Part(text=update.line)])
                    await updater.update_status(TaskState.TASK_STATE_WORKING, line, metadata=named)
                    continue
                chunk = text.take(update)
                if chunk is not None:
                    await updater.add_artifact(
                        [Part(text=chunk[0])],
                        artifact_id=ANSWER_ARTIFACT,
                        name=ANSWER_ARTIFACT,
                        append=chunk[1],
                        last_chunk=False,
                    )
            try:
                return waiting.result()
            except AnswerTimeout as error:
                return error
        finally:
            # The SDK cancels this while it stops (aeon serve shutting down): the run goes on
            # to its answer, kept like any run's (`aeon answer ID`).
            following.cancel()
            waiting.cancel()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task's run, and return once `execute` has ended the task with the run's
        one answer (`cancelled`, unless it came first): the SDK stops `execute` after this."""
        running = self._running.get(str(context.task_id))
        if running is None:  # its end is written already
            return
        # Past the run's deadline and grace, the SDK writes `canceled` itself.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.timeout_s + ANSWER_GRACE_S):
                # A message still being checked and published: its run, or its refusal, first.
                await _first(running.published.wait(), running.ended.wait())
                if running.correlation_id is not None:
                    cid = running.correlation_id
                    outcome = await self.client.cancel(cid)
                    log.info("run %s: its A2A task was cancelled; cancel %s", cid, outcome.value)
                await running.ended.wait()


async def _first(*waits: Awaitable[Any]) -> None:
    """Return once the first of `waits` is done (the others are cancelled)."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def _until(
    updates: asyncio.Queue[Progress | TextEntry], done: asyncio.Future[Any]
) -> AsyncIterator[Progress | TextEntry]:
    """Each update as it is put in `updates`, until `done` is, those queued before it first."""
    while not (done.done() and updates.empty()):
        if not updates.empty():
            yield updates.get_nowait()
            continue
        update = asyncio.ensure_future(updates.get())
        try:
            await asyncio.wait({update, done}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            update.cancel()
            raise
        if update.done():
            yield update.result()
        else:
            update.cancel()


async def _end(
    updater: TaskUpdater, correlation_id: str, result: ExecutionResult | AnswerTimeout
) -> None:
    """The task's end: the published answer whole as its artifact's last chunk, then the state
    its run's ending maps to, with the outcome as metadata; `failed` when no answer came."""
    if isinstance(result, AnswerTimeout):
        await updater.failed(updater.new_agent_message([Part(text=str(result))]))
        return
    outcome = answer_outcome(correlation_id, result)
    await updater.add_artifact(
        [Part(text=result.final_answer.answer_text)],
        artifact_id=ANSWER_ARTIFACT,
        name=ANSWER_ARTIFACT,
        metadata=outcome,
        append=False,
        last_chunk=True,
    )
    await updater.update_status(task_state(result.status), metadata=outcome)


def answer_outcome(correlation_id: str, result: ExecutionResult) -> dict[str, Any]:
    """The outcome of the task's run as JSON metadata: the MCP tool's structured content."""
    outcome: AskOutcome = outcome_of(correlation_id, result)
    # Through JSON: a Struct holds numbers as floats and no None inside lists.
    return orjson.loads(orjson.dumps(outcome.model_dump(mode="json", exclude_none=True)))


# -- the card and the routes --------------------------------------------------------------------


def agent_card(base_url: str, settings: HttpSettings) -> AgentCard:
    """The card of the agent served at `base_url` (where the client reached it): its one
    skill, what it takes and gives, and the bearer token when the API asks for one."""
    card = AgentCard(
        name="Aeon",
        description=ASK_DESCRIPTION,
        version=__version__,
        supported_interfaces=[
            AgentInterface(
                url=base_url.rstrip("/") + A2A_PATH,
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_1_0,
            )
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=[TEXT_MODE],
        default_output_modes=[TEXT_MODE],
        skills=[
            AgentSkill(
                id=SKILL_ID,
                name=SKILL_ID,
                description=(
                    "A run: the message's text is the request, its files (text, by filename) "
                    "are context; metadata may carry `rules` and `max_ttl`. The answer is the "
                    "artifact `answer`; progress comes as status updates."
                ),
                tags=["reasoning", "planning", "verification"],
                examples=["Explain tides, then summarise them for a child"],
                input_modes=list(INPUT_MODES),
                output_modes=[TEXT_MODE],
            )
        ],
    )
    if settings.http_tokens:
        scheme = HTTPAuthSecurityScheme(scheme="Bearer", description="a token of AEON_HTTP_TOKENS")
        card.security_schemes["bearer"].CopyFrom(SecurityScheme(http_auth_security_scheme=scheme))
        card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card


class _FinishedTasks(InMemoryTaskStore):
    """The SDK's task store in memory, keeping at most MAX_FINISHED_TASKS finished tasks (the
    oldest go first): a long-lived `aeon serve` must not hold every task it ever answered."""

    def __init__(self) -> None:
        super().__init__()
        self._finished: OrderedDict[str, ServerCallContext] = OrderedDict()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await super().save(task, context)
        if task.status.state not in _ENDED:
            return
        self._finished[task.id] = context
        self._finished.move_to_end(task.id)
        while len(self._finished) > MAX_FINISHED_TASKS:
            oldest, saved_by = self._finished.popitem(last=False)
            await super().delete(oldest, saved_by)


#: The SDK's loggers of JSON-RPC requests, and how they begin the record of one they cannot
#: parse: a client's mistake, answered with a JSON-RPC error, which they log at ERROR with
#: its traceback.
_RPC_LOGGERS = ("a2a.server.routes.jsonrpc_dispatcher", "a2a.compat.v0_3.jsonrpc_adapter")
_CLIENT_MISTAKES = ("Failed to validate base JSON-RPC request", "Failed to parse request params")
#: The most of a client's mistake a log line keeps (it may quote what the client sent).
_MISTAKE_CHARS = 300


class _OneLine(logging.Filter):
    """A request the SDK could not parse, logged as one warning line naming what was wrong:
    the client made the mistake and was told, and a server's log keeps tracebacks for its own
    faults."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.getMessage().startswith(_CLIENT_MISTAKES):
            error = record.exc_info[1]
            said = " ".join(f"{type(error).__name__}: {error}".split())[:_MISTAKE_CHARS]
            record.msg, record.args = f"{record.getMessage()}: {said}", None
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


#: The filter `aeon serve` puts on the SDK's JSON-RPC loggers (once: the same instance).
ONE_LINE = _OneLine()


@dataclass
class A2AServer:
    """What `aeon serve` mounts: the routes, and the handler to close when it stops."""

    routes: list[Route]
    handler: DefaultRequestHandler

    async def aclose(self) -> None:
        """Stop the tasks still followed (their runs go on to their answers)."""
        await self.handler.aclose()


def build_a2a(
    client: AeonClient, settings: HttpSettings, timeout_s: float = DEFAULT_TIMEOUT_S
) -> A2AServer:
    """The A2A agent over `client`: the card at the well-known path, JSON-RPC at A2A_PATH."""
    for name in _RPC_LOGGERS:
        logger = logging.getLogger(name)
        if ONE_LINE not in logger.filters:
            logger.addFilter(ONE_LINE)
    handler = DefaultRequestHandler(
        agent_executor=AeonAgent(client, timeout_s),
        task_store=_FinishedTasks(),
        # The card as the handler checks it (streaming on); the one served names its URL.
        agent_card=agent_card("http://localhost", settings),
    )
    (rpc,) = create_jsonrpc_routes(handler, A2A_PATH, enable_v0_3_compat=True)

    async def card(request: Request) -> Response:
        served = agent_card(str(request.base_url), settings)
        return json_response(agent_card_to_dict(served))

    routes = [
        Route(AGENT_CARD_WELL_KNOWN_PATH, card, methods=["GET"]),
        Route(A2A_PATH, _bounded(rpc.endpoint, settings), methods=["POST"]),
    ]
    return A2AServer(routes, handler)


def _bounded(
    endpoint: Callable[[Request], Awaitable[Response]], settings: HttpSettings
) -> Callable[[Request], Awaitable[Response]]:
    """`endpoint` (the SDK's JSON-RPC dispatcher) given a body read as the API reads one:
    JSON, within AEON_HTTP_MAX_BODY_BYTES and AEON_HTTP_BODY_TIMEOUT_S (the SDK reads any
    size)."""

    async def bounded(request: Request) -> Response:
        body = orjson.dumps(await read_json(request, settings))
        return await endpoint(Request(request.scope, _replaying(body, request.receive)))

    return bounded


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `body` first, then what the connection gives (a disconnect,
    which a stream watches for)."""
    given = False

    async def replay() -> AsgiMessage:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
