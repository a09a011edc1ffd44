// Aeon's run page: submit a request, follow its steps live, list recent runs.
// Plain JavaScript, no build step. Text from the server is only ever set as text, never as HTML.
//
// The run's events are read with fetch rather than EventSource, because EventSource cannot send
// the Authorization header the API may need. A dropped stream is picked up again with
// Last-Event-ID, so no step is shown twice or missed: after the time the server asks for
// (Retry-After, when it is busy or Redis is away), else after a delay that doubles each time.
"use strict";

// A step's badge: its phase's letter, a pass's number, and for the loop's end whether it converged.
function badge(kind, data) {
  if (kind === "pass") return String(data.pass);
  if (kind === "exit") return data.reason === "converged" ? "✓" : "!";
  return {
    profile: "A", plan: "B", awaiting_approval: "?", answer: "E", no_answer: "!",
    webhook_delivered: "↗", webhook_failed: "!",
  }[kind];
}
// A run is over with one of these; a run that named a webhook then says what became of it,
// and its stream ends there (the server ends it, and a reconnect is 204).
const LAST_STEPS = new Set(["answer", "no_answer"]);
const WEBHOOK_STEPS = new Set(["webhook_delivered", "webhook_failed"]);
// Refusals that trying again will not change (a token is asked for; the run is not there).
const FINAL_REFUSALS = new Set([400, 401, 404, 422]);
const RETRY_MS = 1000;
const RETRY_MAX_MS = 30000;
const RECENT_EVERY_MS = 10000;

const state = {
  token: sessionStorage.getItem("aeon-token") || "",
  following: null, // AbortController of the run being followed
  current: null, // its correlation id
};

// -- small helpers ------------------------------------------------------------------------

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const $ = (selector) => document.querySelector(selector);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const pct = (value) => `${Math.round(value * 100)}%`;

function ago(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

function meter(value, kind) {
  const bar = el("span");
  bar.style.width = pct(Math.min(1, Math.max(0, value)));
  return el("div", { class: `meter ${kind || ""}`, role: "presentation" }, bar);
}

function measure(label, value, kind) {
  return el("div", { class: "measure" }, el("span", { text: label }), meter(value, kind),
    el("b", { text: pct(value) }));
}

function headers(extra = {}) {
  return state.token ? { ...extra, Authorization: `Bearer ${state.token}` } : extra;
}

// -- the API -------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.reason ? body.reason : `the server answered ${status}`);
    this.status = status;
    this.field = body && body.field;
  }
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers) });
  const body = await response.json().catch(() => null);
  if (response.status === 401) askForToken();
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

function askForToken() {
  $("#token-box").hidden = false;
  $("#token").focus();
}

// -- submitting ----------------------------------------------------------------------------

function showFormError(message) {
  const box = $("#form-error");
  box.textContent = message;
  box.hidden = !message;
}

async function submit(event) {
  event.preventDefault();
  showFormError("");
  state.token = $("#token").value.trim() || state.token;
  if (state.token) sessionStorage.setItem("aeon-token", state.token);
  const body = { request: $("#request").value };
  const rulesText = $("#rules").value.trim();
  if (rulesText) {
    try {
      body.rules = JSON.parse(rulesText);
    } catch (error) {
      showFormError(`rules: not valid JSON (${error.message})`);
      return;
    }
  }
  for (const name of ["max_ttl", "timeout_s", "token_budget"]) {
    const value = $(`#${name}`).value.trim();
    if (value) body[name] = Number(value);
  }
  if ($("#effort").value) body.effort = $("#effort").value;
  if ($("#approve_plan").checked) body.approve_plan = true;
  const button = $("#submit");
  button.disabled = true;
  try {
    const run = await api("/v1/runs", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    openRun(run.correlation_id, body.request.trim());
    history.pushState(null, "", `#/runs/${run.correlation_id}`);
    loadRecent();
  } catch (error) {
    showFormError(error.field ? `${error.field}: ${error.message}` : error.message);
  } finally {
    button.disabled = false;
  }
}

// -- following a run -------------------------------------------------------------------------

// Each Server-Sent Event's fields; `onEvent` returns true when nothing more is wanted.
async function readEvents(response, onEvent) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = { event: "message", data: [], id: null };
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") event.data.push(text);
        else if (field === "event") event.event = text;
        else if (field === "id") event.id = text;
      }
      if (event.data.length && onEvent({ ...event, data: JSON.parse(event.data.join("\n")) })) {
        await reader.cancel();
        return true;
      }
    }
  }
}

