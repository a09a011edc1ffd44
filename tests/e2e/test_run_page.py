"""Issue 14's proof of the run page, in a real headless Chromium (Debian's `chromium` and
`chromium-driver`, which .ci/run installs) driven by Selenium, against a real `aeon serve`
and `aeon worker` on the session's Redis.

A person submits a request and watches it: the passes appear while the run is still going,
each with its score and its steps' outputs, then the exit and the answer with its confidence.
A run held to a rule it cannot meet ends degraded, and the page says why in plain words. The
page fits a phone's width. Screenshots go to tests/e2e/artifacts/ (desktop and phone); those in
docs/img/ (shown by the README and docs/http-api.md) are copies of them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Processes
from http_support import Server
from webhook_support import Receiver, hooked

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).with_name("artifacts")
DESKTOP = (1366, 900)
PHONE = (390, 844)
REQUEST = "Explain how photosynthesis works, then rewrite it for a 10-year-old"
#: A request whose offline plan calls a tool of each of two servers.
TWO_TOOLS = "Use the tools add with a=2 b=3 and web_lookup with key=tides, then explain the results"
#: A rule no offline answer meets: the loop cannot converge, and the answer is degraded.
IMPOSSIBLE_RULE = [
    {
        "id": "cites-a-source",
        "description": "names its source",
        "severity": "fail",
        "weight": 2,
        "check": {"type": "content", "search": "Source: https?://"},
    }
]


def _browser_or_skip() -> None:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not path.exists()]
    if missing and os.environ.get("CI"):
        pytest.fail(f"{', '.join(missing)} missing: .ci/run installs chromium and chromium-driver")
    if missing:
        pytest.skip(f"no {', '.join(missing)}: apt-get install chromium chromium-driver")


@pytest.fixture
def browser() -> Iterator[object]:
    _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def server(procs: Processes, env: dict[str, str]) -> Server:
    """A worker whose every LLM call takes 150 ms, so a person (or this test) sees each pass
    arrive, and the server."""
    slow = {**env, "AEON_LLM_DELAY_MS": "150"}
    procs.worker(slow)
    return Server(procs, slow)


def _wait(driver: object, check: object, timeout: float, what: str) -> object:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(check, message=what)


def _screenshot(driver: object, name: str, size: tuple[int, int]) -> Path:
    """The whole page at `size`'s width, saved under tests/e2e/artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)
    driver.set_window_size(*size)
    time.sleep(0.3)  # let the layout settle at the new width (not an assertion)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(size[0], min(max(height, size[1]), 6000))
    time.sleep(0.3)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def _submit(
    driver: object, request: str, rules: list | None = None, effort: str | None = None
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    driver.find_element(By.ID, "request").send_keys(request)
    if rules is not None or effort is not None:
        driver.find_element(By.CSS_SELECTOR, "details.more > summary").click()
    if rules is not None:
        driver.find_element(By.ID, "rules").send_keys(json.dumps(rules))
    if effort is not None:
        Select(driver.find_element(By.ID, "effort")).select_by_value(effort)
    driver.find_element(By.ID, "submit").click()


def test_a_person_submits_watches_the_passes_arrive_and_reads_the_answer(
    browser: object, server: Server
) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(f"http://{server.host}:{server.port}/")
    _submit(driver, REQUEST)

    def steps(kind: str) -> list:
        return driver.find_elements(By.CSS_SELECTOR, f'#run .step[data-kind="{kind}"]')

    # The first pass is on the page while the run is still going.
    _wait(driver, lambda d: steps("pass"), 60, "the first pass on the page")
    assert not steps("answer"), "the answer came with the first pass: nothing was live"
    status = driver.find_element(By.CSS_SELECTOR, ".run-head .chip").text
    assert status == "running"
    assert steps("profile") and steps("plan")

    _wait(driver, lambda d: steps("answer"), 60, "the answer on the page")
    passes = steps("pass")
    assert len(passes) >= 1
    for card in passes:
        assert "score" in card.text and "%" in card.text
        assert card.find_elements(By.CSS_SELECTOR, ".outputs details")
    last = passes[-1]
    assert "converged" in last.text
    assert last.find_element(By.CSS_SELECTOR, ".outputs pre").text  # a step's output, shown
    assert "converged" in steps("exit")[0].text
    answer = steps("answer")[0]
    assert answer.find_element(By.CSS_SELECTOR, ".answer-text").text.strip()
    assert "confidence" in answer.text
    assert driver.find_element(By.CSS_SELECTOR, ".run-head .chip").text == "answered"
    assert REQUEST in driver.find_element(By.CSS_SELECTOR, ".question").text
    _wait(
        driver,
        lambda d: REQUEST in d.find_element(By.ID, "recent").text,
        30,
        "the run among the recent runs",
    )

    # Issue 35: only the last step's output starts open, and each other step says it opens.
    closed = [
        d
        for card in passes
        for d in card.find_elements(By.CSS_SELECTOR, ".outputs details")
        if not d.get_attribute("open")
    ]
    assert closed, "every step's output was open: nothing to show it opens"
    for details in closed:
        assert details.find_element(By.CSS_SELECTOR, ".toggle").text.startswith("show "), (
            details.text
        )
    closed[0].find_element(By.CSS_SELECTOR, "summary").click()
    assert closed[0].get_attribute("open")
    assert closed[0].find_element(By.CSS_SELECTOR, ".toggle").text.startswith("hide ")
    # The Plan card counts B's steps (a reader who connected after pass 1's refinement also
    # reads ", 1 added later").
    live_plan = steps("plan")[0].find_element(By.CSS_SELECTOR, ".card-head .chip").text
    assert live_plan.startswith("2 steps planned"), live_plan

    desktop = _screenshot(driver, "run-page-desktop", DESKTOP)
    phone = _screenshot(driver, "run-page-phone", PHONE)
    overflow = driver.execute_script(
        "return document.documentElement.scrollWidth - window.innerWidth"
    )
    assert overflow <= 0, f"the page is {overflow}px wider than a phone's screen"
    print(f"\nscreenshots: {desktop} {phone}")


def test_a_run_opened_after_a_refinement_shows_the_plan_as_phase_b_made_it(
    browser: object, server: Server
) -> None:
    """Issue 35: the Plan card of a run read back after its passes counted the step the
    offline model's refinement adds after pass 1 as planned (3 steps, where `aeon ask` said
    `B planned: 2 steps`). It shows B's count, and marks the added step with its pass."""
    from selenium.webdriver.common.by import By

    # Effort high: the loop runs even for this one short ask, which would end on its draft.
    reply = server.post("/v1/runs?wait=60", {"request": "Explain how tides work", "effort": "high"})
    assert reply.status == 200, reply  # answered: the page reads the run back, passes and all
    cid = reply.body["correlation_id"]
    driver = browser
    driver.get(f"http://{server.host}:{server.port}/#/runs/{cid}")
    plan = _wait(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, '#run .step[data-kind="plan"]'),
        30,
        "the plan on the page",
    )
    # textContent: a step fades in, and Selenium's `.text` is empty until it is opaque.
    chip = plan.find_element(By.CSS_SELECTOR, ".card-head .chip").get_attribute("textContent")
    assert chip == "2 steps planned, 1 added later", chip
    items = [li.get_attribute("textContent") for li in plan.find_elements(By.CSS_SELECTOR, "li")]
    assert len(items) == 3 and "added in pass 1" in items[2], items
    assert not any("added in" in item for item in items[:2]), items


