// The API docs page: renders /openapi.json as it is, so it never disagrees with the server.
"use strict";

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Text with `code` spans, as the document writes them, shown as code (as text, never HTML).
function prose(tag, text) {
  return el(tag, {}, String(text || "").split("`").map((part, i) => (i % 2 ? el("code", { text: part }) : part)));
}

const refName = (schema) => (schema && schema.$ref ? schema.$ref.split("/").pop() : null);

function schemaLink(schema) {
  const name = refName(schema);
  return name ? el("a", { href: `#schema-${name}` }, el("code", { text: name })) : "";
}

function parameters(op) {
  if (!op.parameters || !op.parameters.length) return null;
  return [el("h3", { text: "Parameters" }), el("table", {},
    el("tr", {}, ["name", "in", "meaning"].map((h) => el("th", { text: h }))),
    op.parameters.map((p) => el("tr", {}, el("td", {}, el("code", { text: p.name })),
      el("td", { text: p.in }), prose("td", p.description))))];
}

function responses(op) {
  return [el("h3", { text: "Responses" }), el("table", {},
    Object.entries(op.responses).map(([code, r]) => {
      const media = r.content ? Object.values(r.content)[0] : null;
      return el("tr", {}, el("td", {}, el("code", { text: code })),
        prose("td", r.description), el("td", {}, media ? schemaLink(media.schema) : ""));
    }))];
}

function operation(path, method, op) {
  const body = op.requestBody
    ? [el("h3", { text: "Body" }), schemaLink(op.requestBody.content["application/json"].schema)]
    : null;
  return el("section", { class: "panel op", id: `${method}-${path}` },
    el("div", { class: "op-head" }, el("span", { class: `method ${method}`, text: method.toUpperCase() }),
      el("code", { text: path })),
    el("p", {}, el("strong", { text: op.summary })),
    op.description ? prose("p", op.description) : null,
    parameters(op), body, responses(op));
}

async function main() {
  const doc = await (await fetch("/openapi.json")).json();
  document.querySelector("#intro").append(el("h1", { text: `${doc.info.title} API` }),
    prose("p", doc.info.description),
    prose("p", "With `AEON_HTTP_TOKENS` set, every `/v1` request needs `Authorization: Bearer <token>`."));
  const operations = document.querySelector("#operations");
  for (const [path, methods] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(methods)) operations.append(operation(path, method, op));
  }
  document.querySelector("#schemas").append(...Object.entries(doc.components.schemas).map(([name, schema]) =>
    el("details", { class: "schema", id: `schema-${name}` }, el("summary", { text: name }),
      el("pre", { text: JSON.stringify(schema, null, 2) }))));
}

document.addEventListener("DOMContentLoaded", main);