// How long to wait before trying the stream again: what the server asked for (Retry-After, in
// seconds), else RETRY_MS doubled for each try in a row that brought nothing, up to RETRY_MAX_MS.
function retryDelay(response, tries) {
  const asked = Number(response && response.headers.get("Retry-After"));
  if (asked > 0) return asked * 1000;
  return Math.min(RETRY_MAX_MS, RETRY_MS * 2 ** tries);
}

async function follow(id, view, signal) {
  let lastId = null;
  let tries = 0; // in a row without a step
  while (!signal.aborted) {
    let response = null;
    try {
      const extra = { Accept: "text/event-stream" };
      if (lastId) extra["Last-Event-ID"] = lastId;
      response = await fetch(`/v1/runs/${encodeURIComponent(id)}/events`,
        { headers: headers(extra), signal });
      if (response.status === 204) return;
      if (!response.ok) {
        const body = await response.json().catch(() => null);
        if (response.status === 401) askForToken();
        if (FINAL_REFUSALS.has(response.status)) {
          view.fail(new ApiError(response.status, body).message);
          return;
        }
      } else {
        const finished = await readEvents(response, (event) => {
          if (event.id) lastId = event.id; // a waiting line has none: no place to resume from
          tries = 0;
          view.add(event.event, event.data);
          return event.event === "no_answer" || WEBHOOK_STEPS.has(event.event);
        });
        if (finished) return;
        if (view.finished) continue; // answered: the webhook's outcome, or a 204, is next
      }
    } catch (error) {
      if (signal.aborted) return;
    }
    view.reconnecting();
    await sleep(retryDelay(response, tries)); // then again from the last step received
    tries += 1;
  }
}

function openRun(id, request) {
  if (state.current === id) return;
  if (state.following) state.following.abort();
  state.current = id;
  state.following = new AbortController();
  markCurrent();
  const view = new RunView(id, request);
  $("#run").replaceChildren(view.root);
  follow(id, view, state.following.signal).finally(() => loadRecent());
}

class RunView {
  constructor(id, request) {
    this.status = el("span", { class: "chip live", text: "connecting" });
    this.question = el("blockquote", { class: "question", hidden: true });
    this.timeline = el("ol", { class: "timeline" });
    this.pending = el("li", { class: "step pending" },
      el("span", { class: "badge", text: "A" }),
      el("div", { class: "card", text: "Profiling the request…" }));
    this.timeline.append(this.pending);
    this.cancelButton = el("button", { type: "button", class: "quiet", id: "cancel", text: "Cancel run" });
    this.cancelButton.addEventListener("click", () => this.cancel());
    this.controlError = el("p", { class: "error-box", role: "alert", hidden: true });
    this.approval = el("section", { class: "approval", id: "approval", hidden: true });
    this.lineage = el("p", { class: "lineage", id: "forked-from", hidden: true });
    this.root = el("div", { class: "run-view" },
      el("div", { class: "run-head" }, el("h2", { text: "Run" }), this.status,
        el("span", { class: "run-id", text: id }), this.cancelButton),
      this.lineage, this.controlError, this.approval, this.question, this.timeline);
    $("#run").setAttribute("aria-busy", "true");
    this.id = id;
    if (request) this.setQuestion(request);
    else this.loadQuestion();
    this.loadLineage();
  }

  // A fork (docs/forks.md) says which run it was forked from, and from which pass, with a
  // link to that run's page.
  async loadLineage() {
    try {
      const run = await api(`/v1/runs/${encodeURIComponent(this.id)}`);
      const parent = run.forked_from;
      if (!parent) return;
      const where = parent.from_pass ? ` from pass ${parent.from_pass}` : "";
      this.lineage.replaceChildren("forked from ",
        el("a", { href: `#/runs/${parent.parent}`, class: "run-id", text: parent.parent }), where);
      this.lineage.hidden = false;
    } catch {
      // a run that cannot be read says so through its events
    }
  }

