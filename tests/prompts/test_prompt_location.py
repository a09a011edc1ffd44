"""Location Invariant (seed 000 FR-005A, FR-016, SC-001): no prompt text outside prompts/.

The scanner is shown to work both ways before it is trusted on the real tree: it reports every
literal planted in a fixture tree, stays silent on a clean one, and recognises every prompt the
registry actually sends.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prompt_scanner import SOURCE_PACKAGES, Finding, looks_like_prompt, scan_file, scan_tree

from aeonloop.prompts.registry import PromptId, PromptRegistry
from aeonloop.prompts.unified import TEMPLATES_DIR

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
PLANTED = FIXTURES / "planted"


def _planted_lines(path: Path) -> set[int]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {number for number, line in enumerate(lines, 1) if line.endswith("# PLANTED")}


def test_the_source_tree_holds_no_inline_prompt() -> None:
    findings = scan_tree(REPO)
    assert not findings, "prompt text outside prompts/ (move it to the registry):\n" + "\n".join(
        str(f) for f in findings
    )


def test_the_scan_covers_the_source_packages_that_exist() -> None:
    assert {"phases", "llm"} <= {p for p in SOURCE_PACKAGES if (REPO / p).is_dir()}


def _marked(findings: list[Finding], markers: set[int]) -> set[int]:
    """The marker each finding spans; a finding spanning none or several is a wrong report."""
    marked = set()
    for finding in findings:
        inside = {line for line in markers if finding.line <= line <= finding.end_line}
        assert len(inside) == 1, f"reported without exactly one '# PLANTED' mark: {finding}"
        marked |= inside
    return marked


@pytest.mark.parametrize("path", sorted(PLANTED.rglob("*.py")), ids=lambda p: p.name)
def test_every_planted_prompt_is_reported_and_nothing_else(path: Path) -> None:
    markers = _planted_lines(path)
    assert markers, "a planted fixture marks each of its prompts with '# PLANTED'"
    findings = scan_file(path)
    assert len(findings) == len(markers)
    assert _marked(findings, markers) == markers


def test_the_planted_tree_fails_the_invariant() -> None:
    findings = scan_tree(PLANTED)
    assert len(findings) == sum(len(_planted_lines(p)) for p in PLANTED.rglob("*.py"))
    assert {f.path.parent.name for f in findings} == {"phases", "llm"}


def test_a_clean_tree_reports_nothing() -> None:
    # It holds docstrings and comments about prompts, error messages, and a prompts/ package
    # with real prompt text, which is exactly where prompt text is allowed.
    assert scan_tree(FIXTURES / "clean") == []


@pytest.mark.parametrize(
    "text",
    [
        "event body must be a JSON object",
        "expected a JSON object, got a list",
        "step s1 failed after 3 attempts",
        "Answer:",
    ],
)
def test_ordinary_messages_are_not_prompts(text: str) -> None:
    assert not looks_like_prompt(text)


def test_every_real_prompt_would_be_caught_outside_prompts() -> None:
    """Every template with text of its own; the plain draft's is the request alone (ANSWER_DRAFT
    sends what one call would), which holds no prompt text to hide."""
    registry = PromptRegistry()
    templates = [
        registry.get_definition(p).template
        for p in PromptId
        if registry.get_definition(p).system_phase is None
        and registry.get_definition(p).template.strip() != "{request}"
    ]
    templates += [path.read_text(encoding="utf-8") for path in TEMPLATES_DIR.glob("*.md")]
    missed = [t[:60] for t in templates if not looks_like_prompt(t, triple_quoted=True)]
    assert not missed
