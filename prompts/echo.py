"""Aeon's own words in a model's reply: instruction or example text copied back, and ids that
are not clean ids.

A small model shown a reply format copies it: SmolLM2-135M answered a request with the answer
format's example sentence, planned with the plan format's example goal, and wrote the step id
`s2,` (issue 32). Every such reply validates, so without a look at the words the host took
Aeon's own text for the model's work and published it. Two readings stop that:

- `instruction_echo(text)`: the instruction text a reply repeats, when most of it (more than
  MOSTLY of its words) is Aeon's own prompt text. A step output or an answer like that is not
  work (phases.phase_c fails the step; a JSON field like that makes its reply unusable).
  `quoted_instruction(text)` asks the same of each paragraph: what a published answer, which
  may open with the host's own account of the run, is held to.
- `unusable_reply(output)`: why a validated JSON reply is still unusable: a field that repeats
  Aeon's text, or an id (a field named `*_id`, `*_ids` or `depends_on`) that is not a clean id.
  The session (llm.session) gives such a reply the one repair call any unusable reply gets.

Each takes the run's `request`: words it has are the user's, whatever Aeon's text says too.

Aeon's text is read from the registry itself, never retyped here: each user prompt's fixed text
(its template without the fields it is rendered with), each system template file, each reply
format's example values, and the field descriptions of each output model's schema. A prompt
added or reworded is covered as soon as it is registered.

A copy is found by word runs: the reply's words are lower-cased and compared in windows of SPAN
words (a whole example value of fewer words counts as one window) with the windows of Aeon's
text; the share of the reply's words inside a matching window is the share copied. A reply of
fewer than MIN_WORDS words is never a copy: "Paris", "s1" or "moderate" may well be right.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from string import Formatter
from typing import Any

from pydantic import BaseModel

from aeonloop.exceptions import PromptNotFoundError
from aeonloop.prompts.compat import dump_model, json_schema
from aeonloop.prompts.registry import PromptId, PromptRegistry, default_registry
from aeonloop.prompts.unified import TEMPLATES_DIR

#: Words in a row that must match Aeon's text to count as copied.
SPAN = 5
#: The fewest words a text needs to be judged at all.
MIN_WORDS = 4
#: Share of a text's words that, copied, make the text Aeon's rather than the model's.
MOSTLY = 0.5
#: Fields that are data for something else, not the model's words: a tool step's arguments,
#: which the tool's own schema judges (their keys may well end in `_id`).
DATA_FIELDS = frozenset({"arguments"})
#: Characters of the echoed instruction `instruction_echo` gives back.
QUOTE_CHARS = 160

_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
#: What may not surround or split a clean id: white space at its ends, list punctuation,
#: quotes and brackets anywhere, a sentence's end at its end.
_ID_BREAKERS = re.compile(r"[,;\"'`()\[\]{}<>\n\t]|^\s|\s$|[.:!?]$")


#: ASCII bytes with every byte that is not a word character (`\w`: letters, digits, `_`) made
#: a space.
_ASCII_WORDS = bytes(
    byte if chr(byte).isascii() and _WORD.fullmatch(chr(byte)) else ord(" ") for byte in range(256)
)


def _words(text: str) -> tuple[str, ...]:
    r"""The text's words (`\w+`), case-folded. ASCII text, the common case, is split on what
    `_ASCII_WORDS` makes spaces: the same words, at a third of the regex's CPU."""
    if text.isascii():
        return tuple(text.lower().encode().translate(_ASCII_WORDS).decode().split())
    return tuple(_WORD.findall(text.casefold()))


@dataclass(frozen=True)
class _Corpus:
    """Aeon's text as word windows, each mapped to the phrase it was first found in."""

    windows: Mapping[tuple[str, ...], int]
    #: Whole phrases shorter than SPAN words (but at least MIN_WORDS), matched as one window.
    short: Mapping[tuple[str, ...], int]
    phrases: tuple[str, ...]
    #: Every pair of words in a row in any window: a window can match only where each pair of
    #: its words is one of these, so the scan looks windows up only there (`_stretches`).
    pairs: frozenset[tuple[str, str]]