def test_a_degraded_answer_says_why_in_plain_words(browser: object, server: Server) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(f"http://{server.host}:{server.port}/")
    # Effort high, chosen on the page: the loop runs (and fails the rule in its passes); at
    # medium a request with a rule and nothing to use ends on its draft path.
    _submit(driver, "Explain why the sea is salty, then why lakes are not", IMPOSSIBLE_RULE, "high")
    _wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, '#run .step[data-kind="answer"]'),
        90,
        "the degraded answer on the page",
    )
    answer = driver.find_element(By.CSS_SELECTOR, '#run .step[data-kind="answer"]')
    notice = answer.find_element(By.CSS_SELECTOR, ".notice")
    assert "Degraded answer" in notice.text
    assert "exited early, before converging" in notice.text
    # Named as a check of the answer the reader gets (checked, critiqued and refined in vain).
    assert "check cites-a-source did not hold: names its source" in notice.text
    assert driver.find_element(By.CSS_SELECTOR, ".run-head .chip").text == "answered, degraded"
    rules = driver.find_elements(By.CSS_SELECTOR, '#run .step[data-kind="pass"] .evidence')
    assert any("cites-a-source" in element.text for element in rules)
    path = _screenshot(driver, "run-page-degraded", DESKTOP)
    print(f"\nscreenshot: {path}")


