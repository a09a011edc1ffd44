"""The limits a run is held to, in one place: the caps every request is checked against, and
the bounds a deployment sets for its runs (`LoopSettings`, AEON_MAX_PASSES and the rest).

A gateway checks a request against them before publishing it (gateway.validation), and the
phases keep them while the run goes on (phases.events, phases.deps). Both import them from
here: a module of the settings layer that imports only Pydantic and settings.py, so a gateway
that checks a request loads no pipeline (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

from aeonloop.settings import AeonSettings, core

#: AEON_MAX_PASSES unless set: the most passes a run may take, whatever its request asks.
DEFAULT_MAX_PASSES = 8
#: The highest AEON_MAX_PASSES may be set (and so the most passes any request may allow itself).
MAX_TTL_CAP = 100
#: The longest request, in characters.
MAX_REQUEST_CHARS = 20_000
#: The longest a request may run: a week, as long as its answer is kept by default.
MAX_TIMEOUT_S = 7 * 24 * 3600
#: The largest token budget a run may have: far above any run's use, and within the 64-bit
#: integers every JSON encoder on the way takes.
MAX_TOKEN_BUDGET = 10**12
#: The most files a request event may carry, whatever a producer sends: gateways hold requests
#: to AEON_MAX_FILES, which may not be set above it (gateway.validation.FileSettings).
MAX_FILES_CAP = 100
#: The most earlier turns a request event may carry, whatever a producer sends: gateways hold
#: requests to AEON_MAX_TURNS, which may not be set above it (gateway.validation.TurnSettings).
MAX_TURNS_CAP = 200
#: The longest path an attached file may be named by.
MAX_FILE_PATH_CHARS = 1_000
#: The most tool names a request may narrow its tools to.
MAX_TOOLS = 100
#: A tool's name, as a request names it: no spaces or control characters, at most 128 (MCP
#: servers name tools in far fewer).
TOOL_NAME_PATTERN = r"^[^\s\x00-\x1f\x7f]{1,128}$"
ToolName = Annotated[str, Field(pattern=TOOL_NAME_PATTERN)]
#: AEON_LLM_CONTEXT_TOKENS unless set: the model's context window every prompt is fitted to.
DEFAULT_CONTEXT_TOKENS = 32_768
#: Seconds of matching one pattern may take, unless AEON_CHECK_PATTERN_TIMEOUT_S says otherwise.
DEFAULT_PATTERN_TIMEOUT_S = 0.5
#: CPU seconds all of one run's checks may take together, unless AEON_RUN_CHECK_CPU_S says
#: otherwise: twenty patterns that each run out of their bound. A run's usual checks take
#: milliseconds.
DEFAULT_RUN_CHECK_CPU_S = 10.0
#: The most rules a request may carry.
MAX_RULES = 100
#: The most of them whose check is a regular expression the request wrote (a content check's
#: `search`, a `pattern` check): the checks whose time a request decides. Enough for any rules
#: file a person writes; a run's AEON_RUN_CHECK_CPU_S bounds what they cost whatever the count.
MAX_PATTERN_RULES = 20

Whole = Annotated[int, Field(ge=1)]


#: How hard a run works (AEON_EFFORT, a request's `effort`): `low`, the draft path only (the
#: draft and its samples, the host's repairs, one rewrite); `medium`, the loop only where it has
#: something to add (docs/verified-answers.md, "Spend that follows need"); `high`, the loop even
#: for a simple ask.
Effort = Literal["low", "medium", "high"]
EFFORTS: tuple[Effort, ...] = get_args(Effort)
DEFAULT_EFFORT: Effort = "medium"


class LoopSettings(AeonSettings):
    """Bounds of a run; every one is an environment setting AEON_<FIELD> (docs/configuration.md).

    The core settings among them say how hard a run works (its effort), how much it may do
    (its passes, its tokens) and what the model can take (docs/configuration.md, "The core").
    """

    #: How hard a run works unless its request says (`Effort`); read by workers (Phases A, E).
    effort: Annotated[
        Effort,
        core(
            "low: the draft path only; medium: the loop where it adds something; high: the "
            "loop always (medium)"
        ),
    ] = DEFAULT_EFFORT

    #: The one cap on passes: a request's max_ttl may ask for fewer, never more (gateways
    #: refuse it; Phase A caps a request from elsewhere), and a run's TTL never exceeds it.
    max_passes: Annotated[
        int,
        Field(ge=1, le=MAX_TTL_CAP),
        core(f"the most passes a run may take, 1 to {MAX_TTL_CAP} ({DEFAULT_MAX_PASSES})"),
    ] = DEFAULT_MAX_PASSES
    max_actions_per_pass: Whole = 5
    #: Plan steps of one run whose LLM calls may be in flight at once (phase_c.execute).
    max_parallel_steps: Whole = 4
    max_refinements_per_run: Annotated[int, Field(ge=0)] = 20
    stagnation_epsilon: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.02
    allow_executable_checks: bool = False
    executable_check_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 10.0
    #: Seconds the patterns of one check (a rule's or a prepared one) may match, together, before
    #: the check fails (checks.running.run_check): a check never holds a worker thread longer.
    check_pattern_timeout_s: Annotated[float, Field(gt=0, le=60, allow_inf_nan=False)] = (
        DEFAULT_PATTERN_TIMEOUT_S
    )
    #: CPU seconds all of a run's checks may take together, across its drafts, passes and
    #: candidates (checks.threads.RunBudget); past them each further check fails, saying so.
    run_check_cpu_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = (
        DEFAULT_RUN_CHECK_CPU_S
    )
    #: The model's context window in tokens: every prompt is fitted to it (AEON_LLM_CONTEXT_TOKENS).
    llm_context_tokens: Annotated[
        Whole,
        core(
            f"the model's context window, in tokens ({DEFAULT_CONTEXT_TOKENS:,}); set a small "
            "model's own"
        ),
    ] = DEFAULT_CONTEXT_TOKENS
    #: Characters of a step's output kept in the run's history; the rest is cut with a marker,
    #: so model verbosity cannot grow a run's records (or its prompts) without bound.
    max_step_output_chars: Whole = 20_000
    #: The token budget of a run whose request sets none (AEON_RUN_TOKEN_BUDGET); None: no cap.
    run_token_budget: Annotated[
        Whole | None, core("the tokens a run may spend unless its request says (unset: no cap)")
    ] = None
    #: Rounds of critique and refinement the answer may get while a fail-severity check does
    #: not hold on it (AEON_ANSWER_REFINE_ROUNDS; 0: the answer is checked, never refined).
    answer_refine_rounds: Annotated[int, Field(ge=0, le=10)] = 2
    #: Plain drafts Phase A may take while the last fails a fail-severity check
    #: (AEON_DRAFT_SAMPLES; 1: the first draft only). Each is one plain call, a small part of a
    #: plan's cost; the samples stop at the first that holds every check, or at one that
    #: repeats an earlier (a model that answers alike each time has nothing more to give).
    #: 8, as the quality bench's best of k goes to: on SmolLM2 the best of 8 plain calls held
    #: 40 rules of 47 where the draft path with 4 held 39 (docs/benchmarks.md), and the samples
    #: stop at the first that holds every check, so a request the first meets pays for one.
    draft_samples: Annotated[int, Field(ge=1, le=10)] = 8
    #: Seconds one tool call may take (never past the run's deadline); past it the step fails.
    tool_timeout_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 30.0
