"""Phase C: one execution pass — execute the pending steps, evaluate, decide, refine.

The host decides convergence from the evidence, never from the LLM's own `converged` flag:

- with rules that were judged: converged iff the rule evaluation passed and no step is blocked;
- otherwise (no rules, or none that could be run): converged iff the assessment meets the
  default rubric, validation found no high-severity issue, and no step is blocked.

A pass that does not converge ends the loop when the score stagnated (moved less than epsilon on
two passes in a row) or when it was the last allowed pass; else the plan is refined for the next
pass and Phase D decides, from TTL, whether there is one. A refinement that leaves nothing to
execute would make the next pass re-judge the same outputs, so it ends the loop here instead.
Those decisions, and the words that explain them, are phases.exits'.

Every output is a pure function of the input event and the (memoised) LLM replies: the same
event handled twice makes no new LLM call and returns events with the same ids.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

from aeonloop.bus.keys import memo_scope
from aeonloop.exceptions import LLMFailure
from aeonloop.limits import LoopSettings
from aeonloop.llm.session import LLMSession
from aeonloop.phases import evaluation, exits, history, phase_d, render, summaries, verification
from aeonloop.phases.deps import PhaseDeps
from aeonloop.phases.events import Event, PassCompleted, PassRequested, PlanReady, RunState
from aeonloop.phases.models import (
    ConvergenceAssessment,
    CritiqueIssue,
    Evaluation,
    ExecutionPass,
    Plan,
    PlanStep,
    SemanticValidationReport,
    TaskProfile,
    ToolCall,
)
from aeonloop.phases.planning import adopt, refine, refinement_budget
from aeonloop.phases.profiling import PROFILE_FAILURES
from aeonloop.phases.tool_calls import ToolRunner, run_tool_step
from aeonloop.prompts.clipping import STORED_MARKER, clip
from aeonloop.prompts.echo import instruction_echo
from aeonloop.prompts.registry import (
    CritiqueInput,
    CritiqueOutput,
    PassEvaluationInput,
    PassEvaluationOutput,
    PromptId,
    ReasoningStepInput,
    goal_text,
)
from aeonloop.prompts.replies import is_blocked_reply, is_refusal


async def handle(event: PlanReady | PassRequested, deps: PhaseDeps) -> list[Event]:
    """One pass → PassCompleted (loop goes on via D) or LoopExited (phases.exits decides)."""
    run = event.run
    settings = deps.settings
    number = run.pass_count + 1
    stop = exits.before_pass(run, number, settings)  # past AEON_MAX_PASSES, or no plan
    if stop is not None:
        return [exits.loop_exited(event, stop)]
    await history.load_outputs(deps.records, event.correlation_id, run)  # of earlier passes
    plan = run.plan
    files = await history.load_files(deps.records, event.correlation_id, run)
    turns = await history.load_turns(deps.records, event.correlation_id, run)
    session = deps.session(event.correlation_id, run.usage, event.deadline, files, turns)
    execution = execute(
        session,
        run,
        plan,
        number,
        settings.max_step_output_chars,
        settings.max_parallel_steps,
        deps.tool_runner(run),
    )
    record = await beside_reprofile(session, run, execution)
    try:
        stop = await evaluate_and_refine(session, run, plan, record, settings)
    except LLMFailure as error:
        run.add_pass(record)
        return [exits.loop_exited(event, exits.evaluation_failed(number, error))]
    run.add_pass(record)
    if stop is not None:
        return [exits.loop_exited(event, stop)]
    return [event.child(PassCompleted, run=run, execution_pass=record)]


# ---------------------------------------------------------------------------------------------
# Execute.
# ---------------------------------------------------------------------------------------------


async def execute(
    session: LLMSession,
    run: RunState,
    plan: Plan,
    number: int,
    output_chars: int,
    parallel: int,
    tools: ToolRunner,
) -> ExecutionPass:
    """Run every step not done yet; one that does not complete is "failed".

    A step runs once the steps it depends on (`Plan.dependencies`) have run; the steps that
    are ready together run at once, at most `parallel` LLM calls at a time, and are recorded in
    plan order, so the record does not depend on which call came back first. A plan that names
    no dependencies runs one step at a time in its order, as before they existed.

    Failed is either blocked (the model replied BLOCKED: evidence that the task was misjudged)
    or failed for a reason that says nothing about the task (the LLM call failed, the reply was
    cut at the length limit, a refusal); either way the other steps still run, the pass cannot
    converge, and the step runs again next pass. Each step sees the outputs of the done steps
    it depends on (`visible_outputs`), clipped longest first if the prompt needs it. Outputs
    are stored cut to `output_chars`.

    A step that names a tool is done by calling it (phases.tool_calls), within the same bound;
    one whose tool is not here is rewritten by its repair and done by the model.
    """
    record = ExecutionPass(pass_number=number)
    earlier = [s.step_id for s in plan.steps if s.executed]  # done in earlier passes
    waiting = [s.step_id for s in plan.steps if not s.executed]
    calls = asyncio.Semaphore(parallel)

    async def run_step(step: PlanStep) -> StepOutcome:
        async with calls:
            call = None
            if step.tool is not None:
                done = await run_tool_step(session, tools, step, number, output_chars)
                if not done.needs_model:
                    return StepOutcome(
                        done.output, failed=done.failed, step=done.step, call=done.call
                    )
                step, call = done.step, done.call
            prior = visible_outputs(plan, step, earlier)
            build = functools.partial(step_input, run, plan.goal, step, prior, number)
            scope = memo_scope("c", "step", pass_number=number, step=step.step_id)
            outcome = await attempt_step(session, build, scope, output_chars)
            return replace(outcome, step=step, call=call)

    by_id = {s.step_id: s for s in plan.steps}
    while waiting:  # the plan has no cycles (models.Plan), so each round runs at least one
        ready = [by_id[i] for i in waiting if not set(plan.dependencies(by_id[i])) & set(waiting)]
        outcomes = await asyncio.gather(*(run_step(step) for step in ready))
        for step, outcome in zip(ready, outcomes, strict=True):
            _record_step(run, plan, record, step, outcome, number)
            waiting.remove(step.step_id)
    return record


async def beside_reprofile(
    session: LLMSession, run: RunState, execution: Awaitable[ExecutionPass]
) -> ExecutionPass:
    """The pass's execution, with the re-profile Phase D left to it made at the same time
    (phases.phase_d.reprofile_due): it needs only the last pass's evidence, and the pass runs
    whatever it says. Its result is applied after the steps, so the run's notes come out in
    the same order whichever call ends first; both run to the end, so a redelivery finds
    every reply memoised."""
    evidence = run.reprofile_evidence
    if evidence is None:
        return await execution
    after = run.pass_count
    record, update = await asyncio.gather(
        execution, phase_d.reprofile(session, run, evidence, after), return_exceptions=True
    )
    if isinstance(record, BaseException):
        raise record
    if isinstance(update, BaseException) and not isinstance(update, PROFILE_FAILURES):
        raise update  # what stops the run (a cancel, the budget); a failed update is its value
    run.reprofile_evidence = None
    phase_d.apply_update(run, after, cast(TaskProfile | Exception, update))
    return record


def visible_outputs(plan: Plan, step: PlanStep, earlier: Sequence[str]) -> tuple[PlanStep, ...]:
    """The done steps whose outputs `step` is shown: those it depends on. A step without
    `depends_on` is also shown every step done in an earlier pass (and first, as before
    dependencies existed); one that names its dependencies needs nothing else, so the rest is
    cut from its prompt."""
    named = set(plan.dependencies(step))
    done = [s for s in plan.steps if s.status == "done"]
    if step.depends_on is not None:
        return tuple(s for s in done if s.step_id in named)
    before = [s for s in done if s.step_id in earlier]
    return tuple(before + [s for s in done if s.step_id in named and s.step_id not in earlier])


def _record_step(
    run: RunState,
    plan: Plan,
    record: ExecutionPass,
    step: PlanStep,
    outcome: StepOutcome,
    number: int,
) -> None:
    """Put one step's outcome in the plan, the pass's record and the run's notes."""
    index = plan.steps.index(step)
    status = "done" if outcome.completed else "failed"
    plan.steps[index] = (outcome.step or step).model_copy(
        update={"status": status, "output": outcome.output, "executed_in_pass": number}
    )
    if outcome.call is not None:
        record.tool_calls.append(outcome.call)
    if outcome.blocked:
        record.blocked_step_ids.append(step.step_id)
        said = summaries.first_line(outcome.blocked)
        run.notes.append(f"phase C: step {step.step_id} is blocked in pass {number}: {said}")
    elif outcome.failed:
        record.failed_steps[step.step_id] = outcome.failed
        run.notes.append(
            f"phase C: step {step.step_id} did not complete in pass {number}: {outcome.failed}"
        )
    else:
        record.executed_step_ids.append(step.step_id)


