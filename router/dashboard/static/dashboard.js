// rolegate dashboard: loads server-rendered fragments with the operator's bearer
// token and sends rollout actions to the JSON API. The token lives only in this
// tab's sessionStorage and only ever travels in an Authorization header, which a
// browser never adds on its own: another site cannot make these requests.
"use strict";

const TOKEN_KEY = "rolegate.token";
const REFRESH_MS = 15000;
const isOpen = () => document.body.dataset.open === "true";
const token = () => sessionStorage.getItem(TOKEN_KEY) || "";
const el = (id) => document.getElementById(id);

function headers(bearer) {
  const h = { "Accept": "text/html, application/json" };
  if (bearer) h["Authorization"] = "Bearer " + bearer;
  return h;
}

async function errorText(response) {
  try {
    const body = await response.json();
    if (body && body.error) return body.error.message + " (" + response.status + ")";
  } catch (e) { /* not JSON: fall through to the status line */ }
  return response.status + " " + response.statusText;
}

function showTokenState() {
  const state = el("token-state");
  if (isOpen()) state.textContent = "open server";
  else state.textContent = token() ? "token set for this tab" : "no token";
}

async function loadContent() {
  const content = el("content");
  if (!content || !content.dataset.fragment) return;
  if (!token() && !isOpen()) return;
  const response = await fetch(content.dataset.fragment, {
    headers: headers(token()), cache: "no-store", credentials: "omit",
  });
  if (!response.ok) {
    content.innerHTML = "";
    const p = document.createElement("p");
    p.className = "error";
    p.textContent = "Could not load: " + (await errorText(response));
    content.appendChild(p);
    return;
  }
  // The fragment is rendered by the server with autoescaping; no script runs from it.
  content.innerHTML = await response.text();
  content.dataset.loaded = "true";
}

let pending = null;

function openDialog(action, role, label) {
  pending = { action, role };
  el("action-title").textContent = label + " " + role + "?";
  el("action-what").textContent = "POST /v1/bindings/" + role + "/" + action;
  el("action-reason").value = "";
  el("action-token").value = token();
  el("action-error").textContent = "";
  el("action-dialog").showModal();
  el("action-reason").focus();
}

async function confirmAction(event) {
  event.preventDefault();
  if (!pending) return;
  const reason = el("action-reason").value.trim();
  if (!reason) { el("action-error").textContent = "A reason is required."; return; }
  const bearer = el("action-token").value.trim();
  if (!bearer && !isOpen()) { el("action-error").textContent = "An operator token is required."; return; }
  const url = "/v1/bindings/" + encodeURIComponent(pending.role) + "/" + pending.action;
  const h = headers(bearer);
  h["Content-Type"] = "application/json";
  h["Accept"] = "application/json";
  const response = await fetch(url, {
    method: "POST", headers: h, body: JSON.stringify({ reason }), credentials: "omit",
  });
  if (!response.ok) { el("action-error").textContent = await errorText(response); return; }
  if (bearer) sessionStorage.setItem(TOKEN_KEY, bearer);
  pending = null;
  el("action-dialog").close();
  showTokenState();
  await loadContent();
}

document.addEventListener("DOMContentLoaded", () => {
  showTokenState();
  el("token-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = el("token-input").value.trim();
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    el("token-input").value = "";
    showTokenState();
    await loadContent();
  });
  el("token-forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showTokenState();
  });
  el("action-form").addEventListener("submit", confirmAction);
  el("action-cancel").addEventListener("click", () => { pending = null; el("action-dialog").close(); });
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (button) openDialog(button.dataset.action, button.dataset.role, button.textContent);
  });
  const content = el("content");
  if (content && content.dataset.loaded !== "true") loadContent();
  setInterval(() => {
    if (!el("action-dialog").open && document.visibilityState === "visible") loadContent();
  }, REFRESH_MS);
});
