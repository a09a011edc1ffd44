"""Verified answers: the checks a run's answer is held to, and the candidates it is chosen from.

docs/verified-answers.md, "Verified answers", is the design; in short:

- **PREPARE** (docs/requirements.md, PREPARE), in Phase A beside the profile and the draft:
  one call turns every rule whose check is in words, and every checkable constraint the request
  states itself, into concrete checks of the host's vocabulary (aeonloop.checks). A check maps to
  one rule id; one the request implies becomes a rule of its own, `origin="request"`. A check
  the host cannot run (malformed, a pattern that does not compile) is dropped with a note, and
  the run goes on.
- **The draft**, also in Phase A: the request answered as one plain call would. It is the first
  candidate answer, so the published answer never holds fewer fail-severity checks than one
  call's (`best`).
- **The answer**, in Phase E: the host runs the checks on the text the model wrote; while a
  fail-severity check does not hold on the best candidate, one call rewrites it
  (ANSWER_REWRITE_USER: its instructions are the failed checks in words, everything else
  kept), for at most AEON_ANSWER_REFINE_ROUNDS rounds, stopping at the first that holds; a
  rewrite that breaks a check the text held is not published.
- **Repairs on the host** (checks.repairs), before any model call: a candidate that fails a
  check with a lossless fix (recasing, an exact opening or ending, JSON out of prose) is
  repaired, checked again, and the repaired text competes beside it, winning only when it holds
  more fail-severity checks (`repaired`); a repaired answer that holds every check is not
  rewritten.

Each call has a memo scope of its own (`a/prepare`, `a/draft`, `e/rewrite:<round>`), so a
redelivered hop makes none of them again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from aeonloop.bus.keys import memo_scope
from aeonloop.checks import vocabulary
from aeonloop.checks.repairs import repair
from aeonloop.checks.stated import stated_checks
from aeonloop.checks.types import Check, PatternCheck, asks_presence, parse_check
from aeonloop.exceptions import BudgetExhausted, LLMFailure, LLMUnreachable
from aeonloop.llm.session import LLMSession, Reply
from aeonloop.phases import evaluation, spend, summaries
from aeonloop.phases.deps import NO_STREAM, AnswerStream, LoopSettings
from aeonloop.phases.events import RunState
from aeonloop.phases.models import CritiqueIssue, Evaluation, Rule, RuleCheck, fail_rules
from aeonloop.prompts.baseline import plain_call
from aeonloop.prompts.clipping import clip
from aeonloop.prompts.echo import copied_placeholder, quoted_instruction
from aeonloop.prompts.registry import (
    DraftAnswerInput,
    PrepareChecksInput,
    PrepareChecksOutput,
    PromptId,
    RewriteAnswerInput,
)
from aeonloop.prompts.replies import is_blocked_reply, is_refusal

PREPARE_SCOPE = memo_scope("a", "prepare")
DRAFT_SCOPE = memo_scope("a", "draft")
#: The most issues Phase C's critique may name (docs/requirements.md, CRITIQUE).
MAX_CRITIQUE_ISSUES = 5
#: Draft samples that repeat an earlier one before the sampling ends (`best_draft`).
REPEATS_END_SAMPLES = 2
#: The most checks PREPARE may add to a run: they ride in every event of the run.
MAX_PREPARED_CHECKS = 20
#: The prefix of the id of a rule the request implies.
REQUEST_PREFIX = "request."

Source = Literal["draft", "answer", "refinement"]


# ---------------------------------------------------------------------------------------------
# PREPARE and the draft (Phase A).
# ---------------------------------------------------------------------------------------------


def prepare_input(run: RunState) -> PrepareChecksInput:
    """The request and the rules in words the host's reader does not read (spend.unread_rules:
    what it read needs no model), and the host's check vocabulary as the types describe it
    (checks.vocabulary)."""
    return PrepareChecksInput(
        request=run.request,
        rules_in_words=in_words(spend.unread_rules(run)),
        check_types=vocabulary.described(),
    )


def in_words(rules: Sequence[Rule]) -> str:
    """The rules whose check is in words, one per line: `- id: the words`."""
    return "\n".join(f"- {rule.id}: {rule.check}" for rule in rules if rule.in_words)


async def prepare(session: LLMSession, run: RunState) -> PrepareChecksOutput:
    """The PREPARE call (memoised under `a/prepare`)."""
    return await session.json(
        PromptId.CHECKS_PREPARE_USER, prepare_input(run), PrepareChecksOutput, scope=PREPARE_SCOPE
    )


def stated(run: RunState) -> PrepareChecksOutput:
    """The checks the host reads itself in the request and the rules in words (checks.stated):
    PREPARE's floor, adopted before the model's checks, since a small model often prepares none
    for a constraint spelled out as plainly as "in three bullet points"."""
    return PrepareChecksOutput.model_validate(
        {"checks": stated_checks(run.request, in_words(run.rules))}
    )


def adopt_prepared(run: RunState, output: PrepareChecksOutput) -> None:
    """Put PREPARE's checks in the run: each under its rule's id in `run.prepared`, a rule the
    request implies added to `run.rules` (origin "request"). What cannot be used is noted and
    dropped: a check whose id is built from the format example's placeholder (a copy of the
    example, not a constraint of this request: prompts.echo.copied_placeholder), a check the
    host cannot run, one for a rule that has a check of its own, one past
    MAX_PREPARED_CHECKS."""
    by_id = {rule.id: rule for rule in run.rules}
    # What the model was told: the request, the rules, and the prefix the prompt asks ids to
    # take ("request.<name>"), which the example's id has too.
    said = " ".join([REQUEST_PREFIX, run.request, in_words(run.rules)])
    kept = 0
    for item in output.checks:
        rule_id = item.rule_id.strip()
        if copied := copied_placeholder(rule_id, PromptId.CHECKS_PREPARE_USER, said=said):
            run.notes.append(
                f"phase A: a prepared check for {rule_id} was dropped: its id has the format "
                f"example's {copied!r}, which the request does not use"
            )
            continue
        if kept >= MAX_PREPARED_CHECKS:
            run.notes.append(
                f"phase A: prepared checks past the first {MAX_PREPARED_CHECKS} were dropped"
            )
            break
        try:
            check = parse_check(item.check)
        except ValueError as error:
            run.notes.append(f"phase A: a prepared check for {rule_id} was dropped: {error}")
            continue
        rule = by_id.get(rule_id) or by_id.get(request_id(rule_id))
        if rule is not None and not isinstance(rule.check, str):
            run.notes.append(
                f"phase A: a prepared check for {rule_id} was dropped: that rule has its own check"
            )
            continue
        if rule is None:
            rule = request_rule(rule_id, item.description)
            by_id[rule.id] = rule
            run.rules.append(rule)
        checks = run.prepared.setdefault(rule.id, [])
        if check in checks:  # the host read it already (`stated`)
            continue
        checks.append(check)
        kept += 1


def request_id(rule_id: str) -> str:
    """The id of a rule the request implies: `request.<name>`, at most 128 characters."""
    name = rule_id if rule_id.startswith(REQUEST_PREFIX) else REQUEST_PREFIX + rule_id
    return name[:128]


def request_rule(rule_id: str, description: str) -> Rule:
    """A rule the request implies: fail-severity (the request asked for it in so many words),
    under `request.<name>`, its check in words being what PREPARE said it checks."""
    name = request_id(rule_id)
    words = description.strip() or f"the request's constraint {name}"
    return Rule(id=name, description=words, severity="fail", check=words, origin="request")


async def draft(
    session: LLMSession, run: RunState, sample: int = 1, stream: AnswerStream = NO_STREAM
) -> Reply:
    """The plain draft (memoised under `a/draft`; a later sample under `a/draft:<n>`): the
    request as one call sends it, the user's rules written in as instructions
    (prompts.baseline.plain_call), as a person asking the model once would, and as the quality
    bench's plain baseline does: so the draft is that baseline, and the answer published, never
    holding fewer checks than the draft, is never worse than it on the host's checks."""
    asked = plain_call(run.request, [r.description for r in run.rules if r.origin == "rules"])
    scope = DRAFT_SCOPE if sample == 1 else memo_scope("a", "draft", step=str(sample))
    label = "draft" if sample == 1 else f"draft:{sample}"
    return await session.text(
        PromptId.ANSWER_DRAFT_USER,
        DraftAnswerInput(request=asked),
        scope=scope,
        sink=stream.sink(label, True),  # the host's checks judge it before it is published
    )


