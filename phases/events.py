"""The events phases exchange, and the run state that travels inside them.

Workers keep nothing between events. What a later phase needs rides in the event's `RunState`,
except what would make events grow with the run: the passes' records and the steps' outputs are
kept once each in the run's records in Redis (phases.history), written by the commit of the hop
that made them, and read back by the phases that need them. So an event's size is bounded by
the run's plan and settings and what its hop changed, not by how many passes ran or how long
their outputs were. Each event names the logical stream it goes to (`STREAM`); the bus adds the
deployment's prefix.

Event ids of derived events are deterministic (a hash of the parent's id and the child's kind):
a handler that runs twice for the same input event produces the same ids, so the consumer's
dedupe by event id drops the copy instead of starting a second branch of the run.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from aeonloop.bus.codec import derived_id
from aeonloop.bus.keys import ANSWERS, AWAITING_APPROVAL, WEBHOOK_OUTCOMES
from aeonloop.checks.types import Check
from aeonloop.contracts import AttachedFile, Turn, Usage
from aeonloop.limits import (
    DEFAULT_EFFORT,
    DEFAULT_MAX_PASSES,
    MAX_FILES_CAP,
    MAX_REQUEST_CHARS,
    MAX_TOKEN_BUDGET,
    MAX_TOOLS,
    MAX_TTL_CAP,
    MAX_TURNS_CAP,
    Effort,
    ToolName,
)
from aeonloop.phases.models import (
    ExecutionPass,
    ExitReason,
    FinalAnswer,
    Plan,
    Rule,
    TaskProfile,
    pass_cap,
)
from aeonloop.phases.outcome import Outcome, outcome_of

DEFAULT_THRESHOLD = 0.8

E = TypeVar("E", bound="Event")

#: The phases whose calls belong to no pass: a fork takes their replies from its parent always,
#: but for Phase E's, which it takes only when nothing was changed (`Fork.replays`).
_BEFORE_PASSES = ("a", "b")


class Fork(BaseModel):
    """What a forked run takes from the run it was forked from (docs/forks.md).

    A fork is a new run of its parent's request that reads its parent's memoised replies
    (runs.memo.ForkedMemo) for every call before the fork point, so they cost no LLM call, and
    diverges from there with its change: other rules (in its request) or a plan given in place
    of the one Phase B would write (`plan`, which B takes; a fork with a plan runs every pass
    anew). Its request event and every event after carry it, so each hop knows whose replies
    it may take, and the run's lineage is read from its request record (phases.history).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The correlation id of the run forked.
    parent: str = Field(..., min_length=1, max_length=128)
    #: The first pass made anew; None: every pass the parent ran is taken.
    from_pass: int | None = Field(None, ge=1, le=MAX_TTL_CAP)
    #: Whether the fork changes anything (its rules or its plan): only a fork that changes
    #: nothing takes the parent's answer (Phase E's calls) as well.
    changed: bool = False
    #: The plan Phase B publishes instead of writing one; None once B has taken it.
    plan: Plan | None = None

    def replays(self, phase: str, pass_number: int | None) -> bool:
        """Whether the call of `phase` in pass `pass_number` (None: of no pass) is the parent's
        to answer: A's and B's always, a pass's when it comes before `from_pass`, E's only
        when the fork changes nothing and starts from no pass."""
        if phase in _BEFORE_PASSES:
            return True
        if pass_number is not None:
            return self.from_pass is None or pass_number < self.from_pass
        return not self.changed and self.from_pass is None


def utcnow() -> datetime:
    return datetime.now(UTC)