def instruction_echo(
    text: str, registry: PromptRegistry | None = None, *, request: str = ""
) -> str | None:
    """The instruction or example text `text` repeats, when more than MOSTLY of its words are
    Aeon's own prompt text (the phrase it copies most of); None when it is the model's own.

    Words the `request` has in the same run are the user's, not Aeon's: a user who asks about
    what an example happens to be about gets answers that use the same words.
    """
    words = _words(text)
    if len(words) < MIN_WORDS:
        return None
    corpus = _corpus(registry or default_registry())
    users: frozenset[tuple[str, ...]] | None = None  # read only once a window matches
    copied = [False] * len(words)
    hits: Counter[int] = Counter()
    stretches = _stretches(words, corpus.pairs)
    for size, table in ((SPAN, corpus.windows), *((n, corpus.short) for n in _SHORT_SIZES)):
        for first, end in stretches:
            for start in range(first, end - size + 1):
                window = words[start : start + size]
                phrase = table.get(window)
                if phrase is None:
                    continue
                if users is None:
                    users = _runs(_words(request))
                if window not in users:
                    copied[start : start + size] = [True] * size
                    hits[phrase] += 1
    if sum(copied) <= MOSTLY * len(words):
        return None
    return _quoted(corpus.phrases[hits.most_common(1)[0][0]])


def _stretches(words: tuple[str, ...], pairs: frozenset[tuple[str, str]]) -> list[tuple[int, int]]:
    """The stretches of `words` (first, end) in which every two words in a row are a pair of
    Aeon's text, of at least a window's length: no window outside them can match.

    A model's own words seldom run on in Aeon's pairs for long, so most of a reply is passed
    over with one set lookup a word instead of a lookup a window and size: judging the replies
    of a run was the largest share of a loaded worker's CPU that prompts and replies took
    (`python -m bench`'s concurrency section, profiled with py-spy)."""
    stretches = []
    first = 0
    for index, pair in enumerate(itertools.pairwise(words)):
        if pair not in pairs:
            if index + 1 - first >= _SMALLEST:
                stretches.append((first, index + 1))
            first = index + 1
    if len(words) - first >= _SMALLEST:
        stretches.append((first, len(words)))
    return stretches


def quoted_instruction(
    text: str, registry: PromptRegistry | None = None, *, request: str = ""
) -> str | None:
    """The instruction text any paragraph of `text` mostly repeats (None: none does).

    Stricter than `instruction_echo` on the whole: an answer the host prefixed with its own
    account of the run (a degraded answer's opening) still counts when the part the model wrote
    is a copy. What a published answer is held to.
    """
    for paragraph in re.split(r"\n\s*\n", text):
        echoed = instruction_echo(paragraph, registry, request=request)
        if echoed is not None:
            return echoed
    return instruction_echo(text, registry, request=request)


def is_id_field(name: str) -> bool:
    """Whether a reply field holds ids the model copies from its prompt (a step's, a rule's)."""
    return name.endswith(("_id", "_ids")) or name == "depends_on"


def clean_id(value: str) -> bool:
    """An id as the prompt gives one: not empty, nothing around it, no list punctuation, quote
    or bracket in it, not ending a sentence (`s2`, `s2.1`, `r-1`; not `s2,`, `"s2"`, `s1, s2`)."""
    return bool(value) and _ID_BREAKERS.search(value) is None


def copied_placeholder(
    value: str, prompt_id: PromptId, *, said: str = "", registry: PromptRegistry | None = None
) -> str | None:
    """The placeholder word of `prompt_id`'s reply example that the id `value` is built from,
    when the text the model was given (`said`: the request, the rules) does not use it; None
    when the id is the model's own. A placeholder is a word of an id in the example that no
    other value of the example says ("example" in PREPARE's `request.example-bullets`, whose
    description says "exactly 4 bullet points"): SmolLM2 named checks `request.example-bullets`
    and `request.your-code.example` for requests that state no such constraint, and gave them
    checks every answer fails (issue 40)."""
    placeholders = _placeholders(registry or default_registry(), prompt_id)
    copied = set(_words(value)) & placeholders
    return next(iter(sorted(copied - set(_words(said)))), None)


@functools.lru_cache(maxsize=16)
def _placeholders(registry: PromptRegistry, prompt_id: PromptId) -> frozenset[str]:
    example = registry.get_definition(prompt_id).example_output
    ids: list[str] = []
    values: list[str] = []
    _ids_and_values(example, "", ids, values)
    said = {word for value in values for word in _words(value)}
    return frozenset(word for value in ids for word in _words(value) if word not in said)


def _ids_and_values(value: Any, name: str, ids: list[str], values: list[str]) -> None:
    """Sort the example's strings into its ids (fields `is_id_field` names) and the rest."""
    if isinstance(value, dict):
        for key, item in value.items():
            _ids_and_values(item, str(key), ids, values)
    elif isinstance(value, list):
        for item in value:
            _ids_and_values(item, name, ids, values)
    elif isinstance(value, str):
        (ids if is_id_field(name) else values).append(value)


