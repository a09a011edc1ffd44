"""The HTTP API's bodies as Pydantic models: what it accepts and returns, and its OpenAPI
document's schemas (gateway.http.openapi), from one definition."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from aeonloop.contracts import AttachedFile, Turn
from aeonloop.gateway.client import DEFAULT_TIMEOUT_S
from aeonloop.gateway.http.run_steps import EventKind, StepKind
from aeonloop.gateway.validation import FileSettings, TurnSettings
from aeonloop.limits import (
    DEFAULT_MAX_PASSES,
    MAX_REQUEST_CHARS,
    MAX_TIMEOUT_S,
    MAX_TOKEN_BUDGET,
    MAX_TOOLS,
    MAX_TTL_CAP,
    Effort,
    ToolName,
)
from aeonloop.phases.events import DEFAULT_THRESHOLD, ExecutionResult
from aeonloop.phases.models import ExitReason, Plan
from aeonloop.prompts.registry import PlanBody

#: The longest `?wait=` a submit may ask for; past it, follow the run's events instead.
MAX_WAIT_S = 300.0
#: The most recent runs one `GET /v1/runs` lists.
MAX_RECENT = 100


#: Where a run is, as the API says it.
RunStage = Annotated[
    Literal["running", "awaiting_approval", "cancelling", "answered", "no_answer"],
    Field(
        description="awaiting_approval: paused after its plan was made, until approved "
        "(`plan` holds it); cancelling: cancelled, its answer (`cancelled`) on its way; "
        "no_answer: its deadline passed and no answer is stored (lost, or expired)"
    ),
]


def _whole(value: object) -> object:
    """A JSON number that is whole, `69.0` included: JSON Schema's `integer` is any number
    without a fraction, and the OpenAPI document says `integer`."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: A whole number as JSON Schema has it; never a bool or a string (strict).
WholeNumber = Annotated[int, BeforeValidator(_whole), Field(strict=True)]
#: What a request must be: some text that is not all whitespace, without control characters
#: but tab and line breaks (gateway.validation.check_request, in JSON Schema's words).
_TEXT = "[^\\u0000-\\u0008\\u000B\\u000C\\u000E-\\u001F\\u007F-\\u009F]"
REQUEST_PATTERN = f"^{_TEXT}*[^\\s\\u0000-\\u001F\\u007F-\\u009F]{_TEXT}*$"


class RequestText(BaseModel):
    """What to answer: a run's request, as `POST /v1/runs` takes it (the chat endpoint takes it
    as its last user message instead)."""

    request: str = Field(
        description=f"what to answer, in natural language; 1 to {MAX_REQUEST_CHARS:,} characters, "
        "not all whitespace, no control characters but tab and line breaks",
        json_schema_extra={
            "minLength": 1,
            "maxLength": MAX_REQUEST_CHARS,
            "pattern": REQUEST_PATTERN,
        },
    )