class RunState(BaseModel):
    """What a run has produced so far; each phase adds its part and passes it on.

    `passes` (and each plan step's `output`) never leave the process: they are kept in the
    run's history (phases.history) and loaded by what reads them, so a decoded run holds none
    until then. `pass_count` and `scores` always cover every pass.
    """

    model_config = ConfigDict(extra="forbid")

    request: str
    rules: list[Rule] = Field(default_factory=list)
    threshold: float = Field(DEFAULT_THRESHOLD, ge=0.0, le=1.0)
    #: The run's cap on passes (models.pass_cap): its request's max_ttl within AEON_MAX_PASSES.
    max_ttl: int = Field(DEFAULT_MAX_PASSES, ge=1, le=MAX_TTL_CAP)
    started_at: datetime = Field(default_factory=utcnow)
    profile: TaskProfile | None = None
    profile_is_default: bool = False
    ttl_remaining: int = Field(0, ge=0)
    plan: Plan | None = None
    pass_count: int = Field(0, ge=0)
    #: Each pass's score, oldest first: what stagnation is judged from (a number per pass,
    #: where the records it comes from would be kilobytes).
    scores: list[float] = Field(default_factory=list)
    #: The records of passes 1..`pass_count` once loaded (phases.history); not sent.
    passes: SkipJsonSchema[list[ExecutionPass]] = Field(default_factory=list, exclude=True)
    total_refinements: int = Field(0, ge=0)
    usage: Usage = Field(default_factory=Usage)
    #: CPU seconds its checks have taken so far, against AEON_RUN_CHECK_CPU_S (phases.evaluation).
    check_cpu_s: float = Field(0.0, ge=0)
    notes: list[str] = Field(default_factory=list)
    #: The run pauses after Phase B until its plan is approved (phases.approvals).
    approve_plan: bool = False
    #: Where its answer is POSTed when it ends (aeonloop.webhooks).
    webhook_url: str | None = None
    #: The paths of the files its request attached, in order; their contents are one record of
    #: the run's history (phases.history.load_files), not carried in every event.
    file_paths: list[str] = Field(default_factory=list, max_length=MAX_FILES_CAP)
    #: How many earlier turns its request carried; the turns are one record of the run's
    #: history (phases.history.load_turns), as its files are.
    turn_count: int = Field(0, ge=0, le=MAX_TURNS_CAP)
    #: The tools its steps may call, by name, narrowing the deployment's (None: all of them).
    #: A name no configured server offers adds nothing.
    tools: list[ToolName] | None = Field(None, max_length=MAX_TOOLS)
    #: The checks PREPARE made (phases.verification), by rule id: for each rule whose check is
    #: in words, and each rule the request implies (in `rules`, origin "request").
    prepared: dict[str, list[Check]] = Field(default_factory=dict)
    #: Phase A wrote a plain draft answer; its text is a record of the run's history
    #: (phases.history, DRAFT_RECORD), read by Phase E, which may publish it.
    has_draft: bool = False
    #: The draft's text once in hand (the hop that wrote it, or Phase E once it read it); not
    #: sent.
    draft: SkipJsonSchema[str | None] = Field(None, exclude=True)
    #: How hard the run works (limits.Effort): its request's, else the workers' AEON_EFFORT.
    effort: Effort = DEFAULT_EFFORT
    #: What the last pass showed, when it asks for a re-profile that Phase D left to the next
    #: pass, to make beside its steps (phases.phase_d.reprofile_where); None: none is due.
    reprofile_evidence: str | None = None
    #: The run it was forked from and where, when it is a fork (`Fork`).
    fork: Fork | None = None

    @model_validator(mode="after")
    def _count_inline_passes(self) -> RunState:
        """A run from a version that sent its passes inline: they count as run (and the next
        hop writes them to the history, phases.history.kept_passes)."""
        if len(self.passes) > self.pass_count:
            self.pass_count = len(self.passes)
            self.scores = [record.score for record in self.passes]
        return self

    def snapshot(self) -> RunState:
        """A copy that what a handler does to this run in place does not reach, but for its
        usage, which is shared: tokens a hop spent count even if the hop is abandoned.

        Cheap on purpose (taken before every hop): its lists are copied, not the models in
        them, which the phases replace instead of changing (a plan's steps, its passes)."""
        plan = self.plan.model_copy(update={"steps": list(self.plan.steps)}) if self.plan else None
        return self.model_copy(
            update={
                "plan": plan,
                "scores": list(self.scores),
                "passes": list(self.passes),
                "notes": list(self.notes),
            }
        )

    @property
    def last_pass(self) -> ExecutionPass | None:
        return self.passes[-1] if self.passes else None

    @property
    def history_loaded(self) -> bool:
        """Whether `passes` (and the outputs of executed steps) are all here."""
        return len(self.passes) == self.pass_count

    def add_pass(self, record: ExecutionPass) -> None:
        """Record the pass just run; its number is the next one."""
        self.passes.append(record)
        self.pass_count = record.pass_number
        self.scores.append(record.score)


class Event(BaseModel):
    """The envelope every event shares (docs/events.md, "The envelope")."""

    model_config = ConfigDict(extra="forbid")

    STREAM: ClassVar[str] = ""

    event_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    correlation_id: str
    causation_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    deadline: datetime

    def child(self, cls: type[E], **fields: Any) -> E:
        """The event made from this one: same run and deadline, deterministic id."""
        return cls(
            event_id=derived_id(self.event_id, cls.__name__),
            correlation_id=self.correlation_id,
            causation_id=self.event_id,
            deadline=self.deadline,
            **fields,
        )

    def expired(self, now: datetime | None = None) -> bool:
        return (now or utcnow()) >= self.deadline

    def to_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"))


