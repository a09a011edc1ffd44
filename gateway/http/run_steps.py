"""A run as a list of steps a person can follow: profile, plan, each pass, the exit, the answer.

The HTTP API shows a run this way (`GET /v1/runs/{id}` and its Server-Sent Events). Every
progress event of a run carries the whole run so far (`RunState`), so the newest one alone
gives every step up to it: a reader that missed events, or comes late, loses nothing by
reading only the newest. The steps are a pure function of (newest run event, answer), which
is what makes the event stream resumable: the steps after a given one are the same whichever
process works them out, and whenever.

Each step has a key that orders it among the run's steps (`profile` < `awaiting_approval` (a
run paused for its plan's approval, while it is: the plan it would run) < `plan` (the plan it
runs, once approved) < `pass-1` <
`pass-2` … < `exit` < `answer` < `webhook`: a run that named a webhook ends with its outcome,
`webhook_delivered` or `webhook_failed`). On the wire a step's id is `<key>@<entry id>`: the
key says which steps the reader has, the Redis stream entry id says where in the run's shard the
newest event it was made from sits, so a process that never saw the run can find the rest
from there (gateway.http.run_feed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from aeonloop.gateway.progress import Phase
from aeonloop.phases import render
from aeonloop.phases.events import (
    Event,
    ExecutionResult,
    LoopExited,
    PassCompleted,
    PassRequested,
    PlanAwaitingApproval,
    PlanReady,
    RequestSubmitted,
    RunState,
    TaskProfiled,
    WebhookSettled,
)
from aeonloop.phases.models import ExecutionPass, RefinementAction, ToolCall

#: A step's kind: the SSE `event:` field of `/v1/runs/{id}/events` (gateway.http.models).
StepKind = Literal[
    "profile",
    "awaiting_approval",
    "plan",
    "pass",
    "exit",
    "answer",
    "no_answer",
    "webhook_delivered",
    "webhook_failed",
]
#: The answer's text as it is written (runs.answer_text), sent between a run's steps: a piece
#: of it, or the text so far set aside.
TextKind = Literal["answer_delta", "answer_reset"]
ANSWER_DELTA: TextKind = "answer_delta"
ANSWER_RESET: TextKind = "answer_reset"
#: Sent while nothing of the run has come for gateway.progress.WAITING_EVERY_S: what it waits
#: for (`{line}`), with no SSE id, since it marks no place in the run.
WaitingKind = Literal["waiting"]
WAITING: WaitingKind = "waiting"
#: The SSE `event:` field's values: a step's kind, the answer's text, or a waiting line.
EventKind = Literal[StepKind, TextKind, WaitingKind]
#: The phase whose progress line a step is, for the waiting line that may follow it (a run
#: paused for its plan's approval waits for a person, and gets none).
PHASE_OF_STEP: dict[str, Phase] = {"profile": "A", "plan": "B", "pass": "C", "exit": "E"}
#: A run ends with its answer, or, past its deadline without one, with `no_answer`: either is
#: its last step.
_KIND_ORDER: dict[str, int] = {
    "start": -1,
    "profile": 0,
    "awaiting_approval": 1,
    "plan": 2,
    "pass": 3,
    "exit": 4,
    "answer": 5,
    "no_answer": 5,
    "webhook": 6,
    "webhook_delivered": 6,
    "webhook_failed": 6,
}
#: Where a reader is in a run: the key of the last step it has.
Order = tuple[int, int]
BEFORE_ANY_STEP: Order = (-1, 0)
ANSWERED: Order = (_KIND_ORDER["answer"], 0)
#: The step after which a run that named a webhook has nothing more to say.
WEBHOOK_SETTLED: Order = (_KIND_ORDER["webhook"], 0)
#: A step's id as this API gives it out: each part of the entry id at most 19 digits, so never
#: past the 64 bits Redis takes (a larger one would read as Redis failing). The OpenAPI document
#: gives it as Last-Event-ID's pattern.
EVENT_ID_PATTERN = (
    r"(start|profile|awaiting_approval|plan|pass-([1-9]\d{0,5})|exit|answer|no_answer|webhook)"
    r"@((\d{1,19})-(\d{1,19}))(~((\d{1,19})-(\d{1,19})))?"
)
#: The step part of the id of an answer text event sent before any step (`start`: none yet).
START = "start@0-0"
_EVENT_ID = re.compile(EVENT_ID_PATTERN)

#: How far along its run each progress event type is, told by its name alone (the run feed
#: ranks entries without decoding them); see `progress_rank`.
TYPE_RANK: dict[str, int] = {
    RequestSubmitted.__name__: 0,
    TaskProfiled.__name__: 1,
    PlanReady.__name__: 2,
    PlanAwaitingApproval.__name__: 2,  # the same run as the PlanReady its approval makes
    PassRequested.__name__: 3,
    PassCompleted.__name__: 3,
    LoopExited.__name__: 4,
}


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    #: The pass's number for a pass; 0 for the other kinds.
    number: int
    data: dict[str, Any]

    @property
    def key(self) -> str:
        if self.kind.startswith("webhook_"):
            return "webhook"
        return f"pass-{self.number}" if self.kind == "pass" else self.kind

    @property
    def order(self) -> Order:
        return (_KIND_ORDER[self.kind], self.number)


@dataclass(frozen=True, slots=True)
class EventId:
    """An event's id on the wire, as a reader sends it back in Last-Event-ID: the last step it
    has, `<key>@<entry id>` (`start@0-0`: none yet), then, once it has some of the answer's
    text, `~<entry id>` of the last answer text entry it has (runs.answer_text)."""

    order: Order
    entry_id: str
    #: The last answer text entry the reader has; None: none.
    text_after: str | None = None

    @property
    def step(self) -> str:
        """The step part, as given out: what an answer text event's id starts with."""
        return f"{self.key}@{self.entry_id}"

    @property
    def key(self) -> str:
        kind = next(k for k, order in _KIND_ORDER.items() if order == self.order[0])
        return f"pass-{self.order[1]}" if kind == "pass" else kind

    @classmethod
    def parse(cls, text: str) -> EventId:
        """ValueError when `text` is not an id this API gave out."""
        match = _EVENT_ID.fullmatch(text.strip())
        if match is None:
            raise ValueError(
                f"{text[:80]!r} is not an event id of this API; "
                "ids look like pass-2@1732300000000-0"
            )
        key, number, entry_id = match.groups()[:3]
        kind = "pass" if number else key
        return cls((_KIND_ORDER[kind], int(number or 0)), entry_id, match.group(7))


