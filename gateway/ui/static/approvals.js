// Loopgate approvals inbox. Plain browser JavaScript, no framework and no build step.
//
// Everything shown here comes from callers and models, so it is hostile: it only ever reaches
// the page through textContent / attributes set with setAttribute on inert elements, never as
// HTML. The key lives in sessionStorage (this tab only) and is sent as a Bearer token; it is
// never put in a URL, a log line or a cookie. The console (/ui/) keeps it in the same entry, so
// one sign-in serves both pages. An admin key sees every tenant's approvals, each naming its tenant.
"use strict";

(() => {
  const KEY_SLOT = "loopgate.ui.key";  // shared with the console (console.js)
  const POLL_MS = 2000;            // while the tab is visible
  const HIDDEN_POLL_MS = 15000;    // while it is in the background
  const MAX_BACKOFF_MS = 30000;    // after repeated failures
  const LIST_LIMIT = 50;
  const AUDIT_LIMIT = 20;
  const KEEP_DONE_MS = 5000;       // a decided card stays this long so its outcome can be read
  const API = new URL("../", window.location.href);  // the gateway root, also behind a path prefix

  const $ = (id) => document.getElementById(id);
  const state = {
    key: null,
    timer: 0,
    failures: 0,
    listTag: "",
    auditTag: "",
    firstList: true,
    cards: new Map(),   // continuation id -> {el, item, choices (call id -> () => decision), busy, done}
    lastItems: [],
    session: 0,         // bumped at every sign-in and sign-out: answers for an older key are dropped
    polling: false,
    again: false,
  };

  class ApiError extends Error {
    constructor(status, message, code) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(path, {method = "GET", body, etag} = {}) {
    const headers = {authorization: `Bearer ${state.key}`, accept: "application/json"};
    if (body !== undefined) headers["content-type"] = "application/json";
    if (etag) headers["if-none-match"] = etag;
    const response = await fetch(new URL(path, API), {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer", redirect: "error",
    });
    if (response.status === 304) return {notModified: true, etag};
    let payload = null;
    try { payload = await response.json(); } catch { payload = null; }
    if (!response.ok) {
      const error = payload && typeof payload === "object" && payload.error ? payload.error : {};
      const message = typeof error.message === "string" ? error.message : `HTTP ${response.status}`;
      throw new ApiError(response.status, message, error.code);
    }
    return {payload, etag: response.headers.get("etag") || ""};
  }

  // ---- small helpers ------------------------------------------------------------------------

  /** The first present value among dotted `names` ("key.name"), skipping null and "". */
  function pick(obj, ...names) {
    if (!obj || typeof obj !== "object") return undefined;
    for (const name of names) {
      const path = name.split(".");
      let value = obj;
      for (const part of path) value = value && typeof value === "object" ? value[part] : undefined;
      if (value !== undefined && value !== null && value !== "") return value;
    }
    return undefined;
  }

  function text(value) {
    if (value === undefined || value === null) return "";
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function toDate(value) {
    if (value === undefined || value === null || value === "") return null;
    const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
    return Number.isNaN(date.getTime()) ? null : date;
  }

  // The console's one date format (console-charts.js's when()): "2026-12-07 13:10 UTC".
  function absolute(date) {
    return `${date.toISOString().slice(0, 16).replace("T", " ")} UTC`;
  }

  function relative(date) {
    const seconds = Math.round((date.getTime() - Date.now()) / 1000);
    const span = Math.abs(seconds);
    if (span < 5) return "just now";
    const [amount, unit] = span < 60 ? [span, "s"] : span < 3600 ? [Math.round(span / 60), "min"]
      : span < 172800 ? [Math.round(span / 3600), "h"] : [Math.round(span / 86400), "d"];
    return seconds >= 0 ? `in ${amount} ${unit}` : `${amount} ${unit} ago`;
  }

  function setTime(el, value) {
    const date = toDate(value);
    if (!date) { el.textContent = "—"; el.removeAttribute("datetime"); return; }
    el.setAttribute("datetime", date.toISOString());
    el.textContent = `${absolute(date)} (${relative(date)})`;
    el.title = date.toISOString();
  }

  function prettyArguments(raw) {
    if (typeof raw !== "string") return JSON.stringify(raw ?? {}, null, 2);
    try { return JSON.stringify(JSON.parse(raw), null, 2); } catch { return raw; }
  }

  function announce(message) {
    const region = $("announce");
    region.textContent = "";
    window.setTimeout(() => { region.textContent = message; }, 50);
  }

  function setStatus(message) { $("status").textContent = message; }

  // ---- sign in / out ------------------------------------------------------------------------

  function showSignedIn(signedIn) {
    $("sign-in").hidden = signedIn;
    $("inbox").hidden = !signedIn;
    $("history").hidden = !signedIn;
    $("who").hidden = !signedIn;
  }

  async function signIn(event) {
    event.preventDefault();
    const input = $("key");
    const key = input.value.trim();
    $("sign-in-error").textContent = "";
    if (!key) { $("sign-in-error").textContent = "Enter a key."; input.focus(); return; }
    state.key = key;
    $("sign-in-button").disabled = true;
    try {
      await api(`v1/continuations?status=pending&limit=1`);
    } catch (error) {
      state.key = null;
      $("sign-in-error").textContent = error instanceof ApiError && error.status === 401
        ? "That key was not accepted." : `Could not sign in: ${error.message}`;
      input.focus();
      return;
    } finally {
      $("sign-in-button").disabled = false;
    }
    input.value = "";
    sessionStorage.setItem(KEY_SLOT, key);
    start();
    $("inbox").focus();
  }

  function signOut(message) {
    state.session += 1;
    sessionStorage.removeItem(KEY_SLOT);
    window.clearTimeout(state.timer);
    state.key = null;
    state.listTag = state.auditTag = "";
    state.firstList = true;
    state.lastItems = [];
    state.cards.clear();
    $("pending").replaceChildren();
    $("decisions").querySelector("tbody").replaceChildren();
    showSignedIn(false);
    $("sign-in-error").textContent = typeof message === "string" ? message : "";
    $("key").focus();
  }

  function start() {
    state.session += 1;
    showSignedIn(true);
    $("who-text").textContent = "Signed in";
    poll();
  }

  // ---- polling ------------------------------------------------------------------------------

  /** One refresh at a time: a request for another while one runs makes it run again right after. */
  async function poll() {
    window.clearTimeout(state.timer);
    if (!state.key) return;
    if (state.polling) { state.again = true; return; }
    state.polling = true;
    const session = state.session;
    try {
      await Promise.all([refreshList(session), refreshAudit(session)]);
      state.failures = 0;
      setStatus(`Updated ${absolute(new Date())}`);
    } catch (error) {
      if (session !== state.session) {
        // signed out (or in again) meanwhile: this answer belongs to the old key
      } else if (error instanceof ApiError && error.status === 401) {
        state.polling = false;
        signOut("The key was rejected (revoked or expired). Sign in again.");
        return;
      } else {
        state.failures += 1;
        setStatus(`Cannot refresh (${error.message}); retrying…`);
      }
    } finally {
      state.polling = false;
    }
    if (!state.key) return;
    if (state.again) { state.again = false; poll(); return; }
    const base = document.hidden ? HIDDEN_POLL_MS : POLL_MS;
    const delay = Math.min(MAX_BACKOFF_MS, base * 2 ** Math.min(state.failures, 4));
    state.timer = window.setTimeout(poll, delay);
  }

  async function refreshList(session) {
    const result = await api(`v1/continuations?status=pending&limit=${LIST_LIMIT}`, {etag: state.listTag});
    if (session !== state.session) return;
    if (result.notModified) { renderList(state.lastItems); return; }  // times move on; decided cards go
    state.listTag = result.etag;
    const payload = result.payload || {};
    $("who-text").textContent = payload.scope === "all_tenants" ? "Signed in (admin: every tenant)" : "Signed in";
    const items = Array.isArray(payload.data) ? payload.data : [];
    state.lastItems = items;
    renderList(items);
    $("more").hidden = payload.has_more !== true;
  }

  async function refreshAudit(session) {
    let result;
    try {
      result = await api(`v1/audit?limit=${AUDIT_LIMIT}`, {etag: state.auditTag});
      if (session !== state.session) return;
    } catch (error) {
      if (error instanceof ApiError && (error.status === 403 || error.status === 404)) {
        $("history").hidden = true;  // this key (or this gateway) has no audit trail to show
        return;
      }
      throw error;
    }
    $("history").hidden = false;
    if (result.notModified) return;
    state.auditTag = result.etag;
    const entries = Array.isArray(result.payload && result.payload.data) ? result.payload.data : [];
    renderAudit(entries);
  }

  // ---- the inbox ----------------------------------------------------------------------------

  /** The calls a person decides here: approvals, and running calls asking for input (elicitations). */
  function approvalCalls(item) {
    const pending = Array.isArray(item.pending) ? item.pending : [];
    return pending.filter((call) => call && (call.reason === "approval" || call.reason === "elicitation"));
  }

  function renderList(items) {
    const list = $("pending");
    const wanted = items
      .filter((item) => item && typeof item.id === "string" && approvalCalls(item).length > 0)
      .sort((a, b) => (toDate(b.created_at) || 0) - (toDate(a.created_at) || 0));
    const seen = new Set();
    const arrivals = [];
    wanted.forEach((item, index) => {
      seen.add(item.id);
      let card = state.cards.get(item.id);
      if (!card) {
        card = buildCard(item);
        state.cards.set(item.id, card);
        if (!state.firstList) arrivals.push(item);
      } else {
        card.item = item;
        fillFacts(card);
      }
      // Move only what is out of place: moving the card being typed into would drop its focus.
      if (list.children[index] !== card.el) list.insertBefore(card.el, list.children[index] || null);
    });
    let decidedElsewhere = 0;
    for (const [id, card] of state.cards) {
      if (seen.has(id)) continue;
      if (!card.done && !card.busy) decidedElsewhere += 1;
      if (card.busy) continue;  // our own decision is still on its way; its answer removes it
      if (card.doneAt && Date.now() - card.doneAt < KEEP_DONE_MS) continue;  // let its outcome be read
      card.el.remove();
      state.cards.delete(id);
    }
    state.firstList = false;
    $("count").textContent = String(wanted.length);
    $("empty").hidden = wanted.length > 0;
    if (arrivals.length) {
      const names = arrivals.map((item) => approvalCalls(item).map((call) => text(call.name)).join(", "));
      announce(`New approval request: ${names.join("; ")}`);
    } else if (decidedElsewhere) {
      announce(`${decidedElsewhere} request(s) were decided elsewhere or expired.`);
    }
  }

  let serial = 0;

  function buildCard(item) {
    const el = $("card-template").content.firstElementChild.cloneNode(true);
    const card = {el, item, choices: new Map(), busy: false, done: false};
    el.dataset.id = item.id;
    if (!state.firstList) el.classList.add("arrived");
    const calls = approvalCalls(item);
    const clientCalls = (item.pending || []).filter((call) => call && call.reason === "client");
    const single = calls.length === 1 && clientCalls.length === 0;
    const container = el.querySelector(".calls");
    for (const call of calls) container.append(buildCall(card, call, single));
    if (clientCalls.length) {
      el.querySelector(".card-note").textContent = "Also waiting for the client's result of "
        + clientCalls.map((call) => text(call.name)).join(", ")
        + "; this continuation is decided through the API, not here.";
      for (const button of el.querySelectorAll("button")) button.disabled = true;
    } else if (!single) {
      el.querySelector(".card-actions").hidden = false;
      const send = el.querySelector(".send");
      send.disabled = true;
      send.addEventListener("click", () => decide(card));
    }
    fillFacts(card);
    return card;
  }

  function buildCall(card, call, single) {
    if (call.reason === "elicitation") {
      return window.LoopgateElicitation.buildQuestion(call, (asked, action, decision, section) => {
        card.choices.set(asked.tool_call_id, decision);
        if (single) { decide(card); return; }
        for (const button of section.querySelectorAll(".buttons button")) {
          button.setAttribute("aria-pressed", String(button.classList.contains(action)));
        }
        card.el.querySelector(".send").disabled = card.choices.size < approvalCalls(card.item).length;
      });
    }
    const section = $("call-template").content.firstElementChild.cloneNode(true);
    section.dataset.callId = text(call.tool_call_id);
    const name = text(call.name) || "(unnamed tool)";
    section.querySelector(".call-name").textContent = name;
    const digest = text(call.arguments_sha256);
    section.querySelector(".call-meta").textContent =
      `call ${text(call.tool_call_id)}${digest ? ` · sha256 ${digest.slice(0, 16)}…` : ""}`;
    const args = section.querySelector(".args");
    args.textContent = prettyArguments(call.arguments);
    args.setAttribute("aria-label", `Arguments of ${name}`);
    serial += 1;
    const input = section.querySelector(".reason");
    input.id = `reason-${serial}`;
    section.querySelector(".reason-label").setAttribute("for", input.id);
    const approve = section.querySelector(".approve");
    const deny = section.querySelector(".deny");
    approve.setAttribute("aria-label", `Approve ${name}`);
    deny.setAttribute("aria-label", `Deny ${name}`);
    const choose = (approved) => {
      // Read when sent, not when chosen: a reason typed after pressing Deny still goes with it.
      card.choices.set(call.tool_call_id, () => {
        const decision = {tool_call_id: call.tool_call_id, approve: approved};
        if (digest) decision.arguments_sha256 = digest;
        const reason = input.value.trim();
        if (!approved && reason) decision.reason = reason;
        return decision;
      });
      if (single) { decide(card); return; }
      approve.setAttribute("aria-pressed", String(approved));
      deny.setAttribute("aria-pressed", String(!approved));
      card.el.querySelector(".send").disabled = card.choices.size < approvalCalls(card.item).length;
    };
    approve.addEventListener("click", () => choose(true));
    deny.addEventListener("click", () => choose(false));
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") { event.preventDefault(); choose(false); }
    });
    return section;
  }

  function fillFacts(card) {
    const {el, item} = card;
    const calls = approvalCalls(item);
    el.querySelector(".card-title").textContent = calls.length === 1
      ? text(calls[0].name) : `${calls.length} tools: ${calls.map((call) => text(call.name)).join(", ")}`;
    el.querySelector(".f-route").textContent = text(pick(item, "route", "model")) || "—";
    el.querySelector(".f-tenant-row").hidden = typeof item.tenant !== "string";
    el.querySelector(".f-tenant").textContent = text(item.tenant);
    el.querySelector(".f-key").textContent =
      text(pick(item, "key.name", "key.id")) || "—";
    setTime(el.querySelector(".f-paused"), item.created_at);
    setTime(el.querySelector(".f-expires"), item.expires_at);
    const context = item.context && typeof item.context === "object" ? item.context : {};
    const user = text(context.user);
    const assistant = text(context.assistant);
    el.querySelector(".ctx-user").textContent = user || "(none)";
    el.querySelector(".ctx-assistant").textContent = assistant || "(nothing yet)";
    for (const call of calls) {
      const section = [...el.querySelectorAll(".call")].find((node) => node.dataset.callId === call.tool_call_id);
      if (!section) continue;
      const status = section.querySelector(".call-status");
      if (call.reason === "elicitation") {
        const until = toDate(call.elicitation_deadline);
        if (call.elicitation_expired === true || (until !== null && until.getTime() <= Date.now())) {
          status.textContent = "The question timed out: it was declined.";
          if (!card.done) section.querySelector(".accept").disabled = true;
        } else if (until) {
          status.textContent = `Answer ${relative(until)} (then it is declined).`;
        }
        continue;
      }
      const deadline = toDate(call.approval_deadline);
      const expired = call.approval_expired === true || (deadline !== null && deadline.getTime() <= Date.now());
      if (expired) {
        status.textContent = "Approval timed out: this call counts as denied.";
        // Approving it is refused (409 approval_expired); Deny stays, to let the loop go on now.
        if (!card.done) section.querySelector(".approve").disabled = true;
      } else if (deadline) {
        status.textContent = `Decide ${relative(deadline)} (approval timeout).`;
      }
    }
  }

  async function decide(card) {
    if (card.busy || card.done) return;
    const decisions = approvalCalls(card.item).map((call) => card.choices.get(call.tool_call_id))
      .filter(Boolean).map((decision) => decision());
    card.busy = true;
    const {el} = card;
    for (const button of el.querySelectorAll("button")) button.disabled = true;
    el.querySelector(".card-error").textContent = "";
    const note = el.querySelector(".card-note");
    note.textContent = "Sending the decision…";
    try {
      // An admin key names the tenant (the listing gave it); a tenant's key decides in its own.
      const tenant = typeof card.item.tenant === "string" ? `?tenant=${encodeURIComponent(card.item.tenant)}` : "";
      const result = await api(`v1/continuations/${encodeURIComponent(card.item.id)}${tenant}`,
        {method: "POST", body: {decisions, stream: false}});
      const status = pick(result.payload, "gateway.status") || "done";
      const yes = (d) => d.approve === true || d.action === "accept";
      const verdict = decisions.every((d) => d.action) ? "Answered" : decisions.every(yes) ? "Approved"
        : decisions.some(yes) ? "Decided" : "Denied";
      card.done = true;
      card.doneAt = Date.now();
      el.classList.add("done");
      note.textContent = `${verdict}; the loop resumed (${text(status)}).`;
      announce(`${verdict}: ${el.querySelector(".card-title").textContent}`);
    } catch (error) {
      const message = error instanceof ApiError && error.status === 409
        ? `Not applied: ${error.message}` : error instanceof ApiError && error.status === 404
        ? "Not applied: this continuation is gone (decided, cancelled or expired)." : `Not applied: ${error.message}`;
      el.querySelector(".card-error").textContent = message;
      note.textContent = "";
      if (error instanceof ApiError && (error.status === 409 || error.status === 404)) {
        card.done = true;
        card.doneAt = Date.now();
      } else {
        for (const button of el.querySelectorAll("button")) button.disabled = false;
        card.choices.clear();
      }
    } finally {
      card.busy = false;
    }
    state.listTag = "";
    poll();
  }

  // ---- recent decisions ---------------------------------------------------------------------

  function renderAudit(entries) {
    const body = $("decisions").querySelector("tbody");
    const rows = entries.map((entry) => {
      const row = document.createElement("tr");
      const kind = text(entry.event);
      const cells = [
        ["When", null],
        ["Decision", kind.replaceAll("_", " ") || "—"],
        ["Tool", text(entry.tool) || "—"],
        ["Who", text(pick(entry, "key.name", "key.id")) || "—"],
        ["Reason", kind === "headless_denial" && entry.reason  // what the call would have needed
          ? `headless; needed ${entry.reason === "client" ? "the client" : text(entry.reason)}` : text(entry.reason)],
      ];
      for (const [label, value] of cells) {
        const cell = document.createElement("td");
        cell.dataset.label = label;
        if (label === "When") {
          const time = document.createElement("time");
          setTime(time, entry.created_at);
          cell.append(time);
        } else {
          cell.textContent = value;
        }
        if (label === "Decision") cell.className = kind.startsWith("approv") || kind === "elicitation_accepted" ? "approved" : "denied";
        row.append(cell);
      }
      return row;
    });
    body.replaceChildren(...rows);
    $("decisions").hidden = rows.length === 0;
    $("history-empty").hidden = rows.length > 0;
  }

  // ---- wiring -------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    $("sign-in-form").addEventListener("submit", signIn);
    $("sign-out").addEventListener("click", () => signOut());
    document.addEventListener("visibilitychange", () => { if (!document.hidden && state.key) poll(); });
    const saved = sessionStorage.getItem(KEY_SLOT);
    if (saved) { state.key = saved; start(); } else { showSignedIn(false); $("key").focus(); }
  });
})();