class RequestSubmitted(Event):
    """A user's request, as the gateway (or any producer) puts it on the requests stream."""

    STREAM: ClassVar[str] = "requests"

    request: str = Field(..., min_length=1, max_length=MAX_REQUEST_CHARS)
    rules: list[Rule] = Field(default_factory=list)
    threshold: float = Field(DEFAULT_THRESHOLD, ge=0.0, le=1.0)
    #: The most passes this request allows its run; None: as many as the deployment allows
    #: (AEON_MAX_PASSES, which a larger value is also held to).
    max_ttl: int | None = Field(None, ge=1, le=MAX_TTL_CAP)
    #: The most tokens the run may spend; None: the workers' AEON_RUN_TOKEN_BUDGET, if set.
    token_budget: int | None = Field(None, ge=1, le=MAX_TOKEN_BUDGET)
    #: Pause after Phase B until a person approves (or edits) the plan.
    approve_plan: bool = False
    #: Where the answer is POSTed when the run ends (aeonloop.webhooks); gateways check it.
    webhook_url: str | None = Field(None, max_length=2_000)
    #: The tools its steps may call, by name, narrowing the deployment's; None: all of them.
    tools: list[ToolName] | None = Field(None, max_length=MAX_TOOLS)
    #: Files given as context to the prompts that make the plan, the steps and the answer
    #: (llm.session.WITH_FILES); gateways hold them to AEON_MAX_FILES and the byte limits.
    files: list[AttachedFile] = Field(default_factory=list, max_length=MAX_FILES_CAP)
    #: The earlier turns of the conversation this request continues, oldest first: context for
    #: the prompts that profile, plan, run the steps and answer (llm.session.WITH_TURNS);
    #: gateways hold them to AEON_MAX_TURNS and AEON_MAX_TURNS_CHARS.
    messages: list[Turn] = Field(default_factory=list, max_length=MAX_TURNS_CAP)
    #: Who asked: the tenant of the API token the request came with (aeonloop.tenants); None
    #: for a request made otherwise (`aeon ask`, the Python client).
    tenant: str | None = Field(None, max_length=64)
    #: The run this request forks, and from where (`Fork`); None for a request of its own.
    fork: Fork | None = None
    #: How hard its run works (limits.Effort); None: the workers' AEON_EFFORT. It travels with
    #: the request, as max_ttl does, so every worker honours it.
    effort: Effort | None = None

    @classmethod
    def new(
        cls,
        request: str,
        *,
        timeout: float,
        rules: list[Rule] | None = None,
        max_ttl: int | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        token_budget: int | None = None,
        approve_plan: bool = False,
        webhook_url: str | None = None,
        files: list[AttachedFile] | None = None,
        tools: list[str] | None = None,
        messages: list[Turn] | None = None,
        tenant: str | None = None,
        correlation_id: str | None = None,
        fork: Fork | None = None,
        effort: Effort | None = None,
    ) -> RequestSubmitted:
        """A fresh request with a deadline `timeout` seconds away, and its own correlation id
        unless its producer chose one (a gateway that notes the run before it is published).
        A fork's event id is derived from its correlation id (`fork_id`), so a fork submitted
        twice is one event, which the phases' dedupe takes once."""
        correlation_id = correlation_id or uuid.uuid4().hex
        ids = {"event_id": derived_id(correlation_id, cls.__name__)} if fork is not None else {}
        return cls(
            **ids,
            correlation_id=correlation_id,
            deadline=utcnow() + timedelta(seconds=timeout),
            request=request,
            rules=rules or [],
            max_ttl=max_ttl,
            threshold=threshold,
            token_budget=token_budget,
            approve_plan=approve_plan,
            webhook_url=webhook_url,
            files=files or [],
            tools=tools,
            messages=messages or [],
            tenant=tenant,
            fork=fork,
            effort=effort,
        )

    def initial_state(
        self,
        max_passes: int = DEFAULT_MAX_PASSES,
        token_budget: int | None = None,
        effort: Effort = DEFAULT_EFFORT,
    ) -> RunState:
        """The run this request starts, held to `max_passes` (Phase A gives AEON_MAX_PASSES),
        with its own token budget, else `token_budget` (AEON_RUN_TOKEN_BUDGET), and its own
        effort, else `effort` (AEON_EFFORT)."""
        return RunState(
            effort=self.effort or effort,
            request=self.request,
            rules=self.rules,
            threshold=self.threshold,
            max_ttl=pass_cap(self.max_ttl, max_passes),
            started_at=self.created_at,
            usage=Usage(token_budget=self.token_budget or token_budget),
            approve_plan=self.approve_plan,
            webhook_url=self.webhook_url,
            file_paths=[file.path for file in self.files],
            turn_count=len(self.messages),
            tools=self.tools,
            fork=self.fork,
        )