def format_event_id(step: Step, entry_id: str) -> str:
    return f"{step.key}@{entry_id}"


def with_text(step_id: str, text_after: str | None) -> str:
    """An event id that also says the last answer text entry the reader has."""
    return step_id if text_after is None else f"{step_id}~{text_after}"


def progress_rank(event: Event) -> tuple[int, int]:
    """How far along its run `event` is: of two events of one run, the one with the higher rank
    holds everything the other does (a PassRequested and the PassCompleted it followed rank the
    same: they describe the same passes)."""
    rank = TYPE_RANK.get(type(event).__name__)
    if rank is None:
        raise TypeError(f"{type(event).__name__} is not a run's progress")
    passes = event.run.pass_count if isinstance(event, PassCompleted | PassRequested) else 0
    return (rank, passes)


def request_of(event: Event | None) -> str | None:
    """The run's request text, if `event` carries it."""
    if isinstance(event, RequestSubmitted):
        return event.request
    run = getattr(event, "run", None)
    if isinstance(run, RunState):
        return run.request
    if isinstance(event, LoopExited):
        return event.request or None
    return None


def webhook_url_of(event: Event | None) -> str | None:
    """Where the run's answer is POSTed, if `event` says (aeonloop.webhooks)."""
    if isinstance(event, RequestSubmitted):
        return event.webhook_url
    run = getattr(event, "run", None)
    return run.webhook_url if isinstance(run, RunState) else None


def run_steps(
    state: Event | None, answer: ExecutionResult | None, webhook: WebhookSettled | None = None
) -> list[Step]:
    """Every step of a run whose newest progress event is `state` (None: none known), whose
    result is `answer` (None: not answered yet) and whose webhook's outcome is `webhook`, in
    order."""
    run = getattr(state, "run", None)
    steps: list[Step] = []
    if isinstance(run, RunState):
        if run.profile is not None:
            steps.append(_profile(run))
        if isinstance(state, PlanAwaitingApproval):
            steps.append(_awaiting_approval(state))  # its plan step comes once it is approved
        elif run.plan is not None:
            steps.append(_plan(run))
        steps += [_pass(run, record) for record in run.passes]
    if isinstance(state, LoopExited):
        steps.append(_exit_of_loop(state))
    elif answer is not None:  # the loop's exit is known only from the answer
        steps.append(_exit_of_answer(answer))
    if answer is not None:
        steps.append(Step("answer", 0, answer_data(answer)))
        if webhook is not None:
            steps.append(Step(f"webhook_{webhook.outcome}", 0, webhook_data(webhook)))
    return steps


