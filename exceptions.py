"""Aeon's one exception tree: every error Aeon raises on purpose is an `AeonError`.

Callers catch `AeonError`, or one of its branches, instead of enumerating the modules that
raise; the branch says what kind of trouble it is:

    AeonError
    ├── UsageError (ValueError)      what a person gave cannot be used: the CLI exits 2
    │   ├── SettingsError              an AEON_* variable, or settings that cannot work together
    │   ├── BadInput                   a request, an option, a rules file
    │   │   └── ParentGone (LookupError)   a run to fork that is unknown or whose records are
    │   │                                  gone (the HTTP API's 404)
    │   ├── ToolsNotReady              at start, an MCP server of AEON_MCP_CONFIG cannot start
    │   │                              or answer (tools/)
    │   └── ForeignEventId             an HTTP reader's event id that names another run
    ├── BusError                     the Redis Streams transport
    │   ├── DecodeError                an entry that is not an event this consumer accepts
    │   └── HistoryMissing (LookupError)  a record a run refers to is gone from Redis
    ├── LLMFailure                   an LLM call gave nothing usable: a handler degrades its run
    │   ├── LLMError                   the call failed (after the adapter's retries)
    │   │   └── ContextLengthError       the prompt is longer than the model's window
    │   └── ReplyError                 the model answered, but not usably
    │       ├── TruncatedReply           a JSON reply cut at the length limit
    │       └── LLMOutputError           a reply still unusable after its one repair
    ├── LLMUnreachable               the LLM server stayed away until the deadline: the run's
    │                                time ran out (deadline_exceeded), no call failed
    ├── RunStopped                   the run may start no further LLM call: it ends at this hop
    │   ├── RunCancelled               someone cancelled it (cancelled)
    │   └── BudgetExhausted            its token budget cannot pay for the next call
    │                                  (budget_exhausted)
    ├── LLMNotReady                  at start, the LLM endpoint does not answer or lacks the
    │                                model: the CLI exits 6
    ├── PromptError                  the prompt subsystem (prompts/)
    │   ├── PromptNotFoundError, RenderingError, NoOutputModelError, TemplateNotFound
    │   └── JSONExtractionError        no JSON the output model could read in a reply
    ├── LocalRedisError (RuntimeError)  a Redis server run on this machine (servers/)
    │   ├── RedisServerError           redis-server not found, or it did not start
    │   └── LocalClusterError          a local cluster did not start or converge
    ├── WebhookFailed                a webhook try that did not land: tried again, then
    │                                dead-lettered (webhooks/delivery.py)
    ├── ToolCallFailed               one tool call did not answer (timeout, transport): the
    │                                step fails with the reason
    ├── PatternTimedOut (TimeoutError)  a check's pattern ran out of its time bound: the check
    │                                fails with that reason (checks/patterns.py)
    ├── AnswerTimeout (TimeoutError)  no answer within the wait: it may still come
    └── ApiError                     the HTTP API refuses a request (status, field, reason)

Each class is defined here and imported by the module that raises it, which is also where
callers have always imported it from (`aeonloop.settings.SettingsError`,
`aeonloop.prompts.errors.PromptError`, ...). Where a class also subclasses a builtin, callers
rely on it (a `BadInput` is a `ValueError` to argparse's type functions). The OpenAI adapter's
own retry signal (`_RetryLater`, an `LLMError`) stays private to it: it never leaves the adapter.

This module imports only the standard library: `aeonloop.prompts` is usable on its own, under
Pydantic 1.10 too (docs/requirements.md, FR-014A), and imports its errors from here.
"""

from __future__ import annotations

from collections.abc import Mapping


class AeonError(Exception):
    """Base of every error Aeon raises on purpose."""


# -- what a person gave Aeon -------------------------------------------------------------------


class UsageError(AeonError, ValueError):
    """Something a person gave Aeon (a setting, an option, a request, a header) that it cannot
    use. The message names it and says what to do; the CLI prints it as one line and exits 2,
    and nothing was published."""


class SettingsError(UsageError):
    """A setting that cannot be used; the message names the variable and what to do."""


class BadInput(UsageError):
    """Input the gateway refuses; the message says what is wrong and how to fix it."""


