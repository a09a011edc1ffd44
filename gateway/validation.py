"""Bad input is refused at the gateway, with a message a person can act on, before anything is
published: an empty, oversized or binary request, a rules file that does not parse or breaks
the rule schema or carries more rules (or more of its own regular expressions) than a request
may (aeonloop.limits: MAX_RULES, MAX_PATTERN_RULES), attached files past AEON_MAX_FILES and the
byte limits, or not text, or earlier turns past AEON_MAX_TURNS and AEON_MAX_TURNS_CHARS, or not
text.

A request's fields are checked by one function, `request_checks`, whichever gateway took it:
the Python client's `submit`, `aeon ask` (before it starts anything) and the HTTP API (which
names the field at fault) all call it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import Field, TypeAdapter, ValidationError

from aeonloop.checks.types import PatternCheck
from aeonloop.contracts import AttachedFile, Turn
from aeonloop.exceptions import BadInput, TooLarge
from aeonloop.limits import (
    MAX_FILE_PATH_CHARS,
    MAX_FILES_CAP,
    MAX_PATTERN_RULES,
    MAX_REQUEST_CHARS,
    MAX_RULES,
    MAX_TIMEOUT_S,
    MAX_TOKEN_BUDGET,
    MAX_TOOLS,
    MAX_TTL_CAP,
    MAX_TURNS_CAP,
    TOOL_NAME_PATTERN,
)
from aeonloop.phases.models import Rule, RuleCheck
from aeonloop.settings import AeonSettings

if TYPE_CHECKING:
    from aeonloop.webhooks.policy import WebhookSettings

#: The largest JSON file a command line may name (`--rules`, `--plan`).
MAX_JSON_FILE_BYTES = 1_000_000
_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)
_ALLOWED_CONTROLS = {"\n", "\r", "\t"}
#: A file may also hold form feeds: source files use them to break pages.
_ALLOWED_IN_FILES = {*_ALLOWED_CONTROLS, "\f"}
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
    if _surrogates(text):
        raise BadInput("the request is not valid UTF-8 text (binary data?)")
    controls = _controls(text, _ALLOWED_CONTROLS)
    if controls:
        raise BadInput(
            f"the request contains {len(controls)} control character(s) such as "
            f"{controls[0]!r}: binary data is not a request"
        )
    return text.strip()


def _surrogates(text: str) -> bool:
    """Whether `text` holds lone surrogates: bytes that were not UTF-8 (surrogateescape), or a
    JSON string's unpaired \\ud800 escapes."""
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _controls(text: str, allowed: set[str]) -> list[str]:
    return [c for c in text if unicodedata.category(c) == "Cc" and c not in allowed]


class FileSettings(AeonSettings):
    """Limits on the files a request attaches (docs/configuration.md): every gateway holds a
    request to them before publishing it. The total keeps a request's event within
    AEON_MAX_EVENT_BYTES, which the client checks too (`check_event_size`)."""

    #: Files one request may attach; 0 refuses any.
    max_files: Annotated[int, Field(ge=0, le=MAX_FILES_CAP)] = 10
    #: Bytes (UTF-8) one attached file may hold.
    max_file_bytes: Annotated[int, Field(ge=1)] = 200_000
    #: Bytes (UTF-8) a request's attached files may hold together.
    max_files_bytes: Annotated[int, Field(ge=1)] = 500_000


def check_files(files: Sequence[AttachedFile], limits: FileSettings) -> list[AttachedFile]:
    """The files, if a request may attach them: no more than AEON_MAX_FILES, each named once,
    each text within AEON_MAX_FILE_BYTES, all within AEON_MAX_FILES_BYTES; else BadInput (a
    file that is not text, too many, a name twice) or TooLarge (a limit on bytes)."""
    if len(files) > limits.max_files:
        raise BadInput(
            f"{len(files)} files attached; the limit is {limits.max_files} (AEON_MAX_FILES)"
        )
    seen: set[str] = set()
    total = 0
    for file in files:
        _check_path(file.path, seen)
        size = len(file.content.encode("utf-8", "surrogatepass"))
        check_file_size(file.path, size, limits)
        _check_text(file.path, file.content)
        total += size
    if total > limits.max_files_bytes:
        raise TooLarge(
            f"the attached files hold {total:,} bytes together; the limit is "
            f"{limits.max_files_bytes:,} (AEON_MAX_FILES_BYTES)"
        )
    return list(files)


def check_file_size(path: str, size: int, limits: FileSettings) -> None:
    """TooLarge naming the file when it holds more than AEON_MAX_FILE_BYTES."""
    if size > limits.max_file_bytes:
        raise TooLarge(
            f"file {path} is {size:,} bytes; the limit is {limits.max_file_bytes:,} "
            "(AEON_MAX_FILE_BYTES)"
        )


