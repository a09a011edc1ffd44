"""The OpenAPI 3.1 document of the HTTP API (`/openapi.json`, shown at `/docs`).

The schemas come from the models the API validates and returns with (gateway.http.models and
the pipeline's ExecutionResult), so the document cannot drift from the code on shapes; the
operations are written out here, with the words a reader needs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from aeonloop.gateway.http.chat import RUN_ID_HEADER
from aeonloop.gateway.http.chat_models import (
    IGNORED_FIELDS,
    MODEL_ID,
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    Model,
    ModelList,
    OpenAIError,
)
from aeonloop.gateway.http.errors import CHAT_PATH, MODELS_PATH
from aeonloop.gateway.http.models import (
    MAX_RECENT,
    MAX_WAIT_S,
    Approval,
    ErrorBody,
    EventFrame,
    ForkRequest,
    Health,
    RecentRuns,
    Run,
    RunRequest,
    StepEvent,
)
from aeonloop.gateway.http.run_steps import EVENT_ID_PATTERN
from aeonloop.limits import DEFAULT_MAX_PASSES
from aeonloop.prompts.registry import STEP_ID_PATTERN
from aeonloop.tenants.ledger import UsageReport

_REF = "#/components/schemas/{model}"
#: What the API takes is described as validated, what it returns as serialized.
_MODELS: list[tuple[type[BaseModel], JsonSchemaMode]] = [
    (RunRequest, "validation"),
    (Approval, "validation"),
    (ForkRequest, "validation"),
    (ChatRequest, "validation"),
    *(
        (model, "serialization")
        for model in (
            Run,
            RecentRuns,
            StepEvent,
            EventFrame,
            ErrorBody,
            Health,
            ChatCompletion,
            ChatCompletionChunk,
            ModelList,
            Model,
            OpenAIError,
            UsageReport,
        )
    ),
]
_RUN_ID = {
    "name": "correlation_id",
    "in": "path",
    "required": True,
    "description": "the run's correlation id, as POST /v1/runs returned it",
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"},
}
_AUTH = {"401": "no bearer token, or not one of AEON_HTTP_TOKENS (only when tokens are set)"}
_LIMITED = {"429": "too many requests from this client (AEON_HTTP_RATE_PER_S); see Retry-After"}
_REDIS_DOWN = {"503": "Redis does not answer"}
#: Where a run is admitted, a 429 may also be its tenant's quota (aeonloop.tenants).
_QUOTA = {
    "429": "too many requests from this client (AEON_HTTP_RATE_PER_S), or the token's tenant "
    "is past a quota (AEON_TENANT_MAX_RUNS, AEON_TENANT_DAILY_TOKENS), which the reason names; "
    "see Retry-After"
}


def openapi_document(max_passes: int = DEFAULT_MAX_PASSES) -> dict[str, Any]:
    """The document of a server whose AEON_MAX_PASSES is `max_passes`: a request's `max_ttl`
    above it is refused, so the schema says so."""
    schemas = _schemas()
    for body in ("RunRequest", "ChatRequest"):
        schemas[body]["properties"]["max_ttl"]["maximum"] = max_passes
    _chat_request(schemas["ChatRequest"])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Aeon",
            "version": "1",
            "description": "Submit requests to Aeon's multi-pass reasoning pipeline, follow their "
            "steps live, and read their answers. Errors are JSON: "
            '{"error", "field", "reason"}; on the endpoints that speak OpenAI\'s Chat '
            'Completions API, its shape: {"error": {"message", "type", "param", "code"}}.',
        },
        "paths": _paths(),
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    }


def _schemas() -> dict[str, Any]:
    _, definitions = models_json_schema(_MODELS, ref_template=_REF)
    return _as_the_host_reads(definitions["$defs"])


def _as_the_host_reads(schema: Any) -> Any:
    """`schema` without the step id's pattern and length, which a plan given to the API shares
    with the model's reply (prompts.registry.PlanBody) but only a server's grammar enforces
    (`schema_only`): the host takes any id a person writes ("only", "intro"), so the API's
    schema says what it accepts, not what a model is held to."""
    if isinstance(schema, list):
        return [_as_the_host_reads(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    kept = {key: _as_the_host_reads(value) for key, value in schema.items()}
    if kept.get("pattern") == STEP_ID_PATTERN:
        del kept["pattern"]
        kept.pop("maxLength", None)
    return kept


def _chat_request(schema: dict[str, Any]) -> None:
    """What JSON Schema can say of a chat request beyond its model: the one model, the standard
    fields taken and ignored, and no other field."""
    schema["properties"]["model"]["enum"] = [MODEL_ID]
    for name in sorted(IGNORED_FIELDS):
        schema["properties"][name] = {"description": "OpenAI's; taken, and ignored"}
    schema["additionalProperties"] = False


def _ref(model: str) -> dict[str, str]:
    return {"$ref": _REF.format(model=model)}


def _json(model: str) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(model)}}


def _responses(
    described: dict[str, tuple[str, str | None]],
    errors: dict[str, str] | None = None,
    error_body: str = "ErrorBody",
) -> dict[str, Any]:
    """OpenAPI responses from `{"200": ("what it means", "Model" or None)}`, and `errors`
    (`{"404": "what it means"}`), whose bodies are all `error_body`."""
    every = {**described, **{code: (words, error_body) for code, words in (errors or {}).items()}}
    responses: dict[str, Any] = {}
    for code, (description, model) in every.items():
        responses[code] = {"description": description}
        if model:
            responses[code]["content"] = _json(model)
    return responses


def _paths() -> dict[str, Any]:
    guarded = {**_AUTH, **_LIMITED, **_REDIS_DOWN}
    return {
        "/v1/runs": {
            "post": {
                "summary": "Submit a request",
                "description": "Checks the body as `aeon ask` checks its input and publishes "
                "nothing when a field is wrong (422 names it). Returns 202 with the run's "
                "correlation id and links at once, or with `?wait=N` the result (200) if it "
                "comes within N seconds (else 202 all the same; at once with `approve_plan`, "
                "as the run pauses for its plan's approval before any answer).",
                "parameters": [
                    {
                        "name": "wait",
                        "in": "query",
                        "required": False,
                        "description": f"seconds to wait for the answer, 0 to {MAX_WAIT_S:g}",
                        "schema": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_S},
                    }
                ],
                "requestBody": {"required": True, "content": _json("RunRequest")},
                "responses": _responses(
                    {
                        "200": ("answered within `wait`", "Run"),
                        "202": ("accepted; follow `links.events` or poll `links.self`", "Run"),
                    },
                    {
                        "413": "the body is over AEON_HTTP_MAX_BODY_BYTES, an attached file "
                        "over AEON_MAX_FILE_BYTES, the files together over "
                        "AEON_MAX_FILES_BYTES, the earlier turns together over "
                        "AEON_MAX_TURNS_CHARS, or the request's event over AEON_MAX_EVENT_BYTES",
                        "415": "the body is not sent as application/json",
                        "422": "a field is wrong (a file that is not text, more files than "
                        "AEON_MAX_FILES, more earlier turns than AEON_MAX_TURNS, ...): `field` "
                        "and `reason` say which and why",
                        **guarded,
                        **_QUOTA,
                    },
                ),
            },
            "get": {
                "summary": "The newest runs",
                "description": "Newest first, from the requests streams, each with its stored "
                "answer's status, confidence and passes.",
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_RECENT},
                    }
                ],
                "responses": _responses(
                    {"200": ("the runs", "RecentRuns")}, {"422": "a bad limit", **guarded}
                ),
            },
        },
        "/v1/runs/{correlation_id}": {
            "get": {
                "summary": "A run's result, or its progress",
                "parameters": [_RUN_ID],
                "responses": _responses(
                    {
                        "200": ("answered: `result` is the ExecutionResult with the answer", "Run"),
                        "202": (
                            "running: `progress.latest` is its newest step; or "
                            "`awaiting_approval` with its `plan`, or `cancelling`",
                            "Run",
                        ),
                    },
                    {"404": "unknown here, or expired", "422": "not a correlation id", **guarded},
                ),
            }
        },
        "/v1/runs/{correlation_id}/events": {
            "get": {
                "summary": "Follow a run: Server-Sent Events",
                "description": "One event per step: `profile`, `plan` (as Phase B made it: "
                "`planned_steps` counts B's steps, and a step a later pass's refinement added, "
                "changed or removed says so in `added_in_pass`, `changed_in_pass` or "
                "`removed_in_pass`), `pass` (one per pass, "
                "with its score and each step's output), `exit`, `answer` (the "
                "ExecutionResult); the stream ends after the answer. Between the steps, the "
                "answer's text as it is written: `answer_delta` and `answer_reset` events, "
                "whose deltas since the last reset join to the answer's `answer_text` (a "
                "reader that comes once the run is answered gets the answer alone). Each "
                "event's `event` is its kind, its `data` one line of JSON, its `id` "
                "`<step>@<Redis entry id>` (then `~<entry id>` of the last answer text entry "
                "sent), and the first carries `retry`. Reconnect with `Last-Event-ID` to get "
                "exactly the events after that one, read back from Redis by any gateway; "
                "after the answer that is 204.",
                "parameters": [
                    _RUN_ID,
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "description": "the id of the last event received",
                        "schema": {"type": "string", "pattern": f"^{EVENT_ID_PATTERN}$"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "the stream; each event as StepEvent describes",
                        "content": {"text/event-stream": {"schema": _ref("EventFrame")}},
                    },
                    **_responses(
                        {"204": ("every step was sent already: nothing follows", None)},
                        {
                            "404": "unknown here, or expired",
                            "422": "not a correlation id, or a Last-Event-ID not from here",
                            **guarded,
                        },
                    ),
                },
            }
        },
        "/v1/runs/{correlation_id}/cancel": {
            "post": {
                "summary": "Cancel a run",
                "description": "The run stops at its next step: a worker holding one of its "
                "LLM calls abandons it, and the run is answered with status `cancelled`, made "
                "from what it has without another LLM call. Cancelling again is the same; a "
                "cancel that loses a race with the answer changes nothing.",
                "parameters": [_RUN_ID],
                "responses": _responses(
                    {"202": ("recorded: the run's state is `cancelling` until answered", "Run")},
                    {
                        "404": "unknown here, or expired",
                        "409": "the run already has its answer, which stays",
                        "422": "not a correlation id",
                        **guarded,
                    },
                ),
            }
        },
        "/v1/runs/{correlation_id}/approve": {
            "post": {
                "summary": "Approve a paused run's plan, or edit it",
                "description": "For a run submitted with `approve_plan`, paused in the state "
                "`awaiting_approval` (GET shows its `plan`). Without a body, or with "
                '`{"plan": null}`, the plan runs as it is; with a plan, that one runs '
                "instead, checked as Phase B checks a model's. A cancel rejects the plan.",
                "parameters": [_RUN_ID],
                "requestBody": {"required": False, "content": _json("Approval")},
                "responses": _responses(
                    {"202": ("approved: the run goes on to its passes", "Run")},
                    {
                        "404": "unknown here, or expired",
                        "409": "the run is not awaiting approval (not yet, or no longer)",
                        "413": "the body is over AEON_HTTP_MAX_BODY_BYTES",
                        "415": "a body not sent as application/json",
                        "422": "not a correlation id, or a plan that cannot run",
                        **guarded,
                    },
                ),
            }
        },
        "/v1/runs/{correlation_id}/fork": _fork_path(guarded),
        **_chat_paths(guarded),
        "/v1/usage": _usage_path(guarded),
        "/healthz": {
            "get": {
                "summary": "The process is up",
                "description": "Also how many event streams are open and runs watched.",
                "security": [{}],
                "responses": _responses({"200": ("up", "Health")}),
            }
        },
        "/readyz": {
            "get": {
                "summary": "Redis answers",
                "security": [{}],
                "responses": _responses(
                    {
                        "200": ("ready", "Health"),
                        "503": ("Redis does not answer, or a reader of it stopped", "Health"),
                    }
                ),
            }
        },
    }


def _fork_path(guarded: dict[str, str]) -> dict[str, Any]:
    """`POST /v1/runs/{id}/fork` (docs/forks.md)."""
    return {
        "post": {
            "summary": "Fork a run",
            "description": "Starts a new run of the run's request that takes its recorded LLM "
            "replies for every call before `from_pass` (every pass without it), with no LLM "
            "call, and goes on with the rules or the plan given. Without a body, or with "
            "`{}`, the fork changes nothing and publishes the same answer without a call. The "
            "fork's id is derived from the run and the change: the same fork asked again is "
            "the same run (200 with its result once answered). `GET` on the fork shows "
            "`forked_from`.",
            "parameters": [_RUN_ID],
            "requestBody": {"required": False, "content": _json("ForkRequest")},
            "responses": _responses(
                {
                    "202": ("forked: the fork's state is `running`", "Run"),
                    "200": ("the same fork, answered before", "Run"),
                },
                {
                    "404": "the run cannot be forked: unknown here, its records expired "
                    "(AEON_ANSWER_KEEP_S), or its replies gone (AEON_FORK_KEEP_S past its "
                    "deadline)",
                    "413": "the body is over AEON_HTTP_MAX_BODY_BYTES",
                    "415": "a body not sent as application/json",
                    "422": "not a correlation id, or a field that cannot be used (named)",
                    **guarded,
                    **_QUOTA,
                },
            ),
        }
    }


def _usage_path(guarded: dict[str, str]) -> dict[str, Any]:
    """The cost ledger's totals (aeonloop.tenants, docs/scaling-out.md)."""
    return {
        "get": {
            "summary": "A day's tokens and cost, per tenant and model",
            "description": "The runs answered in a day (UTC), per tenant and model: their "
            "tokens by kind (input, cached_input, output) and their cost by the price table "
            "(AEON_PRICES, AEON_PRICES_FILE; null for a model it does not price). A token "
            "sees its own tenant's totals; an API with no tokens shows every tenant's.",
            "parameters": [
                {
                    "name": "day",
                    "in": "query",
                    "required": False,
                    "description": "the day, YYYY-MM-DD (UTC); today if left out",
                    "schema": {"type": "string", "format": "date"},
                }
            ],
            "responses": _responses(
                {"200": ("the day's totals", "UsageReport")},
                {"422": "a day that is not a date", **guarded},
            ),
        }
    }