class RunOptions(BaseModel):
    """How a run is to go: the fields of a run besides its request and earlier turns, taken
    alike by `POST /v1/runs` and, as extra body fields, by `POST /v1/chat/completions`."""

    model_config = ConfigDict(extra="forbid")

    #: Any JSON here: parse_rules says what is wrong with it in the words `aeon ask` uses.
    rules: Any = Field(
        None,
        description='rules the answer must meet: a list, or {"rules": [...]}, as `aeon ask '
        '--rules FILE` reads them (docs/cli.md, "Rules")',
        json_schema_extra={"anyOf": [{"type": "array"}, {"type": "object"}, {"type": "null"}]},
    )
    # Strict: JSON has numbers, so `true` or "7" is a mistake to name, not a number to guess.
    threshold: float = Field(
        DEFAULT_THRESHOLD,
        ge=0,
        le=1,
        strict=True,
        description="the pass score that counts as converged",
    )
    max_ttl: WholeNumber | None = Field(
        None,
        description="cap on passes, 1 to the server's AEON_MAX_PASSES "
        f"({DEFAULT_MAX_PASSES} unless set; more is refused); omitted or null: AEON_MAX_PASSES",
        json_schema_extra={"minimum": 1},
    )
    timeout_s: float = Field(
        DEFAULT_TIMEOUT_S,
        strict=True,
        description="seconds the run may take: its deadline in the pipeline",
        json_schema_extra={"exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S},
    )
    token_budget: WholeNumber | None = Field(
        None,
        description="the most tokens (prompt and completion) the run's LLM calls may spend; no "
        "call starts that what is left cannot pay for, and the loop then ends "
        "`budget_exhausted`; omitted or null: the server's AEON_RUN_TOKEN_BUDGET, if set",
        json_schema_extra={"minimum": 1, "maximum": MAX_TOKEN_BUDGET},
    )
    webhook_url: str | None = Field(
        None,
        description="POSTed the answer when the run ends, signed (Standard Webhooks); only "
        "URLs the server's AEON_WEBHOOK_ALLOWED_HOSTS allows (422 otherwise, and when "
        "webhooks are off)",
        json_schema_extra={"maxLength": 2_000},
    )
    approve_plan: bool = Field(
        False,
        strict=True,
        description="pause after the plan is made, in the state `awaiting_approval`, until "
        "`POST /v1/runs/{id}/approve` (a cancel rejects it; its deadline still runs)",
    )
    tools: list[ToolName] | None = Field(
        None,
        max_length=MAX_TOOLS,
        description="the tools the run's steps may call, by name: narrows the server's (its "
        "AEON_MCP_CONFIG servers'), never adds one; omitted or null: all of them, []: none",
    )
    files: list[AttachedFile] = Field(
        default_factory=list,
        description="text files given as context to the prompts that make the plan, the steps "
        "and the answer, each `{path, content}`; at most the server's AEON_MAX_FILES "
        f"({FileSettings().max_files} unless set), each path once. A file over "
        "AEON_MAX_FILE_BYTES, or the files together over AEON_MAX_FILES_BYTES, is 413; one "
        "that is not text (control characters, a NUL byte), or too many files, is 422",
    )


# Inherited in this order so the request comes first, as a reader of the schema expects it.
class RunRequest(RunOptions, RequestText):
    """A request to run, as `POST /v1/runs` takes it; checked as `aeon ask` checks its input."""

    messages: list[Turn] = Field(
        default_factory=list,
        description="the earlier turns of the conversation this request continues, oldest "
        "first, each `{role: user|assistant, content}`: context for the prompts that profile "
        "the task, make the plan, run the steps and write the answer; at most the server's "
        f"AEON_MAX_TURNS ({TurnSettings().max_turns} unless set). Turns holding more than "
        "AEON_MAX_TURNS_CHARS characters together are 413; too many turns, or one that is "
        "not text, 422",
    )
    # Here, not in RunOptions: the chat endpoint takes OpenAI's `reasoning_effort` instead.
    effort: Effort | None = Field(
        None,
        description="how hard the run works, as `aeon ask --effort` (docs/configuration.md, "
        "AEON_EFFORT): `low` the draft path only (one call's answer, repaired, rewritten once), "
        "`medium` the loop where it adds something, `high` the loop always; omitted or null: "
        "the server's AEON_EFFORT",
    )


class Approval(BaseModel):
    """The body of `POST /v1/runs/{id}/approve`: none, or a plan to run instead."""

    model_config = ConfigDict(extra="forbid")

    plan: PlanBody | None = Field(
        None,
        description="a plan to run in place of the run's own, checked as Phase B checks a "
        "model's (repeated step ids made unique); omitted or null: the plan as it is",
    )


_STEP_KIND_WORDS = (
    "a stream ends after `answer` (or, when the run named a webhook, after its outcome: "
    "`webhook_delivered` or `webhook_failed`), or after `no_answer` once the run's deadline "
    "passed without one"
)


class ForkRequest(BaseModel):
    """The body of `POST /v1/runs/{id}/fork`: none, or the fork's change (docs/forks.md)."""

    model_config = ConfigDict(extra="forbid")

    from_pass: WholeNumber | None = Field(
        None,
        description="the first pass made anew: the run's recorded replies answer every call "
        "before it; omitted or null: every pass the run made (and, with no change at all, its "
        "answer: no LLM call)",
        json_schema_extra={"minimum": 1, "maximum": MAX_TTL_CAP},
    )
    #: Any JSON here: parse_rules says what is wrong with it in the words `aeon fork` uses.
    rules: Any = Field(
        None,
        description='rules in place of the run\'s: a list, or {"rules": [...]}, as `aeon fork '
        "--rules FILE` reads them; omitted or null: the run's own",
        json_schema_extra={"anyOf": [{"type": "array"}, {"type": "object"}, {"type": "null"}]},
    )
    plan: PlanBody | None = Field(
        None,
        description="a plan to run in place of the one Phase B would write, checked as Phase "
        "B checks a model's; every pass runs anew (with `from_pass` above 1: 422)",
    )
    timeout_s: float = Field(
        DEFAULT_TIMEOUT_S,
        strict=True,
        description="seconds the fork may take: its deadline in the pipeline",
        json_schema_extra={"exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S},
    )


class Lineage(BaseModel):
    """The run a fork was forked from, and where (docs/forks.md)."""

    parent: str = Field(description="the correlation id of the run forked")
    from_pass: int | None = Field(
        description="the first pass the fork made anew; null: it took every pass of the parent's"
    )


class WebhookOutcome(BaseModel):
    """What became of the webhook an answered run named (aeonloop.webhooks)."""

    outcome: Literal["pending", "delivered", "failed"] = Field(
        description="pending: not POSTed yet, or being tried again; delivered: a try got a 2xx; "
        "failed: every try failed (AEON_WEBHOOK_ATTEMPTS), the answer is in dead letters"
    )
    tries: int | None = Field(None, description="POSTs made, once delivered or failed")
    webhook_id: str | None = Field(None, description="the `webhook-id` header of every try")
    reason: str = Field("", description="why the last try failed, when it failed")
    at: str | None = Field(None, description="when the outcome was recorded (ISO 8601)")


class Links(BaseModel):
    self: str
    events: str
    page: str


class Progress(BaseModel):
    steps_done: int = Field(description="steps of the run so far (profile, plan, passes, exit)")
    latest: StepEvent | None = Field(description="the newest of them")


class StepEvent(BaseModel):
    """One step of a run, as each Server-Sent Event of `/v1/runs/{id}/events` carries it."""

    kind: StepKind = Field(description=f"the SSE `event:` field; {_STEP_KIND_WORDS}")
    id: str = Field(
        description="the SSE `id:` field, `<step>@<Redis entry id>`; send it back as "
        "Last-Event-ID to continue after it"
    )
    data: dict[str, Any] = Field(description="the SSE `data:` field, a JSON object")


class EventFrame(BaseModel):
    """One Server-Sent Event of `/v1/runs/{id}/events` as it is on the wire: SSE's fields,
    each a line `name: value`, the frame ending with an empty line."""

    event: EventKind = Field(
        description=f"the step's kind; {_STEP_KIND_WORDS}. Between the steps, the answer's "
        "text as it is written: `answer_delta` (`{text, candidate, provisional}`: a piece of "
        "it; `provisional` while the host's checks may still set it aside; not provisional "
        "text can still be withdrawn when its call is cut and made again, or the answer "
        "published differs: docs/http-api.md) and "
        "`answer_reset` (`{why}`: the text since the last reset is not the answer); the "
        "deltas since the last reset join to the `answer` event's `answer_text`. While "
        "nothing of the run comes, every 10 s: `waiting` (`{line}`: what the run waits for)"
    )
    id: str | None = Field(
        None,
        description="`<step>@<Redis entry id>`, then, once answer text was sent, `~<entry id>` "
        "of the last answer text entry; send it back as Last-Event-ID to continue after it. "
        "A `waiting` event has none: it marks no place to resume from",
    )
    data: str = Field(
        description="the event's fields as one line of JSON (a StepEvent's `data`, as text)"
    )
    retry: int | None = Field(
        None, description="on the first event only: milliseconds to wait before reconnecting"
    )


class Run(BaseModel):
    """A run: answered (`result` holds the ExecutionResult with the final answer), still
    running (`progress` holds the newest step), or past its deadline with no answer."""

    correlation_id: str
    state: RunStage
    request: str | None = Field(None, description="the request, when it is known here")
    result: ExecutionResult | None = None
    degraded_because: list[str] = Field(
        default_factory=list,
        description="why the answer is degraded, one plain line each: how the loop ended in "
        "words, the checks that did not hold on the answer (else the rules that failed in the "
        "last pass: id and message), the error, what is missing, and the run's notes",
    )
    checks_not_held: list[str] = Field(
        default_factory=list,
        description="each check of the answer that did not hold on it, degraded or not, one "
        "plain line each: its rule id (and `(from the request)` for a constraint the request "
        "stated), what it asks, and what it found; every check with its verdict is in "
        "`result.final_answer.metadata.checks` (the run's outcome, docs/run-lifecycle.md)",
    )
    progress: Progress | None = None
    plan: Plan | None = Field(None, description="the plan awaiting approval, when it is")
    webhook: WebhookOutcome | None = Field(
        None, description="once answered, the outcome of the webhook the run named, if any"
    )
    forked_from: Lineage | None = Field(
        None, description="the run this one is a fork of, when it is one (docs/forks.md)"
    )
    links: Links


class RecentRun(BaseModel):
    correlation_id: str
    request: str = Field(description="the request, cut to 300 characters")
    submitted_at: str
    state: RunStage
    status: ExitReason | None = Field(None, description="how the loop ended, once answered")
    degraded: bool | None = None
    confidence: float | None = None
    total_passes: int | None = None
    elapsed_seconds: float | None = None
    links: Links


class RecentRuns(BaseModel):
    runs: list[RecentRun]


class ErrorBody(BaseModel):
    error: str = Field(
        description="bad_input, unauthorized, not_found, conflict, rate_limited, ..."
    )
    field: str | None = Field(description="the field, parameter or header at fault")
    reason: str = Field(description="what is wrong, and what to do")


class Health(BaseModel):
    status: Literal["ok", "ready", "unavailable"]
    reason: str | None = None
    open_event_streams: int | None = None
    watched_runs: int | None = None
    runs_indexed: int | None = None
    awaited_runs: int | None = Field(
        None, description="runs whose answer a request here is waiting for (`?wait=`)"
    )


Progress.model_rebuild()


def links(correlation_id: str) -> Links:
    base = f"/v1/runs/{correlation_id}"
    return Links(self=base, events=f"{base}/events", page=f"/#/runs/{correlation_id}")