class TooLarge(BadInput):
    """Input over a size limit (an attached file, the files together, the request's event):
    refused like any bad input, and answered 413 rather than 422 by the HTTP API."""


class ParentGone(BadInput, LookupError):
    """A run asked to be forked that cannot be: unknown, its records expired with its answer
    (AEON_ANSWER_KEEP_S), or its recorded replies gone (AEON_FORK_KEEP_S past its deadline).
    The CLI says so in one line and exits 2; the HTTP API answers 404."""

    def __init__(self, correlation_id: str, why: str) -> None:
        super().__init__(f"run {correlation_id} cannot be forked: {why}; nothing was published")


class ForeignEventId(UsageError):
    """A reader's event id that names an entry of another run."""


# -- the bus -----------------------------------------------------------------------------------


class BusError(AeonError):
    """The Redis Streams transport could not do what was asked with what it found."""


class DecodeError(BusError):
    """An entry that is not an event this consumer accepts; it goes to dead letters at once."""


class HistoryMissing(BusError, LookupError):
    """A record the run refers to is not in Redis: it expired with the run's answer, or was
    deleted. Phase C cannot go on without it (the run ends as failed, with this reason);
    Phase E and the run page do without it and say so."""

    def __init__(self, correlation_id: str, names: list[str]) -> None:
        super().__init__(
            f"run {correlation_id}: no history record {', '.join(names)} in Redis "
            "(expired after AEON_ANSWER_KEEP_S, or deleted)"
        )


# -- the LLM -----------------------------------------------------------------------------------


class LLMFailure(AeonError):
    """An LLM call gave nothing usable: the call failed (`LLMError`), or its reply could not be
    used (`ReplyError`). A phase handler catches this branch and degrades its run; anything
    else (a missing template, a rendering bug) is a defect, left to the bus's retries."""


class LLMError(LLMFailure):
    """An LLM call failed for good (after the adapter's own retries, or not worth retrying).

    `transient` says the cause was the transport or the server's load (429, 5xx, an empty
    reply, a connection that failed), not the prompt or the model's judgement: the same call may
    work later, and a failure like this is no evidence about the task. `unreachable` says the
    server itself could not be reached or answered only 5xx: retried, it closes the adapter's
    outage gate (llm.outage) instead of failing the call.
    """

    def __init__(self, message: str, *, transient: bool = False, unreachable: bool = False) -> None:
        super().__init__(message)
        self.transient = transient or unreachable
        self.unreachable = unreachable


class ContextLengthError(LLMError):
    """The server refused the prompt as longer than its context window.

    `limit_tokens` is the window the server named in its message, when it named one; the caller
    may fit the prompt to a tighter budget and try once more.
    """

    def __init__(self, message: str, *, limit_tokens: int | None = None) -> None:
        super().__init__(message, transient=False)
        self.limit_tokens = limit_tokens


class ReplyError(LLMFailure):
    """The model answered, but its reply cannot be used as the prompt's output."""


class TruncatedReply(ReplyError):
    """A JSON reply cut at the model's length limit: whatever it holds is not the whole answer."""

    def __init__(self, prompt_id: object) -> None:
        super().__init__(f"{prompt_id!s}: the reply was cut off at the model's length limit")


class UnusableReply(ReplyError):
    """A reply that fits its output model but is not the model's answer: a field repeats the
    prompt's own instruction or example text, or an id is not a clean id (prompts.echo)."""

    def __init__(self, prompt_id: object, reason: str) -> None:
        self.reason = reason
        super().__init__(f"{prompt_id!s}: {reason}")


class LLMOutputError(ReplyError):
    """The LLM's reply could not be turned into the prompt's output model, even after repair."""

    def __init__(self, prompt_id: object, error: Exception) -> None:
        self.prompt_id = prompt_id
        self.error = error
        super().__init__(f"{prompt_id!s}: unusable reply after one repair ({error})")


class LLMUnreachable(AeonError):
    """The LLM server stayed unreachable until the request's deadline (llm.outage).

    Not an LLMFailure on purpose: the phases count one as a failed call, while this says
    nothing about the run but that its time ran out, so it ends as `deadline_exceeded`.
    """


