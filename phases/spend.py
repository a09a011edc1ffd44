"""Spend that follows need: which of Phase A's calls a request is worth (docs/verified-answers.md,
"Spend that follows need").

The host's checks are the verifier; every call after the draft is a way to get a candidate that
holds more of them. So the host decides, from the request alone, what to ask the model for:

- **the profile** only where it can change the run's path (`needs_profile`): a request with
  tools or files to use, one whose plan a person asked to see, or one of more than one short ask
  with no check to hold its draft to. At the default effort a request with checks and nothing to
  use but its own words ends on the draft path whatever a profile says (phases.exits
  .draft_suffices), and a simple ask's profile would only say "no more than the draft", which
  the host reads itself (a weak model rates "What is the capital of France?" depth 3, its
  format's example, and sends it through a plan it cannot make: issue 33);
- **PREPARE** only when a rule's check is in words the host's reader (checks.stated) does not
  read, or the request has constraint language the reader did not turn into a check
  (`needs_prepare`): what the reader read needs no model to check.

Pure: each function decides from what it is given.
"""

from __future__ import annotations

import re

from aeonloop.checks.stated import clauses, one_short_ask, read_rule, stated_constraints
from aeonloop.phases.events import RunState
from aeonloop.phases.models import Rule, fail_rules

#: Words that ask for a shape or a measure a check could hold an answer to: counts of units,
#: case, formats, wrappings, exact openings and endings, words to use or avoid, the language.
#: A request that says none of them states no checkable constraint the reader could have missed.
CONSTRAINT_WORDS = re.compile(
    r"\b(?:words?|sentences?|paragraphs?|bullet(?:ed|s)?|numbered|items?|lines?|sections?"
    r"|characters?|letters?|lower\s*-?\s*case|upper\s*-?\s*case|capitali[sz]ed|all\s+caps"
    r"|json|yaml|markdown|table|csv|quot(?:es?|ed|ation\s+marks?)|title|commas?"
    r"|p\.\s?s\.|postscript|highlight(?:ed)?|keywords?|placeholders?"
    r"|(?:start|begin|end|finish|open|close)(?:s|ing)?\s+with"
    r"|(?:do\s+not|don't|never|without|avoid)\s+(?:us(?:e|ing)|say(?:ing)?|mention(?:ing)?)"
    r"|(?:respond|answer|reply|write)\s+(?:only\s+)?in\s+[A-Z][a-z]+)\b",
    re.IGNORECASE,
)


def simple_ask(run: RunState, *, tools_available: bool) -> bool:
    """A request with no tools to use and no files, that is one short ask as the host reads it
    (checks.stated.one_short_ask): it never asks the model for a profile."""
    return not tools_available and not run.file_paths and one_short_ask(run.request)


def needs_profile(run: RunState, *, tools_available: bool, simple: bool) -> bool:
    """Whether the model's profile can change what the run does, so is worth its call: always
    at effort high (the loop runs, and its passes follow the profile), never at low (the draft
    path only); at medium, for a request whose plan a person asked to see, or with tools or
    files to use, or that is not a simple ask and has no check known before any call (no
    fail-severity rule, and nothing the host's reader reads): the run's end then turns on the
    profile (phases.exits.draft_suffices)."""
    if run.effort != "medium":
        return run.effort == "high"
    if run.approve_plan or tools_available or run.file_paths:
        return True
    return not simple and not checked_before_calls(run)


def checked_before_calls(run: RunState) -> bool:
    """The run has a fail-severity check before the model is asked anything: a rule the
    request gives, or a constraint the host's reader reads in the request (checks.stated)."""
    return bool(fail_rules(run.rules)) or bool(stated_constraints(run.request))


def unread_constraints(request: str) -> list[str]:
    """The clauses of `request` that use constraint language (CONSTRAINT_WORDS) in which the
    host's reader reads no check: what PREPARE may turn into one. Each clause is read on its
    own, so a clause the reader reads does not vouch for another it does not."""
    return [
        clause
        for clause in clauses(request)
        if CONSTRAINT_WORDS.search(clause) and not stated_constraints(clause)
    ]


def unread_rules(run: RunState) -> list[Rule]:
    """The rules whose check is in words in which the host's reader reads no check
    (checks.stated.read_rule): the rules PREPARE is shown."""
    return [rule for rule in run.rules if isinstance(rule.check, str) and not read_rule(rule.check)]


def needs_prepare(run: RunState) -> bool:
    """Whether PREPARE is worth its call: a rule's check is in words the host's reader does not
    read (`unread_rules`), or the request has constraint language the reader did not turn into
    a check (`unread_constraints`)."""
    return bool(unread_rules(run)) or bool(unread_constraints(run.request))