def unusable_reply(
    output: BaseModel, registry: PromptRegistry | None = None, *, request: str = ""
) -> str | None:
    """Why a reply that fits its output model is still not the model's answer: the first field
    that repeats Aeon's instruction or example text (words of the `request` aside), or holds an
    id that is not clean; None when every field is the model's own."""
    echo = functools.partial(instruction_echo, registry=registry, request=request)
    return _unusable(dump_model(output), "", echo)


def _unusable(value: Any, path: str, echo: Callable[[str], str | None]) -> str | None:
    name = path.rsplit(".", 1)[-1].split("[", 1)[0]
    if name in DATA_FIELDS:
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _unusable(item, f"{path}.{key}" if path else str(key), echo)
            if found:
                return found
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _unusable(item, f"{path}[{index}]", echo)
            if found:
                return found
        return None
    if not isinstance(value, str):
        return None
    if is_id_field(name):
        # An empty entry in a list of ids names nothing, and the host keeps only ids it knows
        # (SmolLM2 wrote `"used_step_ids": [""]` for "none"): not worth a repair call.
        if clean_id(value) or (not value.strip() and path.endswith("]")):
            return None
        return (
            f"{path} is {value!r}, not a clean id: write each id alone, exactly as the prompt "
            "gives it, with nothing around it"
        )
    if echo(value) is None:
        return None
    # Not quoted: the reason reaches the run's notes and a host-made answer, which must not
    # carry Aeon's text either; the repair is shown the rejected reply itself.
    return (
        f"{path} repeats the prompt's own instruction or example text instead of content "
        "written for this request"
    )


# ---------------------------------------------------------------------------------------------
# Aeon's text, from the registry.
# ---------------------------------------------------------------------------------------------

#: Sizes of the whole phrases matched as one window: those shorter than SPAN.
_SHORT_SIZES = tuple(range(MIN_WORDS, SPAN))
#: The fewest words a window has.
_SMALLEST = min(SPAN, *_SHORT_SIZES)


@functools.lru_cache(maxsize=4)
def _corpus(registry: PromptRegistry) -> _Corpus:
    """Aeon's text as windows; example values first, so a copy is named after its example."""
    windows: dict[tuple[str, ...], int] = {}
    short: dict[tuple[str, ...], int] = {}
    phrases: list[str] = []
    for phrase in _phrases(registry):
        words = _words(phrase)
        if len(words) < MIN_WORDS:
            continue
        index = len(phrases)
        phrases.append(phrase)
        if len(words) < SPAN:
            short.setdefault(words, index)
        for start in range(len(words) - SPAN + 1):
            windows.setdefault(words[start : start + SPAN], index)
    pairs = frozenset(pair for window in (*windows, *short) for pair in itertools.pairwise(window))
    return _Corpus(windows, short, tuple(phrases), pairs)


def _runs(words: tuple[str, ...]) -> frozenset[tuple[str, ...]]:
    """Every window of `words` the matching looks up: of SPAN words, and of each short size."""
    return frozenset(
        words[start : start + size]
        for size in (SPAN, *_SHORT_SIZES)
        for start in range(len(words) - size + 1)
    )


def _phrases(registry: PromptRegistry) -> Iterator[str]:
    """Every piece of text Aeon shows a model, example values and schema descriptions first,
    then the prompts' own text sentence by sentence (what a copy is most likely named by)."""
    definitions = []
    for prompt_id in PromptId:
        try:
            definitions.append(registry.get_definition(prompt_id))
        except PromptNotFoundError:  # a registry of some prompts only (tests build those)
            continue
    for definition in definitions:
        if definition.example_output is not None:
            yield from _strings(definition.example_output)
    for definition in definitions:
        if definition.output_model is not None:
            yield from _descriptions(json_schema(definition.output_model))
    for definition in definitions:
        for literal, _field, _spec, _conversion in Formatter().parse(definition.template):
            yield from _sentences(literal)
    for path in sorted(TEMPLATES_DIR.glob("*.md")):
        yield from _sentences(path.read_text(encoding="utf-8"))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _descriptions(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, item in schema.items():
            if key == "description" and isinstance(item, str):
                yield item
            else:
                yield from _descriptions(item)
    elif isinstance(schema, list):
        for item in schema:
            yield from _descriptions(item)


def _sentences(text: str) -> Iterator[str]:
    for part in _SENTENCE_END.split(text):
        if part.strip():
            yield part.strip()


def _quoted(phrase: str) -> str:
    text = " ".join(phrase.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1].rstrip() + "…"