def webhook_data(webhook: WebhookSettled) -> dict[str, Any]:
    """A webhook's outcome as the API shows it (its run's status, its event stream)."""
    return {
        "outcome": webhook.outcome,
        "tries": webhook.tries,
        "webhook_id": webhook.webhook_id,
        "reason": webhook.reason,
        "at": webhook.created_at.isoformat(),
    }


def _profile(run: RunState) -> Step:
    profile = run.profile
    assert profile is not None
    return Step(
        "profile",
        0,
        {
            "reasoning_depth": profile.reasoning_depth,
            "information_sufficiency": profile.information_sufficiency,
            "expected_tool_usage": profile.expected_tool_usage,
            "output_breadth": profile.output_breadth,
            "confidence_requirement": profile.confidence_requirement,
            "profile_version": profile.profile_version,
            "default_profile": run.profile_is_default,
            "pass_budget": profile.allocate_ttl(run.max_ttl),
            "max_ttl": run.max_ttl,
            "checks": render.prepared_lines(run.rules, run.prepared),
        },
    )


def _plan(run: RunState) -> Step:
    """The plan as Phase B made it (or as its approval edited it), with what each later pass's
    refinement did to it marked on its steps (`plan_history`): one step is sent once, so a
    reader who comes late must not take a step added after pass 1 for one planned up front
    (the CLI's `B  planned: N steps` counts B's)."""
    plan = run.plan
    assert plan is not None
    steps = plan_history(run)
    return Step(
        "plan",
        0,
        {
            "goal": plan.goal,
            "steps": steps,
            #: How many steps Phase B planned: the steps not marked `added_in_pass`.
            "planned_steps": sum("added_in_pass" not in step for step in steps),
            #: The request's attached files, by path: context the plan and steps were given.
            "files": list(run.file_paths),
        },
    )


def plan_history(run: RunState) -> list[dict[str, Any]]:
    """Every step the run's plan has had, in plan order: each step of the plan now, and each
    step a refinement removed since (just before the step that replaced it, or at the end). A
    step a pass's refinement put in is marked `added_in_pass`, one it rewrote in place
    `changed_in_pass`, one it took out `removed_in_pass` (with no description: the plan no
    longer holds it), each with the number of the pass whose refinement did it.

    Worked out backwards from the plan now through the actions each pass's record says its
    refinement applied (`RefinementRecord.applied`), newest first, so the events need carry
    no second copy of the plan. A run whose history is gone (phases.history.HistoryMissing)
    has no records to read: its plan is shown as it is now, unmarked."""
    plan = run.plan
    assert plan is not None
    steps: list[dict[str, Any]] = [
        {"step_id": s.step_id, "description": s.description}
        | ({"tool": s.tool, "arguments": s.arguments or {}} if s.tool else {})
        for s in plan.steps
    ]
    #: The step under each id at the point of the walk: the plan as it was before the actions
    #: not yet undone.
    live = {step["step_id"]: step for step in steps}
    for record in reversed(run.passes):
        applied = record.refinement.applied if record.refinement else []
        for action in reversed(applied):
            _undo(steps, live, action, record.pass_number)
    return steps


def _undo(
    steps: list[dict[str, Any]],
    live: dict[str, dict[str, Any]],
    action: RefinementAction,
    number: int,
) -> None:
    """Mark what `action`, applied by pass `number`'s refinement, did, and step `live` back to
    the plan before it (phases.models.apply_refinements did it forwards)."""
    kind, target, new = action.action_type, action.target_step_id, action.new_step
    if kind == "MODIFY" or (kind == "REPLACE" and new is not None and new.step_id == target):
        if target in live:
            live[target].setdefault("changed_in_pass", number)  # the newest pass's: met first
        return
    added = live.pop(new.step_id, None) if new is not None else None  # ADD, or REPLACE
    if added is not None:
        added["added_in_pass"] = number
    if kind in ("REMOVE", "REPLACE") and target:
        removed = {"step_id": target, "description": None, "removed_in_pass": number}
        at = steps.index(added) if added is not None else len(steps)
        steps.insert(at, removed)
        live[target] = removed


def _awaiting_approval(paused: PlanAwaitingApproval) -> Step:
    """The run paused for its plan's approval: the plan as an approval may edit it (`goal`,
    `steps` with `step_id` and `description`), and the deadline it waits until at most."""
    plan = paused.run.plan
    assert plan is not None
    return Step(
        "awaiting_approval",
        0,
        {
            "plan": {
                "goal": plan.goal,
                "steps": [{"step_id": s.step_id, "description": s.description} for s in plan.steps],
            },
            "deadline": paused.deadline.isoformat(),
        },
    )