async def best_draft(
    session: LLMSession,
    run: RunState,
    first: str,
    judged: Evaluation,
    settings: LoopSettings,
    stream: AnswerStream = NO_STREAM,
) -> tuple[str, Evaluation]:
    """The draft that holds the most fail-severity checks among `first` and further samples,
    taken one at a time while the best still fails one, up to AEON_DRAFT_SAMPLES in all. Each
    is judged as the host's repairs leave it (`judged_after_repair`): a draft that holds every
    check once recased needs no second sample, and E publishes it repaired (`repaired`); the
    text kept is the model's own.

    A weak model's plain answers differ from one sample to the next, and the host's checks
    tell them apart at the price of a plain call each, far less than a plan and its passes
    (the quality bench's best of k). A second sample that repeats an earlier one ends the
    sampling (a model that answers alike each time has nothing more to give: the offline model,
    a server at temperature 0); one repeat alone does not: a sampling server repeats a short
    answer by chance (SmolLM2's primes and planets, where the first repeat had ended the
    samples at 3, and best of 8 held a rule more: the 40 cases, issue 40); one that
    cannot be used is noted and passed over; a call that fails, or that the budget or the
    deadline forbids, ends it with a note (the run goes on with the best in hand)."""
    best, best_judged = first, await judged_after_repair(run, first, judged, settings)
    seen = {first}
    repeats = 0
    for sample in range(2, settings.draft_samples + 1):
        if all_hold(best_judged):
            break
        try:
            reply = await draft(session, run, sample, stream)
        except (LLMFailure, BudgetExhausted, LLMUnreachable) as error:
            run.notes.append(summaries.failure_note("A", f"draft {sample}", error, "no more"))
            break
        if (why := unusable(reply, run.request)) is not None:
            run.notes.append(f"phase A: draft {sample} was not kept: {why}")
            continue
        text = clip(reply.text.strip(), settings.max_step_output_chars)
        if text in seen:
            repeats += 1
            if repeats == REPEATS_END_SAMPLES:
                break
            continue
        seen.add(text)
        checked = await judged_after_repair(
            run, text, await check_text(run, text, settings), settings
        )
        if held(run.rules, checked) > held(run.rules, best_judged):
            best, best_judged = text, checked
    return best, best_judged