def _check_path(path: str, seen: set[str]) -> None:
    if not path.strip() or len(path) > MAX_FILE_PATH_CHARS or _controls(path, set()):
        raise BadInput(
            f"file path {path[:60]!r} is not a name: 1 to {MAX_FILE_PATH_CHARS:,} characters, "
            "without control characters"
        )
    if path in seen:
        raise BadInput(f"file {path} is attached twice; attach each file once")
    seen.add(path)


def _check_text(path: str, content: str) -> None:
    """BadInput unless `content` is text: valid UTF-8 without control characters but tab,
    line breaks and form feed (a NUL byte, say, is binary)."""
    if _surrogates(content):
        raise _not_utf8(path)
    controls = _controls(content, _ALLOWED_IN_FILES)
    if controls:
        raise BadInput(
            f"file {path} is not text: it holds {len(controls)} control character(s) such as "
            f"{controls[0]!r}; attach text files only"
        )


def _not_utf8(path: str) -> BadInput:
    return BadInput(f"file {path} is not text (not valid UTF-8): attach text files only")


class TurnSettings(AeonSettings):
    """Limits on the earlier turns a request carries (docs/configuration.md): every gateway
    holds a request to them before publishing it, as it holds its files to FileSettings."""

    #: Earlier turns one request may carry; 0 refuses any.
    max_turns: Annotated[int, Field(ge=0, le=MAX_TURNS_CAP)] = 50
    #: Characters a request's earlier turns may hold together.
    max_turns_chars: Annotated[int, Field(ge=1)] = 200_000


def check_turns(turns: Sequence[Turn], limits: TurnSettings) -> list[Turn]:
    """The turns, if a request may carry them: no more than AEON_MAX_TURNS, each text, all
    within AEON_MAX_TURNS_CHARS; else BadInput (too many, one not text) or TooLarge (the
    characters)."""
    if len(turns) > limits.max_turns:
        raise BadInput(
            f"{len(turns)} earlier turns; the limit is {limits.max_turns} (AEON_MAX_TURNS): "
            "send fewer"
        )
    total = 0
    for number, turn in enumerate(turns, 1):
        if _surrogates(turn.content) or _controls(turn.content, _ALLOWED_IN_FILES):
            raise BadInput(
                f"earlier turn {number} is not text (control characters or not valid UTF-8)"
            )
        total += len(turn.content)
    if total > limits.max_turns_chars:
        raise TooLarge(
            f"the earlier turns hold {total:,} characters together; the limit is "
            f"{limits.max_turns_chars:,} (AEON_MAX_TURNS_CHARS)"
        )
    return list(turns)


def read_files(paths: Sequence[str], limits: FileSettings) -> list[AttachedFile]:
    """The files at `paths` (`aeon ask --file`), named as given, checked as `check_files`
    checks any request's; a file over AEON_MAX_FILE_BYTES is refused before it is read."""
    if len(paths) > limits.max_files:
        raise BadInput(
            f"{len(paths)} files attached; the limit is {limits.max_files} (AEON_MAX_FILES)"
        )
    seen: set[str] = set()
    for path in paths:
        _check_path(path, seen)
    return check_files([_read_file(path, limits) for path in paths], limits)


def _read_file(path: str, limits: FileSettings) -> AttachedFile:
    try:
        with Path(path).open("rb") as file:
            check_file_size(path, os.fstat(file.fileno()).st_size, limits)
            raw = file.read(limits.max_file_bytes + 1)  # it may have grown since
    except OSError as error:
        raise BadInput(f"cannot read file {path}: {error.strerror}") from None
    check_file_size(path, len(raw), limits)
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _not_utf8(path) from None
    return AttachedFile(path=path, content=content)


def check_event_size(size: int, limit: int) -> None:
    """TooLarge when a request's event, its files included, is over AEON_MAX_EVENT_BYTES: the
    workers would refuse it (bus.codec), so it is refused before it is published."""
    if size > limit:
        raise TooLarge(
            f"the request and its files make an event of {size:,} bytes; the limit is "
            f"{limit:,} (AEON_MAX_EVENT_BYTES): attach less"
        )


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


def check_tools(names: Sequence[str] | None) -> list[str] | None:
    """The tools a request narrows its run to: names as MCP servers give them (no spaces or
    control characters, at most 128 characters), each once, at most MAX_TOOLS. None leaves
    every tool the deployment has; [] allows none."""
    if names is None:
        return None
    if len(names) > MAX_TOOLS:
        raise BadInput(f"{len(names)} tools named; a request may name at most {MAX_TOOLS}")
    wanted = list(dict.fromkeys(name.strip() for name in names))
    for name in wanted:
        if not _TOOL_NAME.fullmatch(name):
            raise BadInput(
                f"{name[:130]!r} is not a tool name: 1 to 128 characters, no spaces or control "
                "characters"
            )
    return wanted