  // A run submitted with approve_plan pauses after its plan (its `awaiting_approval` event):
  // show the plan with Approve, Edit and (the run's) Cancel.
  showPlanForApproval(plan) {
    this.status.className = "chip warn";
    this.status.textContent = "awaiting approval";
    const editor = el("textarea", { class: "mono", id: "plan-editor", hidden: true });
    editor.value = JSON.stringify(
      { goal: plan.goal, steps: plan.steps.map((s) => ({ step_id: s.step_id, description: s.description })) },
      null, 2);
    const approve = el("button", { type: "button", id: "approve", text: "Approve plan" });
    const edit = el("button", { type: "button", class: "quiet", id: "edit-plan", text: "Edit plan" });
    approve.addEventListener("click", () => this.approve(editor.hidden ? null : editor.value));
    edit.addEventListener("click", () => {
      editor.hidden = false;
      edit.remove();
      approve.textContent = "Approve edited plan";
    });
    this.approval.replaceChildren(
      el("h3", { text: "The plan, awaiting your approval" }),
      el("p", { text: `Goal: ${plan.goal}` }),
      el("ol", { class: "plan-steps" }, ...plan.steps.map((s) =>
        el("li", {}, el("code", { text: s.step_id }), ` ${s.description}`))),
      editor,
      el("div", { class: "actions" }, approve, edit));
    this.approval.hidden = false;
  }

  async approve(edited) {
    this.controlError.hidden = true;
    let body;
    if (edited !== null) {
      try {
        body = JSON.stringify({ plan: JSON.parse(edited) });
      } catch (error) {
        this.controlError.textContent = `plan: not valid JSON (${error.message})`;
        this.controlError.hidden = false;
        return;
      }
    }
    try {
      await api(`/v1/runs/${encodeURIComponent(this.id)}/approve`, {
        method: "POST",
        headers: body ? { "Content-Type": "application/json" } : {},
        body,
      });
      this.approval.hidden = true;
      this.status.className = "chip live";
      this.status.textContent = "running";
    } catch (error) {
      this.controlError.textContent = error.field ? `${error.field}: ${error.message}` : error.message;
      this.controlError.hidden = false;
    }
  }

  // Opened from a link or the list: ask the server (again once the first step is in, when
  // the server had not seen the run's request yet).
  async loadQuestion() {
    this.asked = (this.asked || 0) + 1;
    try {
      const run = await api(`/v1/runs/${encodeURIComponent(this.id)}`);
      if (run.request) this.setQuestion(run.request);
    } catch {
      // the events say what there is to say
    }
  }

  // The run stops at its next step and is answered `cancelled`; the answer arrives as events.
  async cancel() {
    this.cancelButton.disabled = true;
    this.controlError.hidden = true;
    try {
      await api(`/v1/runs/${encodeURIComponent(this.id)}/cancel`, { method: "POST" });
      this.status.className = "chip warn";
      this.status.textContent = "cancelling";
    } catch (error) {
      this.controlError.textContent = error.message;
      this.controlError.hidden = false;
      if (error.status !== 409) this.cancelButton.disabled = false;
    }
  }

  setQuestion(text) {
    this.question.textContent = text;
    this.question.hidden = false;
  }

  // The answer's text as it is written (answer_delta), in a card above the pending step:
  // cleared when it is set aside (answer_reset), replaced by the answer's own card at the end.
  // A waiting line is stale once something of the run came.
  clearWaiting() {
    const line = this.pending.querySelector(".waiting");
    if (line) line.remove();
  }

  write(kind, data) {
    this.clearWaiting();
    if (!this.writing) {
      this.writingText = el("div", { class: "answer-text", id: "answer-live", "aria-live": "polite" });
      this.writingChip = el("span", { class: "chip live" });
      this.writing = el("li", { class: "step writing", "data-kind": "answer_live" },
        el("span", { class: "badge", text: "…" }),
        el("div", { class: "card answer-card" },
          el("div", { class: "card-head" }, el("h3", { text: "Answer, as it is written" }),
            el("span", { class: "spacer" }), this.writingChip),
          this.writingText));
    }
    if (kind === "answer_reset") {
      this.writingText.textContent = "";
      this.writing.remove();
      return;
    }
    this.writingChip.textContent = data.provisional ? "to be checked" : "as it will be published";
    this.writingText.append(data.text); // text, never HTML
    if (!this.writing.isConnected) this.pending.before(this.writing);
  }