def unusable(reply: Reply, request: str) -> str | None:
    """Why a reply cannot stand as an answer (cut off, a refusal, blocked, empty, or mostly a
    copy of Aeon's own prompt text: a weak model copies the examples it is shown), or None."""
    if reply.truncated:
        return "it was cut off at the model's length limit"
    if reply.refused or is_refusal(reply.text):
        return "the model refused"
    if is_blocked_reply(reply.text):
        return "the model said it could not answer"
    if not reply.text.strip():
        return "it was empty"
    if quoted_instruction(reply.text, request=request) is not None:
        return "it repeats Aeon's own instructions"
    return None


# ---------------------------------------------------------------------------------------------
# Checking a text, and the candidates.
# ---------------------------------------------------------------------------------------------


async def check_text(run: RunState, text: str, settings: LoopSettings) -> Evaluation:
    """Every rule of the run on `text`, with the prepared checks (phases.evaluation)."""
    return await evaluation.evaluate_run(run, text, settings, run.prepared)


def held(rules: Sequence[Rule], judged: Evaluation) -> int:
    """How many fail-severity rules hold on the text `judged` was made from."""
    severity = {rule.id: rule.severity for rule in rules}
    return sum(
        1 for r in judged.rule_results if r.verdict == "pass" and severity.get(r.id) == "fail"
    )


def all_hold(judged: Evaluation) -> bool:
    """Every fail-severity check that ran held (a check that could not run says nothing)."""
    return not judged.failed


