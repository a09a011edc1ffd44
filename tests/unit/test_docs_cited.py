"""Code cites only documents the repository holds (docs/architecture.md, docs/requirements.md).

The scans read the files as they are on disk, so a new module is covered the moment it exists:
every project package (`bus`, `phases`, `prompts`, `llm`, `gateway`, `bench`), `pyproject.toml`,
the README and `docs/`. Tests are left out: they may quote whatever they check.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("bus", "phases", "prompts", "llm", "gateway", "bench")
DOCS = REPO / "docs"

#: A repository path under docs/, as code and docs write it: `docs/architecture.md`.
DOC_PATH = re.compile(r"(?<![\w./-])docs/((?:[\w.-]+/)*[\w.-]+\.md)\b")
#: A relative Markdown link between docs: `[events.md](events.md#the-envelope)`.
DOC_LINK = re.compile(r"\]\((?![a-z]+:)([^)#\s]+\.md)(?:#[^)]*)?\)")
#: A cited section: `docs/architecture.md, "Why our own bus"` (the title may wrap a line).
SECTION = re.compile(r"docs/([\w.-]+\.md),\s+\"([^\"]+)\"")
#: Citations of documents that live outside the repository.
OUTSIDE = (
    re.compile(r"\bDESIGN\b"),  # DESIGN.md, "DESIGN's ..."
    re.compile(r"\bseeds?\s+\d{3}\b", re.IGNORECASE),  # "seed 000", "Seeds 000/001"
    re.compile(r"\bseeds/"),
)


def _package_files(*suffixes: str) -> list[Path]:
    found = []
    for package in PACKAGES:
        found += [
            path
            for path in sorted((REPO / package).rglob("*"))
            if path.suffix in suffixes and path.is_file() and "__pycache__" not in path.parts
        ]
    return found


def _cited_from() -> list[Path]:
    """Every .py, .toml and .md file outside tests/ that may mention a doc."""
    top = [REPO / "pyproject.toml", REPO / "README.md", *sorted(DOCS.glob("**/*.md"))]
    return [*_package_files(".py", ".toml", ".md"), *(p for p in top if p.is_file())]


def _where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(REPO)}:{text.count(chr(10), 0, offset) + 1}"


def test_every_cited_doc_exists() -> None:
    cited: dict[Path, list[str]] = {}
    for path in _cited_from():
        text = path.read_text(encoding="utf-8")
        for match in DOC_PATH.finditer(text):
            cited.setdefault(DOCS / match.group(1), []).append(_where(path, text, match.start()))
        if DOCS in path.parents:
            for match in DOC_LINK.finditer(text):
                target = (path.parent / match.group(1)).resolve()
                cited.setdefault(target, []).append(_where(path, text, match.start()))
    assert cited, "the scan found no citation of docs/ at all: is it looking in the right place?"
    missing = [
        f"{target.relative_to(REPO)} (cited at {', '.join(places)})"
        for target, places in sorted(cited.items())
        if not target.is_file()
    ]
    assert not missing, "cited docs that do not exist:\n" + "\n".join(missing)


def test_every_cited_section_is_a_heading_of_its_doc() -> None:
    unknown = []
    checked = 0
    for path in _cited_from():
        text = path.read_text(encoding="utf-8")
        for match in SECTION.finditer(text):
            doc = DOCS / match.group(1)
            if not doc.is_file():
                continue  # reported by test_every_cited_doc_exists
            title = " ".join(match.group(2).split())
            headings = [
                line.lstrip("#").strip()
                for line in doc.read_text(encoding="utf-8").splitlines()
                if line.startswith("#")
            ]
            checked += 1
            if not any(title in heading for heading in headings):
                unknown.append(f'{_where(path, text, match.start())}: "{title}" in {doc.name}')
    assert checked, "no section citation found: the pattern no longer matches how code cites"
    assert not unknown, "cited sections that are no heading of their doc:\n" + "\n".join(unknown)


def test_code_cites_no_document_outside_the_repository() -> None:
    scanned = [*_package_files(".py"), REPO / "pyproject.toml"]
    assert len(scanned) > 20, f"only {len(scanned)} files found under {PACKAGES}"
    found = []
    for path in scanned:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(pattern.search(line) for pattern in OUTSIDE):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, (
        "cite docs/architecture.md, docs/events.md or docs/requirements.md instead of a "
        "document outside the repository:\n" + "\n".join(found)
    )