  add(kind, data) {
    if (kind === "waiting") { // what the run waits for while nothing comes: under the pending step
      let line = this.pending.querySelector(".waiting");
      if (!line) {
        line = el("div", { class: "waiting", "aria-live": "polite" });
        this.pending.querySelector(".card").append(line);
      }
      line.textContent = data.line;
      return;
    }
    if (kind === "answer_delta" || kind === "answer_reset") {
      this.write(kind, data);
      return;
    }
    if (kind === "answer" && this.writing) this.writing.remove(); // the answer's card replaces it
    if (kind === "awaiting_approval") {
      this.showPlanForApproval(data.plan);
      this.pending.querySelector(".badge").textContent = "?";
      this.pending.querySelector(".card").textContent = "Waiting for the plan's approval…";
      return;
    }
    const render = RENDER[kind];
    if (!render) return;
    this.approval.hidden = true; // approved (or cancelled): it went on
    const item = el("li", { class: "step", "data-kind": kind },
      el("span", { class: "badge", text: badge(kind, data) }),
      render(data));
    if (kind === "answer" && data.degraded) item.classList.add("degraded");
    if (this.writing && this.writing.isConnected) this.writing.before(item);
    else if (this.pending.isConnected) this.pending.before(item);
    else this.timeline.append(item); // after the answer: the webhook's outcome
    if (this.question.hidden && this.asked === 1) this.loadQuestion();
    this.setPending(kind, data);
  }

  setPending(kind, data) {
    this.clearWaiting();
    const next = {
      profile: ["B", "Planning…"],
      plan: ["1", "Running pass 1…"],
      pass: data.converged ? ["✓", "Converged; wrapping up…"] : [String(data.pass + 1), `Running pass ${data.pass + 1}…`],
      exit: ["E", "Writing the answer…"],
    }[kind];
    if (WEBHOOK_STEPS.has(kind)) return; // after the answer: the run's state stays as it is
    if (LAST_STEPS.has(kind)) {
      this.finished = true;
      this.approval.hidden = true;
      this.pending.remove();
      this.cancelButton.remove();
      const [chip, words] = kind === "no_answer" ? ["bad", "no answer"]
        : data.degraded ? ["warn", "answered, degraded"] : ["good", "answered"];
      this.status.className = `chip ${chip}`;
      this.status.textContent = words;
      $("#run").setAttribute("aria-busy", "false");
      return;
    }
    if (this.status.textContent !== "cancelling") {
      this.status.className = "chip live";
      this.status.textContent = "running";
    }
    if (next) {
      this.pending.querySelector(".badge").textContent = next[0];
      this.pending.querySelector(".card").textContent = next[1];
    }
  }

  reconnecting() {
    if (this.finished) return; // answered: only the webhook's outcome may still come
    this.status.className = "chip live";
    this.status.textContent = "reconnecting";
  }

  fail(message) {
    this.pending.remove();
    this.status.className = "chip bad";
    this.status.textContent = "unavailable";
    this.timeline.append(el("li", { class: "error-box", role: "alert", text: message }));
    $("#run").setAttribute("aria-busy", "false");
  }
}

// -- one card per step -----------------------------------------------------------------------

function card(title, chips, ...body) {
  return el("div", { class: "card" },
    el("div", { class: "card-head" }, el("h3", { text: title }), el("span", { class: "spacer" }),
      chips),
    body);
}

function facts(pairs) {
  return el("ul", { class: "facts" },
    pairs.filter(([, value]) => value !== null && value !== undefined && value !== "")
      .map(([label, value]) => el("li", {}, `${label} `, el("b", { text: String(value) }))));
}

function list(title, items) {
  if (!items || !items.length) return null;
  return el("div", {}, el("p", { text: title }), el("ul", {}, items.map((i) => el("li", { text: i }))));
}

function webhookCard(d, chip, words) {
  return card("Webhook", el("span", { class: `chip ${chip}`, text: words }),
    facts([["tries", d.tries], ["webhook-id", d.webhook_id], ["why", d.reason]]));
}

