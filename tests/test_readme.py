"""The README and the documentation pages are part of the product: what they say must match
the code, and the README must stay something a newcomer reads in five minutes.

The README holds the pitch, the two set-up commands, a real run and the CLI synopsis; every
reference (settings, wire format, HTTP API, operating) is a page under docs/, built as a site by
mkdocs (`mkdocs build --strict` in .ci/run checks the pages' own links and anchors).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aeonloop.bus.settings import BusSettings
from aeonloop.gateway.http.settings import HttpSettings
from aeonloop.gateway.validation import FileSettings, TurnSettings
from aeonloop.limits import LoopSettings
from aeonloop.llm.factory import LLMSettings
from aeonloop.phases.events import RequestSubmitted
from aeonloop.settings import AeonSettings, LogSettings
from aeonloop.telemetry.metrics import MetricsSettings
from aeonloop.telemetry.tracing import TracingSettings
from aeonloop.tools.config import ToolSettings
from aeonloop.webhooks.policy import WebhookSettings

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
DOCS = ROOT / "docs"
#: Where each piece of reference the README used to hold lives now.
CONFIGURATION = DOCS / "configuration.md"
OTHER_LANGUAGES = DOCS / "other-languages.md"
HTTP_API = DOCS / "http-api.md"

#: Five minutes of reading: the rest belongs in docs/.
README_MAX_LINES = 250
#: Hosts an absolute link in the README may point to. None: every link is to a file here, so
#: none can rot away from the repository.
ALLOWED_LINK_HOSTS: frozenset[str] = frozenset()


def _page(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_request_schema_in_the_docs_is_the_codes() -> None:
    page = _page(OTHER_LANGUAGES)
    assert "<summary>RequestSubmitted JSON schema</summary>" in page, (
        f"{OTHER_LANGUAGES.name} lost its RequestSubmitted schema block"
    )
    block = page.split("<summary>RequestSubmitted JSON schema</summary>", 1)[1]
    schema = re.search(r"```json\n(.*?)\n```", block, re.S)
    assert schema, f"{OTHER_LANGUAGES.name} lost its RequestSubmitted schema block"
    assert json.loads(schema.group(1)) == RequestSubmitted.model_json_schema()


#: Every settings class: each of its variables must be a row of docs/configuration.md.
SETTINGS = (
    BusSettings,
    LoopSettings,
    LLMSettings,
    MetricsSettings,
    TracingSettings,
    HttpSettings,
    LogSettings,
    WebhookSettings,
    FileSettings,
    TurnSettings,
    ToolSettings,
)

#: A row of a settings table: `| `AEON_X` | default | meaning |`.
SETTING_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \|", re.M)


def _documented_variables() -> list[str]:
    return SETTING_ROW.findall(_page(CONFIGURATION))


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda cls: cls.__name__)
def test_every_setting_is_documented(settings: type[AeonSettings]) -> None:
    documented = _documented_variables()
    for name in settings.model_fields:
        assert settings.variable(name) in documented, (
            f"{settings.variable(name)} has no row in {CONFIGURATION.relative_to(ROOT)}"
        )


def test_every_documented_setting_exists() -> None:
    known = {cls.variable(name) for cls in SETTINGS for name in cls.model_fields}
    documented = _documented_variables()
    assert len(documented) >= len(known), "the settings tables were not found"
    stale = [variable for variable in documented if variable not in known]
    assert not stale, f"{CONFIGURATION.name} documents variables no code reads: {stale}"
    twice = sorted({variable for variable in documented if documented.count(variable) > 1})
    assert not twice, f"{CONFIGURATION.name} has more than one row for {twice}"


def test_the_run_page_screenshot_is_there() -> None:
    assert "docs/img/run-page.png" in _links(README), "the README lost the run page's screenshot"
    page_links = _links(_page(HTTP_API))
    for image in ("img/run-page.png", "img/run-page-phone.png"):
        assert image in page_links, f"{HTTP_API.name} does not show {image}"
        assert (DOCS / image).stat().st_size > 10_000, image


def test_set_up_commands_are_the_ones_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install ".[test]" && pytest' in README
    assert 'pip install . && aeon ask "' in README
    assert re.search(r'^pip install -q "\.\[test\]"$', ci, re.M)
    assert re.search(r"^pytest$", ci, re.M)


def test_the_readme_names_the_distribution_and_the_command() -> None:
    assert "`aeonloop`" in README
    assert "the command it installs is `aeon`" in README


def test_the_readme_is_short() -> None:
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; at most {README_MAX_LINES}: move reference to docs/"
    )


# ---- links ------------------------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
#: `[text](target)`, `![alt](target)`, with an optional title.
_INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
_HTML = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
#: Bare URLs GitHub turns into links, and <autolinks>.
_BARE = re.compile(r"(?<![(\"'<])\b(?:https?|ftp)://[^\s)>\]]+|<((?:https?|mailto):[^>\s]+)>")


def _prose(markdown: str) -> str:
    """The text links can be in: fenced code blocks and code spans removed."""
    return _CODE_SPAN.sub("", _FENCE.sub("", markdown))


def _links(markdown: str) -> list[str]:
    text = _prose(markdown)
    found = [*_INLINE.findall(text), *_REFERENCE.findall(text), *_HTML.findall(text)]
    found += [bare.group(1) or bare.group(0) for bare in _BARE.finditer(text)]
    return found


def _github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text, lower case, punctuation dropped, spaces to
    hyphens (underscores and letters of any script kept)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(markdown: str) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in _FENCE.sub("", markdown).splitlines():
        heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = _github_slug(heading.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _broken(target: str, base: Path, own_text: str) -> str | None:
    """Why `target`, linked from a file in `base` whose text is `own_text`, does not resolve."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
        host = re.match(r"^https?://([^/:?#]+)", target, re.I)
        if host and host.group(1).lower() in ALLOWED_LINK_HOSTS:
            return None
        return "an absolute link; link to a file in the repository instead"
    path, _, anchor = target.partition("#")
    path = path.split("?", 1)[0]
    if path.startswith("/"):
        return "a link from the site root, which differs on GitHub and elsewhere; use relative ones"
    resolved = (base / path).resolve() if path else None
    if resolved is not None:
        if ROOT not in resolved.parents and resolved != ROOT:
            return "outside the repository"
        if not resolved.exists():
            return "no such file"
    if not anchor:
        return None
    if resolved is not None and resolved.suffix != ".md":
        return "an anchor into a file that is not Markdown cannot be checked"
    text = own_text if resolved is None else resolved.read_text(encoding="utf-8")
    if anchor not in _anchors(text):
        return f"no heading gives the anchor #{anchor}"
    return None