def test_bad_input_is_shown_next_to_the_form(browser: object, server: Server) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(f"http://{server.host}:{server.port}/")
    _submit(driver, "Explain tides", [{"id": "r", "check": {"type": "content", "search": "("}}])
    error = _wait(
        driver,
        lambda d: d.find_element(By.ID, "form-error").text,
        30,
        "the form's error",
    )
    assert error.startswith("rules: ") and "regular expression" in error


def test_the_docs_page_lists_every_endpoint(browser: object, server: Server) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    driver.get(f"http://{server.host}:{server.port}/docs")
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".op"), 30, "the operations")
    paths = {e.text for e in driver.find_elements(By.CSS_SELECTOR, ".op-head code")}
    assert {"/v1/runs", "/v1/runs/{correlation_id}", "/v1/runs/{correlation_id}/events"} <= paths


def test_a_refused_event_stream_is_tried_again_when_the_server_says(
    browser: object, procs: Processes, env: dict[str, str]
) -> None:
    """A rate limit of 2 requests at once and 1 a second: the page's list of runs and its
    submit take both, so the event stream is refused (429, Retry-After). The page waits as it
    is told and tries again, and the person still watches the run to its answer."""
    from selenium.webdriver.common.by import By

    limited = {
        **env,
        "AEON_LLM_DELAY_MS": "50",
        "AEON_HTTP_RATE_PER_S": "1",
        "AEON_HTTP_RATE_BURST": "2",
    }
    procs.worker(limited)
    server = Server(procs, limited)
    driver = browser
    driver.get(f"http://{server.host}:{server.port}/")
    _submit(driver, "Explain tides")
    _wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, '#run .step[data-kind="answer"]'),
        90,
        "the answer on the page",
    )
    assert driver.find_element(By.CSS_SELECTOR, ".run-head .chip").text == "answered"
    assert '"GET /v1/runs/' in server.proc.output and '/events HTTP/1.1" 429' in server.proc.output


def test_a_run_that_gets_no_answer_says_so(
    browser: object, procs: Processes, env: dict[str, str]
) -> None:
    """No worker: the run's deadline passes unanswered, and the page says so and stops."""
    from selenium.webdriver.common.by import By

    server = Server(procs, env)
    driver = browser
    driver.get(f"http://{server.host}:{server.port}/")
    driver.find_element(By.CSS_SELECTOR, "details.more > summary").click()
    timeout = driver.find_element(By.ID, "timeout_s")
    timeout.clear()
    timeout.send_keys("1")
    _submit(driver, "Explain tides")
    _wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, '#run .step[data-kind="no_answer"]'),
        60,
        "the page to say no answer came",
    )
    assert driver.find_element(By.CSS_SELECTOR, ".run-head .chip").text == "no answer"