@dataclass(frozen=True)
class Candidate:
    """A text that may be published, and how it fared on the run's checks."""

    source: Source
    text: str
    evaluation: Evaluation
    #: Fail-severity rules it holds.
    held: int
    #: The refinement round that made it (0: none).
    round: int = 0
    #: The host's repairs that made this text from the model's, in order ("lower-cased by the
    #: host"; checks.repairs); empty: the text is the model's as written.
    repairs: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """What `Outcome.answered_by` says (phases.outcome): draft, answer or refinement:<round>."""
        return f"refinement:{self.round}" if self.source == "refinement" else self.source


async def candidate(
    run: RunState, source: Source, text: str, settings: LoopSettings, round: int = 0
) -> Candidate:
    judged = await check_text(run, text, settings)
    return Candidate(source, text, judged, held(run.rules, judged), round)


def host_checks(run: RunState) -> list[Check]:
    """The checks of the run's fail- and warn-severity rules, their own (a content check as the
    pattern it is) and the prepared: what a repair must meet without breaking any
    (checks.repairs). An executable check is not run here: the candidate's own evaluation
    judges it (`repaired`)."""
    found: list[Check] = []
    for rule in run.rules:
        if rule.severity == "info":
            continue
        if isinstance(rule.check, RuleCheck):
            if rule.check.type == "content":
                found.append(PatternCheck(pattern=rule.check.search or ""))
        elif not isinstance(rule.check, str):
            found.append(rule.check)
        found += run.prepared.get(rule.id, [])
    return found


async def repaired(run: RunState, original: Candidate, settings: LoopSettings) -> Candidate | None:
    """`original` as the host's lossless repairs leave it (checks.repairs), checked again; None
    when it holds every check already, no repair applies, or the repaired text holds no more
    fail-severity checks than the model's (a repair that broke a content or executable check
    shows here). Host work only: no model call."""
    if all_hold(original.evaluation):
        return None
    timeout = settings.check_pattern_timeout_s
    # In a worker thread, as the checks themselves run (phases.evaluation): a slow pattern
    # must not stall the worker's event loop.
    text, applied = await asyncio.to_thread(
        repair, original.text, host_checks(run), timeout=timeout
    )
    if not applied:
        return None
    judged = await check_text(run, text, settings)
    fixed = Candidate(
        original.source, text, judged, held(run.rules, judged), original.round, tuple(applied)
    )
    return fixed if fixed.held > original.held else None


async def checked_candidates(
    run: RunState, source: Source, text: str, settings: LoopSettings, round: int = 0
) -> list[Candidate]:
    """The candidate the text makes, and after it its repaired form when that holds more."""
    made = await candidate(run, source, text, settings, round)
    fixed = await repaired(run, made, settings)
    return [made] if fixed is None else [made, fixed]


async def judged_after_repair(
    run: RunState, text: str, judged: Evaluation, settings: LoopSettings
) -> Evaluation:
    """How `text` fares on the run's checks once the host has repaired it (`repaired`): the
    evaluation of the repaired text when a repair holds more, else `judged` as it was."""
    fixed = await repaired(run, Candidate("draft", text, judged, held(run.rules, judged)), settings)
    return judged if fixed is None else fixed.evaluation


def best(candidates: Sequence[Candidate], *, loop_converged: bool = True) -> Candidate:
    """The candidate that holds the most fail-severity checks. Ties go to the later one (the
    answer over the draft), except that a loop that did not converge showed nothing its answer
    could rest on: then a tie goes to the draft, one call's answer, which such a loop's answer
    (on a weak model, often a copy of the reply format's example) has not been shown to beat;
    a repaired candidate wins no tie; and a rewrite wins none: it was asked for to hold a
    check, and one that holds no more than the text before it has not. On SmolLM2 such a
    rewrite was often the rewrite prompt's own words paraphrased, published in place of a
    draft as good on the checks (the 40 cases: `defs`, docs/benchmarks.md)."""
    chosen = candidates[0]
    for each in candidates[1:]:
        if each.held > chosen.held or (
            each.held == chosen.held and not _keeps(chosen, each, loop_converged)
        ):
            chosen = each
    return chosen