def step_input(
    run: RunState,
    goal: str,
    step: PlanStep,
    prior: Sequence[PlanStep],
    number: int,
    cap: int | None,
) -> ReasoningStepInput:
    """The step's prompt input, with each earlier output cut to `cap` characters (None: whole)."""
    return ReasoningStepInput(
        request=run.request,
        goal=goal_text(goal, run.request),
        step_id=step.step_id,
        step_description=step.description,
        prior_outputs=summaries.step_outputs(prior, cap),
        pass_number=number,
    )


@dataclass(frozen=True)
class StepOutcome:
    """What one step's LLM call came to."""

    output: str | None
    #: The model's own BLOCKED reply: the step cannot be done with what it has.
    blocked: str | None = None
    #: Why the step did not complete for a reason that says nothing about the task.
    failed: str | None = None
    #: The step as it now stands, when its tool's repair rewrote it (None: as planned).
    step: PlanStep | None = None
    #: Its tool call, if it named a tool.
    call: ToolCall | None = None

    @property
    def completed(self) -> bool:
        return not (self.blocked or self.failed)


async def attempt_step(
    session: LLMSession,
    build: Callable[[int | None], ReasoningStepInput],
    scope: str,
    output_chars: int,
) -> StepOutcome:
    """Run one step and judge its reply: only real work counts as done. A reply that is
    mostly Aeon's own prompt text (prompts.echo) is the model copying its instructions, not
    the step's work: the step failed, and runs again next pass."""
    try:
        reply = await session.text(PromptId.REASONING_STEP_USER, build, scope=scope)
    except LLMFailure as error:
        return StepOutcome(None, failed=f"the LLM call failed ({type(error).__name__}: {error})")
    output = clip(reply.text, output_chars, STORED_MARKER)
    if reply.truncated:
        return StepOutcome(output, failed="the reply was cut off at the model's length limit")
    if reply.refused or is_refusal(reply.text):
        said = summaries.first_line(reply.text)
        return StepOutcome(output, failed=f"the model refused the step ({said})")
    request = build(0).request  # its words in the reply are the user's, not Aeon's
    if instruction_echo(reply.text, request=request) is not None:  # unquoted: notes reach E
        return StepOutcome(output, failed="the reply repeats Aeon's own instructions")
    if is_blocked_reply(output):
        return StepOutcome(output, blocked=output.strip())
    return StepOutcome(output)