def test_the_cancel_button_ends_the_run_as_cancelled(
    browser: object, procs: Processes, env: dict[str, str]
) -> None:
    """A person cancels a slow run from its page: the page says it is cancelling, the run is
    answered `cancelled`, and the button goes with the answer."""
    from selenium.webdriver.common.by import By

    slow = {**env, "AEON_LLM_DELAY_MS": "1500"}
    procs.worker(slow)
    server = Server(procs, slow)
    driver = browser
    driver.get(f"http://{server.host}:{server.port}/")
    _submit(driver, "Explain tides")
    button = _wait(driver, lambda d: d.find_element(By.ID, "cancel"), 30, "the Cancel button")
    button.click()
    _wait(
        driver,
        lambda d: (
            d.find_element(By.CSS_SELECTOR, ".run-head .chip").text == "cancelling"
            or d.find_elements(By.CSS_SELECTOR, '#run .step[data-kind="answer"]')
        ),
        10,
        "the page to say the run is cancelling",
    )
    answer = _wait(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, '#run .step[data-kind="answer"]'),
        15,
        "the cancelled answer on the page",
    )
    # textContent: a step fades in, and Selenium's `.text` is empty until it is opaque.
    head = answer.find_element(By.CSS_SELECTOR, ".card-head").get_attribute("textContent")
    assert "cancelled" in head
    assert "the run was cancelled" in answer.get_attribute("textContent")
    ending = driver.find_element(By.CSS_SELECTOR, '#run .step[data-kind="exit"]')
    assert "cancelled" in ending.get_attribute("textContent")
    assert not driver.find_elements(By.ID, "cancel")
    path = _screenshot(driver, "run-page-cancelled", DESKTOP)
    print(f"\nscreenshot: {path}")


def test_a_person_reviews_edits_and_approves_the_plan(
    browser: object, procs: Processes, env: dict[str, str]
) -> None:
    """Asked to see the plan first, the page shows it with Approve and Edit; the person edits
    it and approves, and the run goes on with the edited plan to its answer."""
    from selenium.webdriver.common.by import By

    procs.worker(env)
    server = Server(procs, env)
    driver = browser
    driver.get(f"http://{server.host}:{server.port}/")
    driver.find_element(By.ID, "approve_plan").click()
    _submit(driver, "Explain tides")
    _wait(
        driver,
        lambda d: d.find_element(By.ID, "approval").is_displayed(),
        30,
        "the plan awaiting approval",
    )
    assert driver.find_element(By.CSS_SELECTOR, ".run-head .chip").text == "awaiting approval"
    path = _screenshot(driver, "run-page-approval", DESKTOP)
    driver.find_element(By.ID, "edit-plan").click()
    editor = driver.find_element(By.ID, "plan-editor")
    plan = {"goal": "an edited goal", "steps": [{"step_id": "only", "description": "Say it"}]}
    editor.clear()
    editor.send_keys(json.dumps(plan))
    driver.find_element(By.ID, "approve").click()
    _wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, '#run .step[data-kind="answer"]'),
        60,
        "the answer on the page",
    )
    plan_step = driver.find_element(By.CSS_SELECTOR, '#run .step[data-kind="plan"]')
    assert "an edited goal" in plan_step.get_attribute("textContent")  # it may still fade in
    assert not driver.find_element(By.ID, "approval").is_displayed()
    print(f"\nscreenshot: {path}")