def _keeps(chosen: Candidate, later: Candidate, loop_converged: bool) -> bool:
    """Whether `chosen` holds its place against a later candidate that ties it: a draft against
    a loop that did not converge, the model's own text against a repaired one (a repair wins
    only by holding more), and anything against a rewrite (so does a rewrite)."""
    return (
        later.source == "refinement"
        or (bool(later.repairs) and not chosen.repairs)
        or (chosen.source == "draft" and not loop_converged)
    )


# ---------------------------------------------------------------------------------------------
# The targeted rewrite of the answer (Phase E).
# ---------------------------------------------------------------------------------------------


def tied_issues(issues: list[CritiqueIssue], failed_ids: set[str]) -> list[CritiqueIssue]:
    """At most five issues, each tied to a rule that failed; anything else is dropped
    (docs/requirements.md, CRITIQUE: Phase C's critique of a pass)."""
    return [issue for issue in issues if issue.rule_id in failed_ids][:MAX_CRITIQUE_ISSUES]


def failed_in_words(judged: Evaluation) -> str:
    """The fail-severity checks `judged` found failing, one a line, in the checks' own words
    (what each asks, and what it found): the rewrite's only instructions."""
    return "\n".join(f"- {finding.message}" for finding in judged.failed)


async def rewrite(
    session: LLMSession,
    run: RunState,
    current: Candidate,
    round: int,
    settings: LoopSettings,
    stream: AnswerStream = NO_STREAM,
) -> list[Candidate] | None:
    """One call rewrites `current` to meet the checks it failed, and only those, keeping
    everything else (ANSWER_REWRITE_USER, memoised under `e/rewrite:<round>`); the rewrite
    checked, with its repaired form (`checked_candidates`). None when the call gave no usable
    text (noted). Its text is written to `stream` as it comes, provisional: the host checks it
    before it may be published.

    One targeted call, not a critique then a refinement: prompted self-critique does not help
    models of 1B and under (SCORE, arXiv 2404.17140), and the host's checks already say what
    is wrong, in words, which is all a critique added."""
    data = RewriteAnswerInput(
        request=run.request, answer=current.text, failed_checks=failed_in_words(current.evaluation)
    )
    scope = memo_scope("e", "rewrite", step=str(round))
    sink = stream.sink(f"refinement:{round}", True)
    try:
        reply = await session.text(PromptId.ANSWER_REWRITE_USER, data, scope=scope, sink=sink)
    except LLMFailure as error:
        run.notes.append(summaries.failure_note("E", f"rewrite {round}", error, "not rewritten"))
        return None
    why = unusable(reply, run.request)
    if why is not None:
        run.notes.append(f"phase E: rewrite {round} was not used: {why}")
        return None
    text = clip(reply.text.strip(), settings.max_step_output_chars)
    return await checked_candidates(run, "refinement", text, settings, round)


def rewrite_rounds(run: RunState, settings: LoopSettings) -> int:
    """The rewrites the answer may get: AEON_ANSWER_REFINE_ROUNDS, one at most at effort low
    (the draft path: the draft, the host's repairs, one rewrite)."""
    rounds = settings.answer_refine_rounds
    return min(rounds, 1) if run.effort == "low" else rounds


def gained(rules: Sequence[Rule], rewritten: Sequence[Candidate], source: Candidate) -> bool:
    """Whether a rewrite (or its repaired form) holds more fail-severity checks than `source`,
    the text it rewrote. One that does not leaves the next round the same text and the same
    failed checks to rewrite: on SmolLM2 that was one more sample of a call that had just
    failed, at the price of the request and the whole answer again."""
    before = held(rules, source.evaluation)
    return any(held(rules, each.evaluation) > before for each in rewritten)


def broke(rewritten: Candidate, source: Candidate) -> list[str]:
    """The fail-severity checks `source` held that its rewrite fails: such a rewrite is not
    published (it traded a check the user had for another)."""
    held_before = {r.id for r in source.evaluation.rule_results if r.verdict == "pass"}
    return [f.id for f in rewritten.evaluation.failed if f.id in held_before]