def _pass(run: RunState, record: ExecutionPass) -> Step:
    """One pass: its score and verdict, each step it ran with the output that step kept, and
    the evidence the verdict came from."""
    plan_steps = {s.step_id: s for s in run.plan.steps} if run.plan else {}
    calls = {call.step_id: call for call in record.tool_calls}
    steps = []
    for verdict in render.pass_steps(record):
        step = plan_steps.get(verdict.step_id)
        kept = step is not None and step.executed_in_pass == record.pass_number
        steps.append(
            {
                "step_id": verdict.step_id,
                "description": step.description if step else None,
                "status": verdict.status,
                "why": verdict.why,
                "output": step.output if kept and step else None,
                "tool_call": _tool_call(calls.get(verdict.step_id)),
            }
        )
    assessment = record.assessment
    evaluation = record.evaluation
    refinement = record.refinement
    return Step(
        "pass",
        record.pass_number,
        {
            "pass": record.pass_number,
            "score": record.score,
            "converged": record.converged,
            "steps": steps,
            "assessment": assessment
            and {
                "completeness": assessment.completeness_score,
                "coherence": assessment.coherence_score,
                "summary": assessment.summary,
                "reason_codes": assessment.reason_codes,
            },
            "validation": record.validation
            and {
                "summary": record.validation.summary,
                "issues": [issue.description for issue in record.validation.issues],
            },
            "rules": evaluation
            and {
                "score": evaluation.score,
                "passed": evaluation.passed,
                "failed": [render.finding_text(f) for f in evaluation.failed],
                "warnings": [render.finding_text(w) for w in evaluation.warnings],
            },
            "critique": [f"{c.rule_id}: {c.problem}" for c in record.critique],
            "refinement": refinement
            and {
                "applied": [
                    " ".join(filter(None, (a.action_type, a.target_step_id))) + f": {a.reason}"
                    for a in refinement.applied
                ],
                "rejected": refinement.rejected,
            },
        },
    )


def _tool_call(call: ToolCall | None) -> dict[str, Any] | None:
    """A step's tool call as the page shows it: tool, arguments, outcome, time, excerpt."""
    return call and call.model_dump(exclude={"step_id"})


def _exit_of_loop(event: LoopExited) -> Step:
    run = event.run
    return Step(
        "exit",
        0,
        {
            "reason": event.reason,
            "words": render.exit_words(event.reason),
            "detail": event.detail,
            "passes": run.pass_count if run else None,
            "ttl_remaining": run.ttl_remaining if run else None,
            "refinements": run.total_refinements if run else None,
        },
    )


def _exit_of_answer(answer: ExecutionResult) -> Step:
    return Step(
        "exit",
        0,
        {
            "reason": answer.status,
            "words": render.exit_words(answer.status),
            "detail": answer.outcome.exit_detail,
            "passes": answer.total_passes,
            "ttl_remaining": answer.ttl_remaining,
            "refinements": answer.total_refinements,
        },
    )


def no_answer_step(deadline: datetime) -> Step:
    """The last step of a run whose deadline (and the grace after it) passed with no answer."""
    return Step(
        "no_answer",
        0,
        {
            "deadline": deadline.isoformat(),
            "reason": "no answer came by the run's deadline: the run was lost (a phase or Redis "
            "failed) or its answer has expired (AEON_ANSWER_TTL_S)",
        },
    )


def answer_data(answer: ExecutionResult) -> dict[str, Any]:
    """The ExecutionResult as JSON, with `degraded_because`: why the answer is degraded, one
    plain line each, so no reader has to know the reason codes; and, for an answer that was
    checked, `checks` (how many held, and which candidate it is) and `checks_not_held` (one line
    each)."""
    outcome = answer.outcome
    return {
        **answer.model_dump(mode="json"),
        "degraded_because": degraded_because(answer),
        "checks": render.checks_line(outcome),
        "checks_not_held": render.checks_not_held(outcome),
    }


def degraded_because(answer: ExecutionResult) -> list[str]:
    """Plain lines saying why `answer` is degraded, the failed rules and the exit in words
    among them (phases.render, as the answer's text and the CLI say it); empty when it is not."""
    return render.degraded_because(answer.outcome)


def checks_not_held(answer: ExecutionResult) -> list[str]:
    """Each check of the answer that did not hold on it, one plain line each (phases.render)."""
    return render.checks_not_held(answer.outcome)