def test_every_link_in_the_readme_resolves() -> None:
    links = _links(README)
    assert len(links) >= 10, f"only {len(links)} links found: is the link pattern still right?"
    assert any("#" in link for link in links), "no anchor link found to check"
    broken = [
        f"{link}: {why}"
        for link in links
        if (why := _broken(link, README_PATH.parent, README)) is not None
    ]
    assert not broken, "README.md links that do not resolve:\n" + "\n".join(broken)


def test_the_readme_links_every_page_of_the_site() -> None:
    linked = {
        (ROOT / link.partition("#")[0]).resolve()
        for link in _links(README)
        if not re.match(r"^[a-z]+:", link)
    }
    pages = sorted(DOCS.glob("*.md"))
    assert len(pages) > 10, "docs/ has fewer pages than it should: is DOCS right?"
    unlinked = [page.name for page in pages if page.resolve() not in linked]
    assert not unlinked, f"pages the README does not link: {unlinked}"


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("docs/cli.md#exit-codes", None),
        ("docs/cli.md#no-such-heading", "no heading gives the anchor #no-such-heading"),
        ("docs/nothing-here.md", "no such file"),
        ("https://example.com/", "an absolute link; link to a file in the repository instead"),
        ("#set-up-two-commands", None),
        ("#what-an-answer-looks-like", None),
        ("#nope", "no heading gives the anchor #nope"),
        ("docs/img/run-page.png#x", "an anchor into a file that is not Markdown cannot be checked"),
        ("../outside.md", "outside the repository"),
    ],
)
def test_the_link_check_tells_good_from_bad(target: str, why: str | None) -> None:
    assert _broken(target, README_PATH.parent, README) == why


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Set-up: two commands", "set-up-two-commands"),
        ("A: task profile and TTL (`phases/phase_a.py`)", "a-task-profile-and-ttl-phasesphase_apy"),
        ("FastStream's wire form", "faststreams-wire-form"),
        ("[Linked](x.md) heading", "linked-heading"),
    ],
)
def test_github_slugs(heading: str, slug: str) -> None:
    assert _github_slug(heading) == slug


def test_links_in_code_are_not_links() -> None:
    text = (
        "see [a](a.md)\n\n```sh\ncurl https://example.com/ [b](b.md)\n```\n`[c](c.md)` http://x.y\n"
    )
    assert _links(text) == ["a.md", "http://x.y"]