class RunStopped(AeonError):
    """The run may start no further LLM call, so the hop that holds it ends it (phases.exits).

    Not an LLMFailure on purpose: a phase would count one as a failed call and go on, where the
    run must stop here and be answered from what exists.
    """


class RunCancelled(RunStopped):
    """Someone cancelled the run (`aeon cancel`, `POST /v1/runs/{id}/cancel`)."""

    def __init__(self, correlation_id: str) -> None:
        super().__init__(f"run {correlation_id} was cancelled")
        self.correlation_id = correlation_id


class BudgetExhausted(RunStopped):
    """The run's token budget cannot pay for the next call: what it has spent, plus what the
    call would take at most (its prompt, estimated, and its reply budget), is over it."""

    def __init__(self, prompt_id: object, spent: int, cost: int, budget: int) -> None:
        super().__init__(
            f"the token budget of {budget:,} cannot pay for {prompt_id!s}: {spent:,} tokens "
            f"spent, and the call may take up to {cost:,} more"
        )
        self.spent = spent
        self.cost = cost
        self.budget = budget


class LLMNotReady(AeonError):
    """At start, the configured LLM endpoint does not answer or does not serve the model.

    Its text is the one line the CLI prints (exit 6): the URL, what went wrong, what to do.
    """


# -- prompts (docs/requirements.md, "Prompt API contract", Exceptions) ---------------------------


class PromptError(AeonError):
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


# -- Redis servers run on this machine ----------------------------------------------------------


class LocalRedisError(AeonError, RuntimeError):
    """A Redis server run on this machine (servers/: the embedded one, a local cluster) did not
    start, or cannot do what was asked of it; the message holds a log tail when there is one."""


class RedisServerError(LocalRedisError):
    """redis-server could not be found, or did not start (the message holds its log tail).

    `port_taken` says its port was in use, so a start on another port may work.
    """

    def __init__(self, message: str, *, port_taken: bool = False) -> None:
        super().__init__(message)
        self.port_taken = port_taken


class LocalClusterError(LocalRedisError):
    """The cluster did not start or converge in time (the message holds a node's log tail)."""


# -- gateways --------------------------------------------------------------------------------


class WebhookFailed(AeonError):
    """A webhook try that did not land (no 2xx, a redirect, no answer, a URL no longer
    allowed): the bus tries again with backoff, then dead-letters the answer's delivery."""


class QuotaExceeded(AeonError):
    """A tenant is past a quota (aeonloop.tenants.ledger): `quota` names its variable
    (AEON_TENANT_MAX_RUNS, AEON_TENANT_DAILY_TOKENS), `reason` is the one line its client is
    told, `retry_after_s` when to try again. The HTTP API answers it 429, and publishes
    nothing."""

    def __init__(self, quota: str, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.quota = quota
        self.reason = reason
        self.retry_after_s = retry_after_s


class ToolsNotReady(UsageError):
    """At start, an MCP server that AEON_MCP_CONFIG names cannot start or answer, or the file
    cannot be used: one line naming the server and why. No plan is made with tools that are not
    there."""


class ToolCallFailed(AeonError):
    """One tool call gave no result: it timed out, or its server could not be reached. The
    step fails with this reason, as a step whose LLM call failed does."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        #: The call did not answer within its timeout (it may still have run).
        self.timed_out = timed_out


class PatternTimedOut(AeonError, TimeoutError):
    """A check's pattern ran out of its time bound (checks.patterns.bounded_search); the check
    that ran it fails, saying so."""

    def __init__(self, timeout: float) -> None:
        super().__init__(f"ran out of its {timeout:g} s time bound")
        self.timeout = timeout


class AnswerTimeout(AeonError, TimeoutError):
    """No answer within the wait; the run may still answer, and its answer be fetched later."""

    def __init__(self, correlation_id: str, timeout: float) -> None:
        self.correlation_id = correlation_id
        super().__init__(
            f"no answer for {correlation_id} within {timeout:g}s; it may still come: "
            f"`aeon answer {correlation_id}` fetches it later"
        )


class ApiError(AeonError):
    """Refuse an HTTP request with `status`, naming the `field` at fault (None: no one field);
    gateway.http.errors turns it into the response."""

    def __init__(
        self,
        status: int,
        field: str | None,
        reason: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.field = field
        self.reason = reason
        self.headers = dict(headers or {})