const RENDER = {
  profile(d) {
    return card("Profile",
      d.default_profile ? el("span", { class: "chip warn", text: "default profile" }) : null,
      facts([
        ["depth", `${d.reasoning_depth} of 5`],
        ["information", pct(d.information_sufficiency)],
        ["tools", d.expected_tool_usage],
        ["breadth", d.output_breadth],
        ["confidence needed", d.confidence_requirement],
        ["pass budget", `${d.pass_budget} of at most ${d.max_ttl}`],
      ]),
      d.checks && d.checks.length
        ? el("div", { class: "checks" }, el("p", { text: "Checks prepared" }),
          el("ul", {}, d.checks.map((line) => el("li", { text: line }))))
        : null);
  },

  // The plan as Phase B made it: a step a later pass's refinement added, changed or removed
  // says so and in which pass, so the count is B's (as `aeon ask` prints it).
  plan(d) {
    const planned = d.planned_steps ?? d.steps.length;
    const added = d.steps.length - planned;
    const marks = (s) => [
      ["added_in_pass", "added"], ["changed_in_pass", "changed"], ["removed_in_pass", "removed"],
    ].filter(([key]) => s[key]).map(([key, word]) =>
      el("span", { class: "chip later", text: `${word} in pass ${s[key]}` }));
    return card("Plan",
      el("span", { class: "chip", text: `${planned} steps planned${added ? `, ${added} added later` : ""}` }),
      el("p", { class: "goal", text: d.goal }),
      d.files && d.files.length ? el("p", { class: "files" }, "Files: ",
        ...d.files.map((path) => el("code", { text: path }))) : null,
      el("ol", { class: "plan-steps" },
        d.steps.map((s) => el("li", { class: s.removed_in_pass ? "removed" : null },
          el("code", { text: s.step_id }), " ", s.description || "",
          s.tool ? el("span", { class: "chip tool", text: `tool ${s.tool}` }) : null,
          ...marks(s)))));
  },

  pass(d) {
    // A tool step's call: which tool, with what, how it went, how long, and (when the step
    // kept no output to show below it, e.g. a failed call) what it said.
    const toolCall = (c, said) => el("div", { class: "tool-call" },
      el("span", { class: "chip tool", text: `tool ${c.tool}` }),
      el("code", { text: JSON.stringify(c.arguments) }),
      el("span", { class: `chip ${c.outcome === "ok" ? "good" : "bad"}`, text: c.outcome }),
      el("span", { class: "secs", text: `${c.seconds.toFixed(2)} s` }),
      c.repaired ? el("span", { class: "chip warn", text: `repaired: ${c.repaired}` }) : null,
      said && c.excerpt ? el("div", { class: "excerpt", text: c.excerpt }) : null);
    const verdict = d.converged
      ? el("span", { class: "chip good", text: "converged" })
      : el("span", { class: "chip", text: "not converged" });
    // Only the last step's output starts open; each other step says it can be opened.
    const outputs = el("div", { class: "outputs" }, d.steps.map((s, index) => {
      const chip = { done: "good", failed: "bad", blocked: "warn" }[s.status] || "";
      const what = s.output ? "output" : "details";
      const toggle = el("span", { class: "toggle" });
      const details = el("details", { open: index === d.steps.length - 1 && s.output ? true : null },
        el("summary", {}, el("span", { class: "sid", text: s.step_id }),
          el("span", { class: "desc", text: s.description || "" }),
          el("span", { class: `chip ${chip}`, text: s.status }), toggle),
        s.why ? el("div", { class: "why", text: s.why }) : null,
        s.tool_call ? toolCall(s.tool_call, !s.output) : null,
        s.output ? el("pre", { text: s.output }) : null);
      const label = () => { toggle.textContent = `${details.open ? "hide" : "show"} ${what}`; };
      details.addEventListener("toggle", label);
      label();
      if (!s.why && !s.tool_call && !s.output) details.classList.add("empty");
      return details;
    }));
    const evidence = el("div", { class: "evidence" },
      d.assessment ? el("p", {
        text: `Completeness ${pct(d.assessment.completeness)}, coherence ${pct(d.assessment.coherence)}`
          + (d.assessment.summary ? `: ${d.assessment.summary}` : ""),
      }) : null,
      d.rules ? el("p", { text: `Rules: ${pct(d.rules.score)}, ${d.rules.passed ? "passed" : "not passed"}` }) : null,
      list("Rules failed", d.rules && d.rules.failed),
      list("Issues found", d.validation && d.validation.issues),
      list("Critique", d.critique),
      list("Refined", d.refinement && d.refinement.applied));
    return card(`Pass ${d.pass}`, verdict,
      el("div", { class: "pass-score" }, measure("score", d.score, d.converged ? "good" : "")),
      outputs, evidence);
  },

  exit(d) {
    const good = d.reason === "converged";
    return card("Loop ended", el("span", { class: `chip ${good ? "good" : "warn"}`, text: d.reason }),
      el("p", { class: "exit-words", text: d.words + (d.detail ? ` (${d.detail})` : "") }),
      facts([["passes", d.passes], ["pass budget left", d.ttl_remaining], ["refinement actions", d.refinements]]));
  },

  webhook_delivered(d) {
    return webhookCard(d, "good", "delivered");
  },

  webhook_failed(d) {
    return webhookCard(d, "bad", "failed");
  },

  no_answer(d) {
    return card("No answer", el("span", { class: "chip bad", text: "no answer" }),
      el("p", { class: "exit-words", text: d.reason }));
  },

  answer(d) {
    const answer = d.final_answer;
    const usage = d.usage || {};
    const degraded = d.degraded_because && d.degraded_because.length
      ? el("div", { class: "notice", role: "note" }, el("strong", { text: "Degraded answer" }),
        el("ul", {}, d.degraded_because.map((line) => el("li", { text: line }))))
      : null;
    // A degraded answer's lines name the checks that did not hold already.
    const notHeld = !degraded && d.checks_not_held && d.checks_not_held.length
      ? el("ul", {}, d.checks_not_held.map((line) => el("li", { text: line })))
      : null;
    const checks = d.checks
      ? el("div", { class: "checks" }, el("p", { text: `Checks: ${d.checks}` }), notHeld)
      : null;
    const body = el("div", { class: "card answer-card" },
      el("div", { class: "card-head" }, el("h3", { text: "Answer" }), el("span", { class: "spacer" }),
        el("span", { class: `chip ${d.degraded ? "warn" : "good"}`, text: d.status })),
      degraded,
      checks,
      el("div", { class: "answer-text", text: answer.answer_text }),
      el("div", { class: "answer-facts" },
        typeof answer.confidence === "number"
          ? measure("confidence", answer.confidence, answer.confidence >= 0.7 ? "good" : "warn") : null,
        answer.notes ? el("p", { class: "notes", text: `Notes: ${answer.notes}` }) : null),
      el("p", {
        class: "usage",
        text: `${d.total_passes} pass(es), ${d.total_refinements} refinement action(s), `
          + `${usage.prompt_tokens + usage.completion_tokens} tokens in ${usage.calls} call(s)`
          + `${usage.estimated ? " (estimated)" : ""}`
          + `${usage.token_budget ? ` of a budget of ${usage.token_budget}` : ""}`
          + `, ${d.elapsed_seconds.toFixed(1)} s`,
      }));
    return body;
  },
};