def test_the_webhooks_outcome_ends_the_run_on_the_page(
    browser: object, procs: Processes, env: dict[str, str]
) -> None:
    """A run that named a webhook (its receiver fails once) shows, after its answer, what
    became of it: delivered, after two tries."""
    from selenium.webdriver.common.by import By

    receiver = Receiver()
    try:
        on = hooked(env, receiver, attempts=3)
        procs.worker(on)
        server = Server(procs, on)
        cid = server.submit("Explain tides", webhook_url=receiver.hook("/page", failures=1))
        driver = browser
        driver.get(f"http://{server.host}:{server.port}/#/runs/{cid}")
        card = _wait(
            driver,
            lambda d: d.find_element(By.CSS_SELECTOR, '#run .step[data-kind="webhook_delivered"]'),
            60,
            "the webhook's outcome on the page",
        )
        text = card.get_attribute("textContent")
        assert "delivered" in text and "tries 2" in text, text
        assert driver.find_elements(By.CSS_SELECTOR, '#run .step[data-kind="answer"]')
        assert driver.find_element(By.CSS_SELECTOR, ".run-head .chip").text == "answered"
        driver.execute_script("arguments[0].scrollIntoView()", card)
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / "run-page-webhook.png"  # the card alone: the outcome, after the answer
        card.screenshot(str(path))
        print(f"\nscreenshot: {path}")
    finally:
        receiver.close()


def test_a_run_that_calls_two_tools_shows_each_call(
    browser: object, procs: Processes, env: dict[str, str], tmp_path: Path
) -> None:
    """A worker with two MCP servers (the SDK's test server over stdio, and over HTTP with its
    tools named web_...): the plan marks the tool steps, and the pass shows each call."""
    from mcp_fixtures import http_server, stdio_entry
    from selenium.webdriver.common.by import By

    with http_server(MCP_TEST_PREFIX="web_") as url:
        config = tmp_path / "mcp.json"
        servers = {"calc": stdio_entry(), "facts": {"url": url}}
        config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
        tooled = {**env, "AEON_LLM_DELAY_MS": "150", "AEON_MCP_CONFIG": str(config)}
        procs.worker(tooled)
        server = Server(procs, tooled)
        driver = browser
        driver.get(f"http://{server.host}:{server.port}/")
        _submit(driver, TWO_TOOLS)
        _wait(
            driver,
            lambda d: d.find_elements(By.CSS_SELECTOR, '#run .step[data-kind="answer"]'),
            90,
            "the answer on the page",
        )
    plan = driver.find_element(By.CSS_SELECTOR, '#run .step[data-kind="plan"]')
    assert [chip.text for chip in plan.find_elements(By.CSS_SELECTOR, ".chip.tool")] == [
        "tool add",
        "tool web_lookup",
    ]
    first = driver.find_elements(By.CSS_SELECTOR, '#run .step[data-kind="pass"]')[0]
    for details in first.find_elements(By.CSS_SELECTOR, ".outputs details"):
        if not details.get_attribute("open"):
            details.click()  # open each step, as a person reading the calls would
    calls = first.find_elements(By.CSS_SELECTOR, ".tool-call")
    said = [call.text for call in calls]
    assert len(calls) == 2, said
    assert "tool add" in said[0] and '{"a":2,"b":3}' in said[0] and "ok" in said[0]
    assert "tool web_lookup" in said[1] and "ok" in said[1]
    outputs = [pre.text for pre in first.find_elements(By.CSS_SELECTOR, ".outputs pre")]
    assert outputs[:2] == ["5", "the answer to tides is 42"]  # the results, as the steps' outputs
    path = _screenshot(driver, "run-page-tools", DESKTOP)
    print(f"\nscreenshot: {path}")


def _submitted_to_a_slow_stack(
    driver: object, procs: Processes, env: dict[str, str], **settings: str
) -> Server:
    """A worker and a server with `settings` (a slow model), REQUEST submitted on the page: the
    server."""
    slow = {**env, **settings}
    procs.worker(slow)
    server = Server(procs, slow)
    driver.get(f"http://{server.host}:{server.port}/")
    _submit(driver, REQUEST)
    return server


