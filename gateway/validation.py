"""Bad input is refused at the gateway, with a message a person can act on, before anything is
published: an empty, oversized or binary request, or a rules file that does not parse or breaks
the rule schema.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import TypeAdapter, ValidationError

from aeonloop.exceptions import BadInput
from aeonloop.phases.events import MAX_REQUEST_CHARS, MAX_TIMEOUT_S, MAX_TOKEN_BUDGET
from aeonloop.phases.models import MAX_TTL_CAP, Rule

MAX_RULES = 100
MAX_RULES_FILE_BYTES = 1_000_000
_ALLOWED_CONTROLS = {"\n", "\r", "\t"}
_RULES = TypeAdapter(list[Rule])
T = TypeVar("T")
_STREAM_ID = re.compile(r"\d+-\d+")


def check_request(text: str) -> str:
    """The request, stripped, if it is something a model can be asked; else BadInput."""
    if not text or not text.strip():
        raise BadInput("the request is empty: say what you want answered")
    if len(text) > MAX_REQUEST_CHARS:
        raise BadInput(
            f"the request is {len(text):,} characters; the limit is {MAX_REQUEST_CHARS:,}"
        )
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise BadInput("the request is not valid UTF-8 text (binary data?)")
    controls = [c for c in text if unicodedata.category(c) == "Cc" and c not in _ALLOWED_CONTROLS]
    if controls:
        raise BadInput(
            f"the request contains {len(controls)} control character(s) such as "
            f"{controls[0]!r}: binary data is not a request"
        )
    return text.strip()


def check_max_ttl(max_ttl: int | None, max_passes: int) -> int | None:
    """A cap on passes a request may ask for: 1 to `max_passes` (AEON_MAX_PASSES), the one cap
    every run is held to, so a larger one would silently do nothing. None asks for that cap."""
    if max_ttl is None:
        return None
    if max_ttl < 1:
        raise BadInput(
            f"max TTL {max_ttl} is not a number of passes from 1 to {max_passes} (AEON_MAX_PASSES)"
        )
    if max_ttl > max_passes:
        raise BadInput(
            f"max TTL {max_ttl} is above AEON_MAX_PASSES={max_passes}, the most passes a run may "
            f"take here: ask for {max_passes} or fewer, or set AEON_MAX_PASSES higher (at most "
            f"{MAX_TTL_CAP}) where Aeon runs"
        )
    return max_ttl


def check_token_budget(budget: int | None) -> int | None:
    """A run's token budget: a whole number of tokens, 1 to MAX_TOKEN_BUDGET; None leaves the
    workers' AEON_RUN_TOKEN_BUDGET (or no cap)."""
    if budget is not None and not 1 <= budget <= MAX_TOKEN_BUDGET:
        raise BadInput(
            f"token budget {budget} is not a number of tokens from 1 to {MAX_TOKEN_BUDGET:,}; "
            "leave it out for the deployment's AEON_RUN_TOKEN_BUDGET"
        )
    return budget


def check_timeout(timeout: float) -> float:
    """Seconds a request may run: more than 0, at most MAX_TIMEOUT_S (a week)."""
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise BadInput(
            f"timeout {timeout:g} is not a number of seconds above 0 and at most "
            f"{MAX_TIMEOUT_S:,} (a week)"
        )
    return timeout


def check_stream_id(entry_id: str) -> str:
    """A Redis stream entry id as Redis prints it, e.g. 1732300000000-0."""
    if not _STREAM_ID.fullmatch(entry_id):
        raise BadInput(f"{entry_id!r} is not an entry id; ids look like 1732300000000-0")
    return entry_id


def load_rules(path: str | Path) -> list[Rule]:
    """Rules from a JSON file: a list of rules, or {"rules": [...]} (docs/requirements.md)."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as error:
        raise BadInput(f"cannot read rules file {file}: {error.strerror}") from None
    if len(raw) > MAX_RULES_FILE_BYTES:
        raise BadInput(f"rules file {file} is over {MAX_RULES_FILE_BYTES:,} bytes")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BadInput(f"rules file {file} is not valid JSON: {error}") from None
    return parse_rules(data, source=str(file))


def parse_rules(data: object, source: str = "rules") -> list[Rule]:
    if isinstance(data, dict) and "rules" in data:
        data = data["rules"]
    if not isinstance(data, list):
        raise BadInput(f'{source}: expected a list of rules or {{"rules": [...]}}')
    if len(data) > MAX_RULES:
        raise BadInput(f"{source}: {len(data)} rules; the limit is {MAX_RULES}")
    try:
        rules = _RULES.validate_python(data)
    except ValidationError as error:
        problems = "; ".join(
            f"rule {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5]
        )
        raise BadInput(f"{source} breaks the rule schema: {problems}") from None
    ids = [r.id for r in rules]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise BadInput(f"{source}: rule ids must be unique; repeated: {', '.join(repeated)}")
    return rules


def as_option(check: Callable[[T], T], kind: Callable[[str], T], what: str) -> Callable[[str], T]:
    """An argparse type: `text` read as `kind` and passed through `check` (BadInput says why).

    argparse names the type function in its own messages ("invalid _check value"); raising
    ArgumentTypeError with our words keeps internal names out of what a person reads.
    """

    def parse(text: str) -> T:
        try:
            return check(kind(text))
        except ValueError as error:  # BadInput is a ValueError
            reason = str(error) if isinstance(error, BadInput) else f"{text!r} is not {what}"
            raise argparse.ArgumentTypeError(reason) from None

    return parse