# ---------------------------------------------------------------------------------------------
# Evaluate and decide.
# ---------------------------------------------------------------------------------------------


async def evaluate_and_refine(
    session: LLMSession, run: RunState, plan: Plan, record: ExecutionPass, settings: LoopSettings
) -> exits.Exit | None:
    """Judge the pass, and refine the plan for the next one unless the loop ends: an exit, or
    None to go on. LLMFailure when the pass could not be judged.

    The rules are checked first, on the host. When they decide and the pass fails them
    (`refinement_can_start`), the host knows before the model's evaluation comes back that
    the pass does not converge, that the loop goes on, and what the refinement fixes (the
    critique of the failed rules): the critique and refinement then run beside the
    evaluation, not after it. Both run to the end, so a redelivery finds every reply
    memoised; the evaluation's failure is raised first.
    """
    await check_rules(run, plan, record, settings)
    if refinement_can_start(run, record, settings):
        judged, refined = await asyncio.gather(
            evaluate(session, run, plan, record),
            refine_for_next_pass(session, run, plan, record, settings),
            return_exceptions=True,
        )
        for outcome in (judged, refined):
            if isinstance(outcome, BaseException):
                raise outcome
        return cast(exits.Exit | None, refined)
    await evaluate(session, run, plan, record)
    stop = exits.after_pass(run, record, settings)
    if stop is not None:
        return stop
    return await refine_for_next_pass(session, run, plan, record, settings)


def refinement_can_start(run: RunState, record: ExecutionPass, settings: LoopSettings) -> bool:
    """Whether the refinement needs nothing of the pass's LLM evaluation: the rules decide
    convergence (evaluation.judged) and some failed or warned, so the pass's convergence,
    score, exit and the issues to fix (the critique of those rules) are the host's alone."""
    rules = record.evaluation
    if rules is None or not evaluation.judged(run.rules, rules):
        return False
    if not (rules.failed or rules.warnings):  # the issues would be the evaluation's
        return False
    blocked = bool(record.blocked_step_ids or record.failed_steps)
    if rules.passed and not blocked:  # converges: nothing to refine
        return False
    known = record.model_copy(update={"converged": False, "score": rules.score})
    return exits.after_pass(run, known, settings) is None


async def check_rules(
    run: RunState, plan: Plan, record: ExecutionPass, settings: LoopSettings
) -> None:
    """The pass's rule evaluation, on the host (none without rules)."""
    if run.rules:
        record.evaluation = await evaluation.evaluate_run(
            run, summaries.combined_output(plan), settings, verification.on_material(run.prepared)
        )


