"""Issue 4's bad-input proofs at the gateway: `aeon ask` refuses before publishing anything.

Each case runs the real CLI against the test Redis (AEON_REDIS_URL and a fresh AEON_PREFIX set)
and must exit 2 with a one-line `aeon: ...` message saying what is wrong, no traceback, and not
a single key written under the prefix (so no request reached the requests stream).
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest
from e2e_support import Bus, Processes, aeon_argv, wait_until

pytestmark = pytest.mark.e2e

GOOD_RULE = {"id": "r1", "severity": "fail", "check": {"type": "content", "search": "tide"}}

REQUESTS = {
    "empty": ("", "the request is empty"),
    "whitespace only": ("  \n\t  ", "the request is empty"),
    "oversized": ("x" * 20_001, "the request is 20,001 characters; the limit is 20,000"),
    "control characters": ("hello\x01\x02world", "control character(s) such as '\\x01'"),
    # Bytes that are not UTF-8 reach Python as lone surrogates (surrogateescape).
    "invalid utf-8": (b"caf\xe9 au lait", "the request is not valid UTF-8 text"),
}
RULES = {
    "rules not json": ("{not json", "is not valid JSON"),
    "rules bad severity": (
        json.dumps([{**GOOD_RULE, "severity": "fatal"}]),
        "breaks the rule schema: rule 0.severity",
    ),
    "rules invalid regex": (
        json.dumps({"rules": [{**GOOD_RULE, "check": {"type": "content", "search": "(tide"}}]}),
        "'search' is not a valid regular expression",
    ),
    "rules pattern check does not compile": (
        json.dumps([{**GOOD_RULE, "check": {"type": "pattern", "pattern": "(tide"}}]),
        "pattern /(tide/ does not compile",
    ),
    "rules not a list": (json.dumps({"id": "r1"}), 'expected a list of rules or {"rules": [...]}'),
    # Issue 41: 100 rules of patterns that backtrack passed; MAX_PATTERN_RULES may have their own.
    "rules with too many patterns": (
        json.dumps(
            [
                {**GOOD_RULE, "id": f"r{i}", "check": {"type": "content", "search": "(a|aa)+#"}}
                for i in range(100)
            ]
        ),
        "100 rules check a regular expression of their own",
    ),
}


def _assert_refused(ask, bus: Bus, message: str) -> None:
    assert ask.returncode == 2, ask.tail()
    assert ask.stdout == ""
    lines = ask.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aeon: "), ask.stderr
    assert message in lines[0]
    assert not bus.has_keys(), "something was written to Redis"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("request_text, message", REQUESTS.values(), ids=REQUESTS.keys())
def test_bad_request_is_refused_before_publishing(
    procs: Processes, bus: Bus, env: dict[str, str], request_text: str | bytes, message: str
) -> None:
    ask = procs.run_aeon(env, "ask", request_text, timeout=20)
    _assert_refused(ask, bus, message)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("content, message", RULES.values(), ids=RULES.keys())
def test_malformed_rules_file_is_refused_before_publishing(
    procs: Processes, bus: Bus, env: dict[str, str], tmp_path: Path, content: str, message: str
) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(content)
    ask = procs.run_aeon(env, "ask", "Explain tides", "--rules", str(rules), timeout=20)
    _assert_refused(ask, bus, message)


#: --max-ttl against AEON_MAX_PASSES: (the deployment's setting, the cap asked for, the words).
PASS_CAPS = {
    "one above the default cap": (None, "9", "max TTL 9 is above AEON_MAX_PASSES=8"),
    "the most a request may ask": (None, "100", "max TTL 100 is above AEON_MAX_PASSES=8"),
    "above a raised cap": ("20", "21", "max TTL 21 is above AEON_MAX_PASSES=20"),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "budget, message",
    [
        ("0", "token budget 0 is not a number of tokens from 1 to 1,000,000,000,000"),
        (str(10**13), "is not a number of tokens from 1 to 1,000,000,000,000"),
        ("many", "a whole number of tokens"),
    ],
)
def test_a_bad_token_budget_is_refused_before_publishing(
    procs: Processes, bus: Bus, env: dict[str, str], budget: str, message: str
) -> None:
    """Refused as an option (argparse's `aeon ask: argument --token-budget: ...`), one line."""
    ask = procs.run_aeon(env, "ask", "Explain tides", "--token-budget", budget, timeout=20)
    assert ask.returncode == 2, ask.tail()
    lines = ask.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aeon ask: argument --token-budget: ")
    assert message in lines[0]
    assert not bus.has_keys(), "something was written to Redis"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("max_passes, asked, message", PASS_CAPS.values(), ids=PASS_CAPS.keys())
def test_max_ttl_above_aeon_max_passes_is_refused_before_publishing(
    procs: Processes,
    bus: Bus,
    env: dict[str, str],
    max_passes: str | None,
    asked: str,
    message: str,
) -> None:
    """Above the deployment's cap it used to be taken and silently do nothing: now it is one
    line naming both values and what to do."""
    setting = {"AEON_MAX_PASSES": max_passes} if max_passes else {}
    ask = procs.run_aeon({**env, **setting}, "ask", "Explain tides", "--max-ttl", asked, timeout=20)
    _assert_refused(ask, bus, message)
    assert "ask for" in ask.stderr and "or set AEON_MAX_PASSES higher" in ask.stderr


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("options", "max_ttl"), [([], None), (["--max-ttl", "8"], 8)])
def test_max_ttl_within_the_cap_or_none_publishes(
    procs: Processes, bus: Bus, env: dict[str, str], options: list[str], max_ttl: int | None
) -> None:
    """The default asks for no cap of its own (the workers hold it to AEON_MAX_PASSES), and
    a cap equal to AEON_MAX_PASSES is taken as it is."""
    ask = procs.aeon(env, "ask", "Explain tides", *options)  # no worker: it waits
    wait_until(lambda: bus.xlen("requests") == 1, 15, "the request to be published")
    assert json.loads(bus.entries("requests")[0][1]["body"])["max_ttl"] == max_ttl
    ask.kill()