@dataclass(frozen=True)
class Verified:
    """What checking a run's answer came to: the candidate to publish, among all of them."""

    chosen: Candidate
    #: Every candidate, oldest first: the draft, the answer, each refinement.
    candidates: tuple[Candidate, ...]
    rules: tuple[Rule, ...]

    @property
    def failed(self) -> bool:
        """A fail-severity check does not hold on the published text."""
        return not all_hold(self.chosen.evaluation)


async def draft_only(run: RunState, draft_text: str, settings: LoopSettings) -> Verified:
    """The draft of a run that ended at Phase A on it (phases.exits.draft_suffices), checked,
    and repaired where the host can (`checked_candidates`)."""
    candidates = await checked_candidates(run, "draft", draft_text, settings)
    return Verified(best(candidates), tuple(candidates), tuple(run.rules))


async def verified(
    session: LLMSession,
    run: RunState,
    answer: str | None,
    settings: LoopSettings,
    may_go_on: Callable[[], bool],
    *,
    loop_converged: bool = True,
    stream: AnswerStream = NO_STREAM,
) -> Verified:
    """The candidates, oldest first: the draft (if the run has one), the answer, then a
    rewrite of the best so far per round, each followed by its repaired form where the host's
    repairs make it hold more (`checked_candidates`, before any model call: a repaired answer
    that holds every check is not rewritten), while a fail-severity check does not hold on the
    best, the rounds last, and `may_go_on()` says the run has time for another; and the one to
    publish (`best`, told whether the loop converged).

    `answer` None: the model wrote no answer of its own, since no pass ran, and the draft is
    the text rewritten; the checks are the outside signal either way. A rewrite that breaks a
    check the text it rewrote held is not a candidate (`broke`): noted, and the rounds end; so
    do they after a rewrite that holds no more checks than the text it rewrote (`gained`).

    A round that cannot start (the token budget is spent, the LLM server is away) ends the
    rounds with a note: the candidates in hand are still published. A candidate a round sets
    out to rewrite is set aside on `stream` first (its rewrite replaces it there).
    """
    candidates = await checked_candidates(run, "draft", run.draft, settings) if run.draft else []
    if answer is not None:
        candidates += await checked_candidates(run, "answer", answer, settings)
    for round in range(1, rewrite_rounds(run, settings) + 1):
        current = best(candidates, loop_converged=loop_converged)
        if all_hold(current.evaluation) or not may_go_on():
            break
        await stream.set_aside()
        try:
            rewritten = await rewrite(session, run, current, round, settings, stream)
        except (BudgetExhausted, LLMUnreachable) as error:
            run.notes.append(f"phase E: rewrite {round} could not start: {error}")
            break
        if rewritten is None:
            break
        if lost := broke(best(rewritten, loop_converged=loop_converged), current):
            run.notes.append(
                f"phase E: rewrite {round} was not used: it broke {', '.join(lost)}, which held"
            )
            break
        candidates += rewritten
        if not gained(run.rules, rewritten, current):
            run.notes.append(
                f"phase E: rewrite {round} held no more checks than the text it rewrote; "
                "the rewrites end (another would rewrite the same text for the same checks)"
            )
            break
    chosen = best(candidates, loop_converged=loop_converged)
    return Verified(chosen, tuple(candidates), tuple(run.rules))


def never_held(rules: Sequence[Rule], candidates: Sequence[Candidate]) -> list[str]:
    """The fail-severity rules no candidate held, the draft included: what this model did not
    meet however it was asked (which says nothing of whether another could)."""
    if len(candidates) < 2:
        return []
    failed_everywhere = set.intersection(*({f.id for f in c.evaluation.failed} for c in candidates))
    return [rule.id for rule in fail_rules(rules) if rule.id in failed_everywhere]


def on_material(prepared: dict[str, list[Check]]) -> dict[str, list[Check]]:
    """The prepared checks a pass's material is judged by in Phase C: those that ask for
    something to be in it (a pattern present, a phrase at least so often). The material is
    working text, the steps' outputs side by side, not the answer: its length, shape, opening,
    case or language say nothing of the answer's, so those checks are judged on the answer
    only (Phase E), and a rule left without a check here is not judged in the pass."""
    return {
        rule_id: [c for c in checks if asks_presence(c)] for rule_id, checks in prepared.items()
    }