async def evaluate(session: LLMSession, run: RunState, plan: Plan, record: ExecutionPass) -> None:
    """Fill the pass's validation, assessment, score and convergence from one LLM call
    (PASS_EVALUATION_USER), which judges the pass and lists its semantic issues together (the
    assessment and the validation were two calls on the same outputs). It is shown the rule
    results `check_rules` put in the record."""
    number = record.pass_number
    done = [s for s in plan.steps if s.status == "done"]

    def build(cap: int | None) -> PassEvaluationInput:
        return PassEvaluationInput(
            request=run.request,
            goal=goal_text(plan.goal, run.request),
            pass_number=number,
            step_outputs=summaries.step_outputs(done, cap),
            rules_summary=summaries.rule_results_text(record.evaluation),
        )

    output = await session.json(
        PromptId.PASS_EVALUATION_USER,
        build,
        PassEvaluationOutput,
        scope=memo_scope("c", "evaluate", pass_number=number),
    )
    # One reply, read as the two records the host decides from: the validation's issues and
    # the assessment's verdict.
    record.validation = SemanticValidationReport.model_validate(output, from_attributes=True)
    record.assessment = ConvergenceAssessment.model_validate(output, from_attributes=True)
    by_rules = evaluation.judged(run.rules, record.evaluation)
    record.converged = is_converged(
        by_rules=by_rules,
        evaluation=record.evaluation,
        assessment=record.assessment,
        validation=record.validation,
        blocked=bool(record.blocked_step_ids or record.failed_steps),
    )
    record.score = pass_score(by_rules, record.evaluation, record.assessment)


def is_converged(
    *,
    by_rules: bool,
    evaluation: Evaluation | None,
    assessment: ConvergenceAssessment,
    validation: SemanticValidationReport,
    blocked: bool,
) -> bool:
    """The host's decision (module docstring); the assessment's own `converged` is not used."""
    if blocked:
        return False
    if by_rules:
        return evaluation is not None and evaluation.passed
    high = any(issue.severity == "high" for issue in validation.issues)
    return assessment.meets_default_rubric() and not high


def pass_score(
    by_rules: bool, evaluation: Evaluation | None, assessment: ConvergenceAssessment
) -> float:
    """The number stagnation watches: the rule score when rules decide, else the assessment's."""
    return evaluation.score if by_rules and evaluation is not None else assessment.score


# ---------------------------------------------------------------------------------------------
# Refine for the next pass.
# ---------------------------------------------------------------------------------------------


async def refine_for_next_pass(
    session: LLMSession, run: RunState, plan: Plan, record: ExecutionPass, settings: LoopSettings
) -> exits.Exit | None:
    """Refine the plan from this pass's evidence; an exit if no step is left to run."""
    number = record.pass_number
    issues = await issues_to_fix(session, run, plan, record)
    budget = refinement_budget(settings, run)
    if budget < 1:
        return exits.nothing_left(plan, number, "the run's refinement budget is spent")
    try:
        outcome = await refine(
            session,
            run.request,
            plan,
            issues,
            budget,
            scope=memo_scope("c", "refine", pass_number=number),
        )
    except LLMFailure as error:
        what = f"refinement after pass {number}"
        run.notes.append(summaries.failure_note("C", what, error, "plan kept"))
        return exits.nothing_left(plan, number, f"{what} failed: {error}", refinement_failed=True)
    adopt(run, outcome)
    record.refinement = outcome.record()
    why = f"refinement applied {len(outcome.applied)} action(s), rejected {len(outcome.rejected)}"
    return exits.nothing_left(outcome.plan, number, why)


async def issues_to_fix(
    session: LLMSession, run: RunState, plan: Plan, record: ExecutionPass
) -> str:
    """Failed rules → the critique's issues (docs/requirements.md, CRITIQUE); else the pass's
    own evidence."""
    ev = record.evaluation
    findings = [*ev.failed, *ev.warnings] if ev is not None else []
    if not (findings and evaluation.judged(run.rules, ev)):
        return "\n".join(render.pass_issues(record))

    def build(cap: int | None) -> CritiqueInput:
        return CritiqueInput(
            request=run.request,
            artifact=summaries.combined_output(plan, cap),
            failed_rules=summaries.findings_text(findings),
        )

    try:
        output = await session.json(
            PromptId.RULE_CRITIQUE_USER,
            build,
            CritiqueOutput,
            scope=memo_scope("c", "critique", pass_number=record.pass_number),
        )
    except LLMFailure as error:
        run.notes.append(
            summaries.failure_note("C", "critique", error, "refining from the failed rules")
        )
        return summaries.findings_as_issues(findings)
    issues = [CritiqueIssue.model_validate(i, from_attributes=True) for i in output.issues]
    record.critique = verification.tied_issues(issues, {f.id for f in findings})
    if not record.critique:
        return summaries.findings_as_issues(findings)
    return summaries.critique_text(record.critique)