def unknown_tools(wanted: Sequence[str] | None, known: Sequence[str]) -> None:
    """BadInput naming the tools a request names that none of the servers offers, where the
    gateway knows them (the embedded stack's own toolbox): a narrowing can never add one."""
    missing = [name for name in wanted or () if name not in known]
    if missing:
        offered = ", ".join(sorted(known)) or "none (AEON_MCP_CONFIG is unset)"
        raise BadInput(f"no tool named {', '.join(missing)} is configured; the tools: {offered}")


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


@dataclass(frozen=True)
class RequestLimits:
    """What a gateway holds a request to beyond the caps every request has (aeonloop.limits):
    the deployment's AEON_MAX_PASSES, the webhooks it allows, the files and the earlier turns
    it takes."""

    max_passes: int
    webhooks: WebhookSettings
    files: FileSettings
    turns: TurnSettings = field(default_factory=TurnSettings.from_env)


def request_checks(
    limits: RequestLimits,
    request: str,
    *,
    max_ttl: int | None = None,
    timeout: float,
    token_budget: int | None = None,
    webhook_url: str | None = None,
    files: Sequence[AttachedFile] = (),
    tools: Sequence[str] | None = None,
    messages: Sequence[Turn] = (),
    names: Mapping[str, str] | None = None,
) -> dict[str, Callable[[], Any]]:
    """Each field of a request and its check, by field, in the order a gateway makes them:
    each returns the field's value as RequestSubmitted.new takes it, or raises BadInput
    (TooLarge past a limit on bytes). Kept as checks, not run, so the HTTP API can name the
    field at fault; `names` are how the caller's messages name a field (`--webhook-url`)."""
    named = names or {}
    return {
        "request": lambda: check_request(request),
        "max_ttl": lambda: check_max_ttl(max_ttl, limits.max_passes),
        "timeout": lambda: check_timeout(timeout),
        "token_budget": lambda: check_token_budget(token_budget),
        "webhook_url": lambda: limits.webhooks.checked(
            webhook_url, named.get("webhook_url", "webhook_url")
        ),
        "files": lambda: check_files(files, limits.files),
        "tools": lambda: check_tools(tools),
        "messages": lambda: check_turns(messages, limits.turns),
    }


def checked_request(limits: RequestLimits, request: str, **fields: Any) -> dict[str, Any]:
    """A request's fields, every one checked (`request_checks`); the first at fault raises."""
    return {field: check() for field, check in request_checks(limits, request, **fields).items()}


def check_stream_id(entry_id: str) -> str:
    """A Redis stream entry id as Redis prints it, e.g. 1732300000000-0."""
    if not _STREAM_ID.fullmatch(entry_id):
        raise BadInput(f"{entry_id!r} is not an entry id; ids look like 1732300000000-0")
    return entry_id


def read_json_file(path: str | Path, option: str) -> object:
    """A JSON file a command line names (`--rules`, `--plan`): BadInput naming `option` and the
    file when it cannot be read, is over MAX_JSON_FILE_BYTES, or is not JSON."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as error:
        raise BadInput(f"{option}: cannot read {file}: {error.strerror}") from None
    if len(raw) > MAX_JSON_FILE_BYTES:
        raise BadInput(f"{option}: {file} is over {MAX_JSON_FILE_BYTES:,} bytes")
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise BadInput(f"{option}: {file} is not valid JSON: {error}") from None


def load_rules(path: str | Path) -> list[Rule]:
    """Rules from a JSON file: a list of rules, or {"rules": [...]} (docs/requirements.md)."""
    return parse_rules(read_json_file(path, "--rules"), source=str(path))


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
    patterned = [rule.id for rule in rules if _writes_pattern(rule)]
    if len(patterned) > MAX_PATTERN_RULES:
        raise BadInput(
            f"{source}: {len(patterned)} rules check a regular expression of their own (a content "
            f"check's search, a pattern check); the limit is {MAX_PATTERN_RULES}: merge patterns "
            "(one alternation), or check words with phrase_count or forbidden_words"
        )
    return rules


def _writes_pattern(rule: Rule) -> bool:
    """Whether the rule's check is a regular expression the request wrote: the checks whose
    time a request decides (a literal phrase or word is matched in linear time)."""
    check = rule.check
    if isinstance(check, RuleCheck):
        return check.type == "content"
    return isinstance(check, PatternCheck)


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


def port_option(lowest: int = 1) -> Callable[[str], int]:
    """An argparse type for a port number from `lowest` to 65535; a lowest of 0 lets 0 ask
    for any free port (`aeon serve --port`, as AEON_HTTP_PORT does)."""
    bounds = f"from {lowest}{' (any free one)' if lowest == 0 else ''} to 65535"

    def port(value: int) -> int:
        if not lowest <= value <= 65535:
            raise BadInput(f"{value} is not a port number {bounds}")
        return value

    return as_option(port, int, f"a port number {bounds}")