@pytest.mark.timeout(30)
def test_control_the_same_command_with_good_input_publishes(
    procs: Processes, bus: Bus, env: dict[str, str], tmp_path: Path
) -> None:
    """What the refusals are measured against: good input does reach the requests stream."""
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([GOOD_RULE]))
    ask = procs.aeon(env, "ask", "Explain tides", "--rules", str(rules))  # no worker: it waits
    wait_until(lambda: bus.xlen("requests") == 1, 15, "the request to be published")
    body = json.loads(bus.entries("requests")[0][1]["body"])
    assert body["request"] == "Explain tides" and body["rules"][0]["id"] == "r1"
    ask.kill()


#: A request longer than one usually types as an argument: many lines, near the 20,000 limit.
LONG_REQUEST = "\n".join(f"Line {n}: explain how tides work, part {n}." for n in range(420))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args", [["-"], []], ids=["dash", "no request given"])
def test_a_request_on_stdin_is_published_as_it_was_piped(
    procs: Processes, bus: Bus, env: dict[str, str], args: list[str]
) -> None:
    """Issue 35: `aeon ask -` reads the request from stdin, and so does `aeon ask` with no
    request when stdin is not a terminal (here, a pipe)."""
    assert 18_000 < len(LONG_REQUEST) <= 20_000
    ask = subprocess.Popen(
        [*aeon_argv(), "ask", *args], env=env, stdin=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        ask.stdin.write(LONG_REQUEST.encode())
        ask.stdin.close()
        wait_until(lambda: bus.xlen("requests") == 1, 20, "the request to be published")
        assert json.loads(bus.entries("requests")[0][1]["body"])["request"] == LONG_REQUEST
    finally:
        ask.kill()
        ask.wait(10)
        ask.stderr.close()


@pytest.mark.timeout(30)
def test_no_request_on_a_terminal_says_how_to_give_one(bus: Bus, env: dict[str, str]) -> None:
    """Stdin a terminal (a pseudo-terminal here): `aeon ask` with no request does not sit
    waiting for input nobody knows it wants; it says how to give one."""
    terminal, child = pty.openpty()
    try:
        ask = subprocess.run(
            [*aeon_argv(), "ask"], env=env, stdin=child, capture_output=True, timeout=20
        )
    finally:
        os.close(terminal)
        os.close(child)
    lines = ask.stderr.decode().strip().splitlines()
    assert ask.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith("aeon: no request: give it, e.g. aeon ask"), lines
    assert not bus.has_keys(), "something was written to Redis"


STDIN_REQUESTS = {
    "empty": (b"", "the request is empty"),
    "invalid utf-8": (b"caf\xe9 au lait", "the request is not valid UTF-8 text"),
    "past what is read": (b"x" * 80_001, "the request on stdin is over the 20,000-character limit"),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("piped, message", STDIN_REQUESTS.values(), ids=STDIN_REQUESTS.keys())
def test_a_bad_request_on_stdin_is_refused_alike(
    bus: Bus, env: dict[str, str], piped: bytes, message: str
) -> None:
    ask = subprocess.run(
        [*aeon_argv(), "ask", "-"], env=env, input=piped, capture_output=True, timeout=20
    )
    lines = ask.stderr.decode().strip().splitlines()
    assert ask.returncode == 2 and ask.stdout == b"", lines
    assert len(lines) == 1 and lines[0].startswith("aeon: ") and message in lines[0], lines
    assert not bus.has_keys(), "something was written to Redis"


#: Attached files past the limits, or not text: (settings, files to write, words of the refusal).
FILES = {
    "over AEON_MAX_FILE_BYTES": (
        {"AEON_MAX_FILE_BYTES": "200"},
        {"big.txt": b"x" * 201},
        "file {dir}/big.txt is 201 bytes; the limit is 200 (AEON_MAX_FILE_BYTES)",
    ),
    "over AEON_MAX_FILES_BYTES together": (
        {"AEON_MAX_FILES_BYTES": "300"},
        {"a.txt": b"a" * 200, "b.txt": b"b" * 200},
        "the attached files hold 400 bytes together; the limit is 300 (AEON_MAX_FILES_BYTES)",
    ),
    "more than AEON_MAX_FILES": (
        {"AEON_MAX_FILES": "1"},
        {"a.txt": b"a", "b.txt": b"b"},
        "2 files attached; the limit is 1 (AEON_MAX_FILES)",
    ),
    "binary (NUL bytes)": (
        {},
        {"app.bin": b"\x7fELF\x02\x01\x01\x00\x00\x00"},
        "file {dir}/app.bin is not text: it holds 7 control character(s) such as '\\x7f'",
    ),
    "not utf-8": (
        {},
        {"latin.txt": b"caf\xe9 au lait"},
        "file {dir}/latin.txt is not text (not valid UTF-8): attach text files only",
    ),
    "missing": ({}, {}, "cannot read file {dir}/gone.txt: No such file or directory"),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("settings, files, message", FILES.values(), ids=FILES.keys())
def test_bad_files_are_refused_before_publishing(
    procs: Processes,
    bus: Bus,
    env: dict[str, str],
    tmp_path: Path,
    settings: dict[str, str],
    files: dict[str, bytes],
    message: str,
) -> None:
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    options = [item for name in files or ["gone.txt"] for item in ("--file", str(tmp_path / name))]
    ask = procs.run_aeon({**env, **settings}, "ask", "Explain tides", *options, timeout=20)
    _assert_refused(ask, bus, message.format(dir=tmp_path))
    assert bus.xlen("requests") == 0


@pytest.mark.timeout(30)
def test_an_attached_file_is_published_with_the_request(
    procs: Processes, bus: Bus, env: dict[str, str], tmp_path: Path
) -> None:
    """What the file refusals are measured against: a text file within the limits goes out
    in the request's event, named as given."""
    notes = tmp_path / "notes.md"
    notes.write_text("Tides: high < low? & so on\n", encoding="utf-8")
    ask = procs.aeon(env, "ask", "Explain tides", "--file", str(notes))  # no worker: it waits
    wait_until(lambda: bus.xlen("requests") == 1, 15, "the request to be published")
    body = json.loads(bus.entries("requests")[0][1]["body"])
    assert body["files"] == [{"path": str(notes), "content": "Tides: high < low? & so on\n"}]
    ask.kill()
