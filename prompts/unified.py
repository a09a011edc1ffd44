"""UnifiedPrompt: every LLM call is system prompt + typed context + instructions as XML.

The contract is docs/requirements.md, "Unified prompt" (R1..R5).

Element structure of `to_xml()` (the one documented shape; tests pin it):

    <prompt>
      <context>
        <file path="…">…</file>
        <artifact name="…">…</artifact>
        <thought name="…">…</thought>
      </context>
      <system_prompt>…</system_prompt>
      <instructions>…</instructions>
    </prompt>

The context comes first because it is what a run's calls share: the earlier turns of the
conversation and the request's attached files, the same bytes in every call that carries them
(llm.session puts them first in it, in that order). Servers that cache a prompt's prefix
(llama.cpp, llama-cpp-python, vLLM, OpenAI) then process them once a run, not once a call: the
system prompt differs by phase (R3), so in front of them it would end the prefix a plan, its
steps and the answer share (docs/llm-servers.md, "Prompt prefix caching"). R2 fixes one shape,
not this order. What differs from call to call, the phase's system prompt and the instructions,
comes last.

`<context>` is omitted when there is no context. All text and attribute values are escaped, and
characters XML 1.0 cannot carry are dropped, so request text can never open or close an element.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from aeonloop.exceptions import TemplateNotFound

TEMPLATES_DIR = Path(__file__).parent / "templates" / "system"
CONTEXT_TYPES = ("file", "artifact", "thought")

_NOT_XML_CHARS = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _clean(text: str) -> str:
    return _NOT_XML_CHARS.sub("", text)


def _text(text: str) -> str:
    return escape(_clean(text))


def _attr(text: str) -> str:
    return quoteattr(_clean(text))


@dataclass(frozen=True)
class ContextItem:
    type: str
    name: str
    content: str

    def __post_init__(self) -> None:
        if self.type not in CONTEXT_TYPES:
            raise ValueError(f"context item type must be one of {CONTEXT_TYPES}, not {self.type!r}")

    def to_xml(self) -> str:
        attribute = "path" if self.type == "file" else "name"
        return f"<{self.type} {attribute}={_attr(self.name)}>{_text(self.content)}</{self.type}>"


@dataclass(frozen=True)
class UnifiedPrompt:
    system_prompt: str
    instructions: str
    context: tuple[ContextItem, ...] = field(default_factory=tuple)

    def to_xml(self) -> str:
        parts: list[str] = ["<prompt>"]
        if self.context:
            parts.append("<context>")
            parts.extend(item.to_xml() for item in self.context)
            parts.append("</context>")
        parts.append(f"<system_prompt>{_text(self.system_prompt)}</system_prompt>")
        parts.append(f"<instructions>{_text(self.instructions)}</instructions>")
        parts.append("</prompt>")
        return "\n".join(parts)


def load_system_template(phase: str, agent: str = "BASE", directory: Path = TEMPLATES_DIR) -> str:
    """The system prompt for `phase`: `<agent>-<phase>.md`, else `BASE-<phase>.md`.

    A missing template is a configuration error that must surface, never an empty prompt.
    """
    return _load(phase, agent, directory)


@lru_cache(maxsize=256)
def _load(phase: str, agent: str, directory: Path) -> str:
    if not (_SAFE_NAME.match(phase) and _SAFE_NAME.match(agent)):
        raise TemplateNotFound(phase, agent, [])
    candidates = [directory / f"{agent}-{phase}.md", directory / f"BASE-{phase}.md"]
    for path in candidates:
        if path.is_file():
            text = path.read_text(encoding="utf-8").strip()
            if text:
                return text
    raise TemplateNotFound(phase, agent, [str(p) for p in candidates])