def _chat_paths(guarded: dict[str, str]) -> dict[str, Any]:
    """OpenAI's Chat Completions API over runs (gateway.http.chat, docs/chat.md)."""
    run_id = {
        RUN_ID_HEADER: {
            "description": "the run's correlation id",
            "schema": {"type": "string"},
        }
    }
    return {
        CHAT_PATH: {
            "post": {
                "summary": "A run, asked as OpenAI's Chat Completions API asks",
                "description": "The last message is the request, the ones before it its "
                "earlier turns; a run's options come as extra fields. Checked as POST /v1/runs "
                "checks a run, and nothing is published for a request refused. With `stream: "
                "false`, the answer as a `chat.completion` once the run has it; with `stream: "
                "true`, `chat.completion.chunk` events: the run's progress lines as "
                "`reasoning_content` and `reasoning` (vLLM's name), the answer's text as "
                "`content`, a chunk with "
                "`finish_reason` (and the run's outcome as `aeon`), the usage if "
                "`stream_options.include_usage`, then `data: [DONE]`. A client that leaves "
                "before the answer has its run cancelled, unless "
                "AEON_CHAT_FINISH_ON_DISCONNECT. Errors are OpenAI's shape (OpenAIError).",
                "requestBody": {"required": True, "content": _json("ChatRequest")},
                "responses": {
                    "200": {
                        "description": "the completion, or with `stream: true` its chunks",
                        "headers": run_id,
                        "content": {
                            **_json("ChatCompletion"),
                            "text/event-stream": {"schema": _ref("ChatCompletionChunk")},
                        },
                    },
                    **_responses(
                        {},
                        {
                            "400": "a field is wrong, or asks what Aeon cannot do (n above 1, "
                            "JSON output, log probabilities, audio, functions), or approve_plan "
                            "with stream; or the Host is not served",
                            "404": "a model other than `aeon`",
                            "413": "the body, a file, the files or the turns over their limits",
                            "415": "the body is not sent as application/json",
                            "504": "no answer came by the run's deadline and its grace",
                            **guarded,
                            **_QUOTA,
                        },
                        "OpenAIError",
                    ),
                },
            }
        },
        MODELS_PATH: {
            "get": {
                "summary": "The models: `aeon`, the one",
                "responses": _responses({"200": ("the list", "ModelList")}, guarded, "OpenAIError"),
            }
        },
        MODELS_PATH + "/{model}": {
            "get": {
                "summary": "A model: `aeon`",
                "parameters": [
                    {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": _responses(
                    {"200": ("the model", "Model")},
                    {"404": "a model other than `aeon`", **guarded},
                    "OpenAIError",
                ),
            }
        },
    }