// -- recent runs -------------------------------------------------------------------------------

async function loadRecent() {
  try {
    const { runs } = await api("/v1/runs?limit=20");
    $("#recent-empty").hidden = runs.length > 0;
    $("#recent").replaceChildren(...runs.map((run) => {
      const chip = run.state === "answered"
        ? el("span", { class: `chip ${run.degraded ? "warn" : "good"}`, text: run.status })
        : run.state === "running" ? el("span", { class: "chip live", text: "running" })
          : el("span", { class: "chip bad", text: "no answer" });
      return el("li", {}, el("button", {
        type: "button",
        "data-id": run.correlation_id,
        "aria-current": run.correlation_id === state.current ? "true" : null,
        onclick: () => { location.hash = `#/runs/${run.correlation_id}`; },
      }, el("span", { class: "recent-request", text: run.request }),
      el("span", { class: "recent-meta" }, chip,
        typeof run.confidence === "number" ? el("span", { text: `confidence ${pct(run.confidence)}` }) : null,
        run.total_passes !== null ? el("span", { text: `${run.total_passes} pass(es)` }) : null,
        el("span", { text: ago(run.submitted_at) }))));
    }));
  } catch (error) {
    $("#recent-empty").hidden = false;
    $("#recent-empty").textContent = error.message;
  }
}

function markCurrent() {
  for (const button of document.querySelectorAll("#recent button")) {
    button.setAttribute("aria-current", button.dataset.id === state.current ? "true" : "false");
  }
}

// -- wiring ----------------------------------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/runs\/([A-Za-z0-9_.:-]{1,128})$/);
  if (match) openRun(match[1]);
}

document.addEventListener("DOMContentLoaded", () => {
  $("#token").value = state.token;
  $("#ask-form").addEventListener("submit", submit);
  $("#request").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) $("#ask-form").requestSubmit();
  });
  $("#refresh").addEventListener("click", loadRecent);
  window.addEventListener("hashchange", route);
  route();
  loadRecent();
  setInterval(() => { if (!document.hidden) loadRecent(); }, RECENT_EVERY_MS);
});