def fork_id(fork: Fork, rules: list[Rule] | None) -> str:
    """The correlation id of `fork` with `rules` (None: its parent's): derived from the parent
    and the change, so the same fork asked twice (a client's retry, a redelivered POST) is one
    run, answered once."""
    change = {
        "fork": fork.model_dump(mode="json"),
        "rules": None if rules is None else [rule.model_dump(mode="json") for rule in rules],
    }
    said = orjson.dumps(change, option=orjson.OPT_SORT_KEYS).decode()
    return derived_id(fork.parent, f"fork:{said}")


def fork_of(event: Event) -> Fork | None:
    """The fork `event`'s run is, if it is one: from its request, or from the run it carries."""
    if isinstance(event, RequestSubmitted):
        return event.fork
    run = getattr(event, "run", None)
    return run.fork if isinstance(run, RunState) else None


class TaskProfiled(Event):
    STREAM: ClassVar[str] = "profiled"
    run: RunState


class PlanReady(Event):
    STREAM: ClassVar[str] = "passes"
    run: RunState


class PlanAwaitingApproval(Event):
    """Phase B's plan, paused for a person's approval (`approve_plan`): no phase reads it; an
    approval turns it into PlanReady, a cancel or the deadline into LoopExited."""

    STREAM: ClassVar[str] = AWAITING_APPROVAL
    run: RunState


class PassRequested(Event):
    STREAM: ClassVar[str] = "passes"
    run: RunState


class PassCompleted(Event):
    """A pass ran and did not end the loop; `execution_pass` is its record (D decides from it;
    an event from a version that sent passes inline has none, and its run has them)."""

    STREAM: ClassVar[str] = "pass-completed"
    run: RunState
    execution_pass: ExecutionPass | None = None


class LoopExited(Event):
    """The C-loop is over, for whatever reason; Phase E answers every one of these.

    Made only by `phases.exits.loop_exited`, from the exit the phase decided there.
    """

    STREAM: ClassVar[str] = "loop-exited"

    reason: ExitReason
    detail: str = ""
    request: str = Field("", description="the request text, kept even when the run is lost")
    run: RunState | None = None
    #: The pass whose outcome ended the loop, when one did (Phase C's exits).
    execution_pass: ExecutionPass | None = None


class ExecutionResult(BaseModel):
    """What a run ended with (docs/requirements.md, FR-040): status, effort, the FinalAnswer."""

    model_config = ConfigDict(extra="forbid")

    #: How the loop ended: the `LoopExited.reason` Phase E answered.
    status: ExitReason
    degraded: bool
    total_passes: int
    total_refinements: int
    ttl_remaining: int
    usage: Usage
    elapsed_seconds: float
    final_answer: FinalAnswer

    @property
    def outcome(self) -> Outcome:
        """How the run ended, typed (phases.outcome): why it stopped, what was published, why it
        is degraded, the checks with their verdicts, the usage; read from the answer's metadata,
        where Phase E wrote it, with the status and degradation this result states."""
        recorded = outcome_of(self.final_answer.metadata)
        return recorded.model_copy(update={"stopped": self.status, "degraded": self.degraded})


class FinalAnswerReady(Event):
    STREAM: ClassVar[str] = ANSWERS
    result: ExecutionResult
    #: Where the answer is POSTed (aeonloop.webhooks), from the run's request.
    webhook_url: str | None = None
    #: The request it answers: with the answer, the turns a follow-up continues from
    #: (`aeon ask --continue`), for as long as the answer is kept. Empty from older versions.
    request: str = Field("", max_length=MAX_REQUEST_CHARS)

    @property
    def published_text(self) -> str:
        """The answer's text: what the run's answer text stream is settled on (bus.commit)."""
        return self.result.final_answer.answer_text


class WebhookSettled(Event):
    """The webhooks group is done with a run's answer (aeonloop.webhooks): `delivered` (a 2xx)
    or `failed` (given up on: the answer is in dead letters, `reason` says why). `tries`
    counts the POSTs made, over every delivery (a worker killed mid-way included), at most
    AEON_WEBHOOK_ATTEMPTS; `webhook_id` is the `webhook-id` every try carried."""

    STREAM: ClassVar[str] = WEBHOOK_OUTCOMES
    outcome: Literal["delivered", "failed"]
    tries: int
    webhook_id: str
    reason: str = ""


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        RequestSubmitted,
        TaskProfiled,
        PlanReady,
        PlanAwaitingApproval,
        PassRequested,
        PassCompleted,
        LoopExited,
        FinalAnswerReady,
        WebhookSettled,
    )
}
