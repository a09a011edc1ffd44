"""The Location Invariant's detector (seed 000 FR-005A, FR-016, SC-001).

Prompt text belongs in `prompts/` only. This walks the other source packages and reports every
string literal that reads like an instruction to a model. It looks at the code's string constants
through `ast` (f-strings and `+` concatenations are joined first, docstrings are skipped), so
comments, identifiers and docstrings that merely mention prompts never count.

Two tiers keep it quiet on ordinary code: phrases that only a prompt uses ("You are a ...",
"reply with only ...") count anywhere; phrases an error message might also use ("JSON object",
"respond with") count only in a long or multi-line string, or two of them together.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: The source packages of DESIGN.md's layout that must hold no prompt text (those that exist).
SOURCE_PACKAGES = ("bus", "phases", "llm", "gateway", "bench", "checks")


def _phrases(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern, re.IGNORECASE) for pattern in patterns)


STRONG_PHRASES = _phrases(
    r"\byou are (a|an|the)\b",
    r"\b(reply|respond|answer) only with\b",
    r"\b(reply|respond) with\b[^.\n]{0,60}\bonly\b",
    r"\b(write|say|output|return) nothing else\b",
    r"\bno (text|prose|commentary) before or after\b",
    r"\byour (task|job|role) is\b",
    r"\bas an ai\b",
    r"\bthink step by step\b",
)
WEAK_PHRASES = _phrases(
    r"\b(reply|respond) with\b",
    r"\bjson object\b",
    r"\breturn only\b",
    r"\byou must\b",
    r"\bdo not include\b",
    r"\byour (answer|reply|response)\b",
    r"\bwrite a plan\b",
    r"\bthe (request|output|plan|step|text|question|reply)s? below\b",
)
LONG_STRING = 80


@dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    end_line: int
    text: str

    def __str__(self) -> str:
        excerpt = " ".join(self.text.split())[:100]
        return f"{self.path}:{self.line}: {excerpt!r}"


def looks_like_prompt(text: str, triple_quoted: bool = False) -> bool:
    """Whether a string literal reads like an instruction to a model."""
    if any(p.search(text) for p in STRONG_PHRASES):
        return True
    weak = sum(1 for p in WEAK_PHRASES if p.search(text))
    long_form = triple_quoted or "\n" in text or len(text) >= LONG_STRING
    return weak >= 2 or (weak >= 1 and long_form)


def scan_tree(root: Path, packages: Iterable[str] = SOURCE_PACKAGES) -> list[Finding]:
    """Every prompt-like literal in the `.py` files of `root/<package>` for each package."""
    findings: list[Finding] = []
    for package in packages:
        directory = root / package
        if directory.is_dir():
            for path in sorted(directory.rglob("*.py")):
                findings.extend(scan_file(path))
    return findings


def scan_file(path: Path) -> list[Finding]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    return [
        Finding(path, node.lineno, node.end_lineno or node.lineno, text)
        for node, text in _literals(tree)
        if looks_like_prompt(text, _triple_quoted(source, node))
    ]


def _literals(tree: ast.AST) -> Iterator[tuple[ast.expr, str]]:
    """Each outermost string expression (constant, f-string, `+` chain) with its literal text."""
    docstrings = _docstring_nodes(tree)
    inside: set[int] = set()
    for node in ast.walk(tree):
        if id(node) in inside or node in docstrings:
            continue
        text = _literal_text(node)
        if text is None:
            continue
        inside.update(id(child) for child in ast.walk(node))
        yield node, text


def _literal_text(node: ast.AST) -> str | None:
    """The text a string expression spells out; `{}` stands for each interpolated value."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) and isinstance(part.value, str) else "{}"
            for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_text(node.left), _literal_text(node.right)
        if left is not None or right is not None:
            return (left or "{}") + (right or "{}")
    return None


def _docstring_nodes(tree: ast.AST) -> set[ast.AST]:
    owners = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    found: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, owners) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.add(first.value)
    return found


def _triple_quoted(source: str, node: ast.expr) -> bool:
    segment = ast.get_source_segment(source, node) or ""
    return bool(re.match(r'^[rRbBuUfF]{0,2}("""|\'\'\')', segment))