def test_a_slow_call_shows_what_the_run_waits_for(
    browser: object, procs: Processes, env: dict[str, str]
) -> None:
    """Issue 41, finding 8: against a slow server the page said nothing for minutes while a
    call ran. Every 10 s of silence the runs API's `waiting` event says what the run waits for,
    and the page shows it under the pending step. Each call here takes 12 s, and the loop runs
    (effort high), so the plan's call, which writes no answer text, is silent past 10 s."""
    from selenium.webdriver.common.by import By

    driver = browser
    _submitted_to_a_slow_stack(driver, procs, env, AEON_LLM_DELAY_MS="12000", AEON_EFFORT="high")

    def waiting_line(d: object) -> str:
        found = d.find_elements(By.CSS_SELECTOR, "#run .step.pending .waiting")
        return found[0].get_attribute("textContent") if found else ""

    line = _wait(driver, waiting_line, 60, "a waiting line on the page")
    assert line.startswith("waiting for the model: "), line
    assert line.endswith(" s"), line


def test_the_answer_is_written_on_the_page_as_it_comes(
    browser: object, procs: Processes, env: dict[str, str]
) -> None:
    """Issue 34: once the loop has ended, the answer appears word by word in a card of its
    own, then the answer's card takes its place with the published text. The worker's offline
    model takes 1.5 s a call and writes its reply in chunks over it, so the answer is written
    over long enough to be seen half done (the screenshot run-page-mid-answer shows it)."""
    from selenium.webdriver.common.by import By

    driver = browser
    server = _submitted_to_a_slow_stack(driver, procs, env, AEON_LLM_DELAY_MS="1500")

    def steps(kind: str) -> list:
        return driver.find_elements(By.CSS_SELECTOR, f'#run .step[data-kind="{kind}"]')

    def written() -> str:
        live = driver.find_elements(By.CSS_SELECTOR, "#answer-live")
        return live[0].text if live and live[0].is_displayed() else ""

    _wait(driver, lambda d: steps("exit") and written(), 120, "the answer being written")
    first = written()
    _wait(driver, lambda d: len(written()) > len(first), 30, "more of the answer written")
    assert not steps("answer"), "the answer's card came: it was not seen being written"
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "run-page-mid-answer.png"
    live = driver.find_element(By.CSS_SELECTOR, '#run .step[data-kind="answer_live"]')
    driver.execute_script("arguments[0].scrollIntoView({block: 'end'})", live)
    driver.save_screenshot(str(path))
    print(f"\nscreenshot: {path} ({len(written())} characters written)")

    _wait(driver, lambda d: steps("answer"), 60, "the answer on the page")
    assert not steps("answer_live"), "the card of the answer being written stayed"
    cid = driver.find_element(By.CSS_SELECTOR, ".run-head .run-id").text
    published = server.get(f"/v1/runs/{cid}").body["result"]["final_answer"]["answer_text"]
    shown = steps("answer")[0].find_element(By.CSS_SELECTOR, ".answer-text").text
    assert shown == published.strip()
    assert published.startswith(first.strip()), "what was written is not the answer's start"


def test_a_forks_page_links_the_run_it_was_forked_from(browser: object, server: Server) -> None:
    """Issue 43: a fork's page says `forked from <parent>`, linking the parent's page."""
    from selenium.webdriver.common.by import By

    parent = server.submit("Explain tides")
    _wait(browser, lambda d: server.get(f"/v1/runs/{parent}").status == 200, 60, "the parent")
    forked = server.post(f"/v1/runs/{parent}/fork", {"from_pass": 1})
    assert forked.status == 202, forked
    fork = forked.body["correlation_id"]
    driver = browser
    driver.get(f"http://{server.host}:{server.port}/#/runs/{fork}")
    lineage = _wait(
        driver,
        lambda d: [e for e in d.find_elements(By.ID, "forked-from") if e.is_displayed()],
        30,
        "the fork's lineage",
    )[0]
    assert lineage.text == f"forked from {parent} from pass 1"
    link = lineage.find_element(By.TAG_NAME, "a")
    assert link.get_attribute("href").endswith(f"#/runs/{parent}")
