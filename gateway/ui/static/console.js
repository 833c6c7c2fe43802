// Loopgate console: overview, usage, keys and audit, through the admin API with an admin key.
//
// Everything the gateway or a caller wrote (route and key names, tenants, error reasons, audit text)
// is put on the page with textContent or as a text node, never parsed as HTML. The key lives in
// sessionStorage (this tab only) and goes out as a Bearer token to this origin only; no cookie.
"use strict";

(() => {
  const KEY_SLOT = "loopgate.ui.key"; // the inbox's too (approvals.js): signed in here is signed in there
  const API = new URL("../", document.baseURI); // the gateway's root, also behind a path prefix
  const PAGES = ["overview", "usage", "keys", "audit"];
  const $ = (id) => document.getElementById(id);
  let key = null;
  let overviewTimer = 0;
  let usageRows = [];
  let keysById = new Map();
  let auditCursor = null;
  let auditRows = [];

  // ---- API -------------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(path, { method = "GET", body } = {}) {
    const headers = { authorization: `Bearer ${key}` };
    if (body !== undefined) headers["content-type"] = "application/json";
    let response;
    try {
      response = await fetch(new URL(path, API), {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer",
      });
    } catch (err) {
      throw new ApiError(0, "The gateway cannot be reached.");
    }
    let data = null;
    try { data = await response.json(); } catch (err) { data = null; }
    if (!response.ok) {
      const message = data && data.error && typeof data.error.message === "string"
        ? data.error.message : `The gateway answered ${response.status}.`;
      throw new ApiError(response.status, message);
    }
    return data;
  }

  function query(params) {
    const out = new URLSearchParams();
    for (const [name, value] of Object.entries(params)) if (value) out.set(name, value);
    const text = out.toString();
    return text ? `?${text}` : "";
  }

  function say(text, bad = false) {
    const status = $("status");
    status.textContent = text;
    status.classList.toggle("bad", bad);
  }

  // ---- small DOM helpers (text only) -------------------------------------------------------------
  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  // A cell's text with each word (a run without spaces) in a span kept on one line: a narrow table wraps
  // between words, never inside an id, a number or a date (a browser breaks after any hyphen otherwise).
  function words(text) {
    return String(text).split(/(\s+)/).filter(Boolean)
      .map((part) => (/^\s/.test(part) ? document.createTextNode(part) : el("span", part, "word")));
  }

  function row(cells) {
    const tr = document.createElement("tr");
    for (const cell of cells) {
      const td = document.createElement("td");
      if (cell instanceof Node) {
        td.append(cell);
      } else if (cell && typeof cell === "object") {
        if (cell.className) td.className = cell.className;
        if (cell.text !== undefined && cell.text !== null) td.append(...words(cell.text));
      } else if (cell !== undefined && cell !== null) {
        td.append(...words(cell));
      }
      tr.append(td);
    }
    return tr;
  }

  function fill(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  // The console's one date format (console-charts.js): "2026-12-07 13:10 UTC".
  const when = (epoch) => window.LoopgateCharts.when(epoch);

  function ago(epoch, now) {
    if (epoch === null || epoch === undefined) return "–";
    const s = Math.max(0, Math.round(now - epoch));
    const text = s < 120 ? `${s} s ago` : s < 7200 ? `${Math.round(s / 60)} min ago` : `${Math.round(s / 3600)} h ago`;
    return `${text} (${when(epoch)})`;
  }

  function number(value, digits = 0) {
    return Number(value).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  // ---- sign in -------------------------------------------------------------------------------
  async function signIn(candidate) {
    key = candidate;
    let adminOff = false; // 404 admin_disabled: this gateway has no admin keys at all
    try {
      await api("admin/tenants");
      sessionStorage.setItem(KEY_SLOT, candidate);
      enter(true);
      return;
    } catch (err) {
      if (err.status !== 401 && err.status !== 404 && err.status !== 403) { key = null; throw err; }
      adminOff = err.status === 404;
    }
    try {
      await api("v1/continuations?limit=1");
    } catch (err) {
      key = null;
      if (err.status === 401) throw new Error("This key is not valid here.");
      throw err;
    }
    sessionStorage.setItem(KEY_SLOT, candidate);
    if (adminOff) {
      $("inbox-only-why").textContent = "This gateway has no admin keys, so the console is disabled: set "
        + "auth.admin_keys in the config to enable it. This key can decide approvals for its tenant.";
    }
    enter(false);
  }

  function enter(admin) {
    $("sign-in").hidden = true;
    $("who").hidden = false;
    $("who-text").textContent = admin ? "Signed in (admin)" : "Signed in (approvals only)";
    $("nav").hidden = false;
    for (const link of document.querySelectorAll("#nav a[data-admin]")) link.hidden = !admin;
    document.body.dataset.role = admin ? "admin" : "inbox";
    if (!admin) {
      $("inbox-only").hidden = false;
      for (const page of PAGES) $(`page-${page}`).hidden = true;
      $("open-inbox").focus();
      return;
    }
    if (!location.hash) history.replaceState(null, "", "#overview");
    show();
  }

  function signOut() {
    sessionStorage.removeItem(KEY_SLOT);
    key = null;
    clearTimeout(overviewTimer);
    location.hash = "";
    location.reload();
  }

  // ---- pages ---------------------------------------------------------------------------------
  function show() {
    if (document.body.dataset.role !== "admin") return;
    const wanted = location.hash.replace("#", "");
    const page = PAGES.includes(wanted) ? wanted : "overview";
    for (const name of PAGES) $(`page-${name}`).hidden = name !== page;
    for (const link of document.querySelectorAll("#nav a[data-page]")) {
      if (link.dataset.page === page) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    clearTimeout(overviewTimer);
    say("");
    const load = { overview: loadOverview, usage: openUsage, keys: loadKeys, audit: openAudit }[page];
    load().catch((err) => say(err.message, true));
  }

  // ---- overview ------------------------------------------------------------------------------
  // The range: a fixed span, or "Fit the data": the smallest span that holds everything since the
  // first request in the window (60 min, or the retention when shorter, when nothing was served).
  const RANGE_SLOT = "loopgate.console.range";
  const SPANS = [5, 15, 60, 360, 1440, 10080];
  let fittedMinutes = null;

  function spanLabel(minutes) {
    return minutes % 1440 === 0 ? `${minutes / 1440} ${minutes === 1440 ? "day" : "days"}`
      : minutes % 60 === 0 ? `${minutes / 60} h` : `${minutes} min`;
  }

  function fit(data) {
    const most = Math.max(1, Math.floor(data.retention_s / 60));
    if (data.first_traffic_at === null || data.first_traffic_at === undefined) return Math.min(60, most);
    const needed = (data.now - data.first_traffic_at + 2 * data.resolution_s) / 60;
    return SPANS.find((m) => m >= needed && m <= most) ?? most;
  }

  function rangeOptions(data) {
    const most = Math.floor(data.retention_s / 60);
    for (const option of $("overview-range").options) {
      if (option.value !== "auto") option.hidden = option.disabled = Number(option.value) > most;
    }
  }

  let overviewRun = 0; // the latest load: only it schedules the next refresh (one refresh chain)

  async function readOverview(minutes) {
    return api(minutes ? `admin/console/overview?minutes=${minutes}` : "admin/console/overview");
  }

  async function loadOverview() {
    const run = ++overviewRun;
    let chosen = $("overview-range").value;
    let data;
    try {
      data = await readOverview(chosen === "auto" ? fittedMinutes : Number(chosen));
    } catch (err) {
      if (err.status !== 400 || chosen === "auto") throw err;
      // A span past this gateway's retention (a choice kept from another gateway): fit the data instead.
      $("overview-range").value = chosen = "auto";
      data = await readOverview(null);
    }
    rangeOptions(data);
    if (chosen === "auto") {
      const fitted = fit(data);
      // Not the span read: read the fitted one (wider: the traffic may start before this window).
      if (fitted !== data.minutes) data = await readOverview(fitted);
      fittedMinutes = fitted;
      $("overview-range").options[0].textContent = `Fit the data (${spanLabel(fitted)})`;
    }
    if (run !== overviewRun) return; // a newer load (the range changed) has the page
    renderOverview(data);
    if (!$("page-overview").hidden) {
      overviewTimer = setTimeout(() => loadOverview().catch((err) => say(err.message, true)),
        Math.max(2, Math.min(data.resolution_s, 10)) * 1000);
    }
  }

  function last(values) {
    for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return values[i];
    return null;
  }

  function addedMs(value) {
    return value === null ? "–" : number(value, 3);
  }

  // Half-open is either a probe under way or the cooldown over with no request since (the next one probes).
  function circuitState(c) {
    if (c.state !== "half_open") return c.state;
    return c.probing ? "half-open (probing)" : "half-open (cooldown over, next request probes)";
  }

  function renderOverview(data) {
    const s = data.series;
    const routes = Object.entries(s.routes);
    $("overview-meta").textContent =
      `Last ${spanLabel(data.minutes)} at ${data.resolution_s} s resolution, times in UTC · `
      + `${data.replicas.length} replica(s) reporting`;
    // The latest complete interval is the last point; sums over routes.
    const at = s.t.length - 1;
    const total = (field) => routes.reduce((sum, [, r]) => sum + (at >= 0 ? r[field][at] : 0), 0);
    const rps = total("requests_per_s");
    const errors = routes.reduce((sum, [, r]) => sum + (at >= 0 ? r.error_rate[at] * r.requests_per_s[at] : 0), 0);
    $("tile-rps").textContent = number(rps, 2);
    $("tile-errors").textContent = rps ? `${number((errors / rps) * 100, 1)} %` : "0 %";
    const p99 = last(s.latency_ms.p99);
    $("tile-p99").textContent = p99 === null ? "–" : `${number(p99, 0)} ms`;
    const added = routes.map(([, r]) => last(r.overhead_ms.p99)).filter((v) => v !== null);
    $("tile-added").textContent = added.length ? `${number(Math.max(...added), 2)} ms` : "–";
    $("tile-tokens").textContent = number(total("tokens_per_s"), 1);
    $("tile-paused").textContent = data.paused.capped ? `${data.paused.total}+` : String(data.paused.total);
    // Open: skipped now (what loopgate_circuit_open counts); half-open ones are said apart.
    const halfOpen = data.circuits.filter((c) => c.state === "half_open").length;
    $("tile-open").textContent = String(data.circuits.filter((c) => c.state === "open").length)
      + (halfOpen ? ` (+${halfOpen} half-open)` : "");

    const x = s.t;
    const lines = (field) => routes.length ? routes.map(([name, r]) => [name, r[field]]) : [["(no traffic)", x.map(() => 0)]];
    window.LoopgateCharts.draw("chart-rps", x, lines("requests_per_s"), "");
    window.LoopgateCharts.draw("chart-errors", x, lines("error_rate"), "%");
    const addedLines = routes.flatMap(([name, r]) => [[`${name} p50`, r.overhead_ms.p50], [`${name} p99`, r.overhead_ms.p99]]);
    window.LoopgateCharts.draw("chart-added", x, addedLines.length ? addedLines : [["(no traffic)", x.map(() => null)]], "ms");
    window.LoopgateCharts.draw("chart-latency", x, [["p50", s.latency_ms.p50], ["p99", s.latency_ms.p99]], "ms");
    window.LoopgateCharts.draw("chart-tokens", x, lines("tokens_per_s"), "");

    const step = data.resolution_s;
    fill($("routes").tBodies[0], routes.map(([name, r]) => {
      const requests = Math.round(r.requests_per_s.reduce((a, v) => a + v, 0) * step);
      const errors = Math.round(r.requests_per_s.reduce((a, v, i) => a + v * r.error_rate[i], 0) * step);
      const tokens = Math.round(r.tokens_per_s.reduce((a, v) => a + v, 0) * step);
      const tr = row([name, { text: number(requests), className: "num" }, { text: number(errors), className: "num" },
        { text: number(tokens), className: "num" }, { text: number(at >= 0 ? r.requests_per_s[at] : 0, 2), className: "num" },
        { text: addedMs(r.overhead_window_ms.p50), className: "num" },
        { text: addedMs(r.overhead_window_ms.p99), className: "num" }]);
      tr.dataset.route = name;
      tr.dataset.addedP50 = String(r.overhead_window_ms.p50);
      tr.dataset.addedP99 = String(r.overhead_window_ms.p99);
      tr.dataset.requests = String(requests);
      tr.dataset.errors = String(errors);
      return tr;
    }));
    $("routes-empty").hidden = routes.length > 0;
    fill($("circuits").tBodies[0], data.circuits.map((c) => {
      const tr = row([c.target, { text: circuitState(c), className: `state-${c.state}` },
        c.state === "closed" ? "–" : ago(c.since, data.now), c.open_until ? when(c.open_until) : "–",
        c.last_error ? `${c.last_error} (${ago(c.last_error_at, data.now)})` : "–", String(c.replicas_open)]);
      tr.dataset.target = c.target;
      tr.dataset.state = c.state;
      return tr;
    }));
    fill($("failovers").tBodies[0], data.failovers.map((f) => {
      const tr = row([f.from_target, f.reason, String(f.count), ago(f.last_at, data.now)]);
      tr.dataset.target = f.from_target;
      return tr;
    }));
    $("failovers-empty").hidden = data.failovers.length > 0;
    const paused = Object.entries(data.paused.by_tenant);
    $("paused").replaceChildren(...(paused.length
      ? paused.map(([tenant, count]) => el("li", `${tenant}: ${count} waiting`))
      : [el("li", "Nothing is waiting.", "empty")]));
    $("replicas").textContent = data.replicas.length ? `Replicas: ${data.replicas.join(", ")}` : "";
  }

  // ---- usage ---------------------------------------------------------------------------------
  async function tenants() {
    return (await api("admin/tenants")).data;
  }

  function setOptions(select, values, keep) {
    const current = select.value;
    const fixed = [...select.options].slice(0, keep);
    select.replaceChildren(...fixed, ...values.map(([value, label]) => {
      const option = el("option", label);
      option.value = value;
      return option;
    }));
    if ([...select.options].some((o) => o.value === current)) select.value = current;
  }

  async function openUsage() {
    const [names, keys] = await Promise.all([tenants(), api("admin/keys")]);
    setOptions($("usage-tenant"), names.map((t) => [t, t]), 1);
    keysById = new Map(keys.data.map((k) => [k.id, k]));
    usageKeyOptions();
    await loadUsage();
  }

  function usageKeyOptions() {
    const tenant = $("usage-tenant").value;
    const keys = [...keysById.values()].filter((k) => k.id && (!tenant || k.tenant === tenant));
    setOptions($("usage-key"), keys.map((k) => [k.id, `${k.name || k.id} (${k.tenant})`]), 1);
  }

  async function loadUsage() {
    const scope = { tenant: $("usage-tenant").value, key: $("usage-key").value,
                    from: $("usage-from").value, to: $("usage-to").value };
    const params = { ...scope, route: $("usage-route").value, model: $("usage-model").value,
                     group_by: $("usage-group").value };
    // The routes and models there are in the range (for the filters): the same rows split by both.
    const [usage, split, budgets] = await Promise.all([
      api(`admin/usage${query(params)}`), api(`admin/usage${query({ ...scope, group_by: "route,model" })}`),
      api(`admin/budgets${query({ tenant: scope.tenant })}`)]);
    usageRows = usage.data;
    const distinct = (field) => [...new Set(split.data.map((r) => r[field]))].sort().map((v) => [v, v]);
    setOptions($("usage-route"), distinct("route"), 1);
    setOptions($("usage-model"), distinct("model"), 1);
    renderUsage();
    renderBudgets(budgets.data);
  }

  function keyLabel(id) {
    if (!id) return "(all keys)";
    const known = keysById.get(id);
    return known && known.name ? `${known.name} (${id})` : id;
  }

  const SUMS = ["requests", "errors", "prompt_tokens", "completion_tokens", "total_tokens", "cost_usd", "tool_calls"];

  function renderUsage() {
    const body = $("usage-table").tBodies[0];
    fill(body, usageRows.map((r) => {
      const tr = row([r.date, r.tenant, keyLabel(r.key_id), r.route === null ? "(all)" : r.route,
        r.model === null ? "(all)" : r.model, ...SUMS.map((f) => ({ text: f === "cost_usd" ? number(r[f], 6) : number(r[f]), className: "num" }))]);
      tr.dataset.date = r.date;
      tr.dataset.tenant = r.tenant;
      tr.dataset.route = r.route === null ? "" : r.route;
      tr.dataset.model = r.model === null ? "" : r.model;
      for (const f of SUMS) tr.dataset[f] = String(r[f]);
      return tr;
    }));
    for (const cell of $("usage-table").tFoot.querySelectorAll("[data-sum]")) {
      const field = cell.dataset.sum;
      const sum = usageRows.reduce((acc, r) => acc + r[field], 0);
      cell.textContent = field === "cost_usd" ? number(sum, 6) : number(sum);
      cell.dataset.value = String(field === "cost_usd" ? Math.round(sum * 1e6) / 1e6 : sum);
    }
    // Chart: tokens per day over the whole range asked for (the API's default: 30 days to today), one line
    // per tenant, or per route / model / both when the rows are split by them.
    const days = dayRange($("usage-from").value, $("usage-to").value);
    const group = $("usage-group").value;
    const series = (r) => group === "route" ? r.route : group === "model" ? r.model
      : group ? `${r.route} · ${r.model}` : r.tenant;
    $("usage-chart-title").textContent = `Tokens per day, per ${group ? group.replace(",", " and ") : "tenant"}`;
    const byTenant = new Map();
    for (const r of usageRows) {
      const name = series(r);
      if (!byTenant.has(name)) byTenant.set(name, new Map());
      const perDay = byTenant.get(name);
      perDay.set(r.date, (perDay.get(r.date) || 0) + r.total_tokens);
    }
    const x = days.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
    const lines = byTenant.size
      ? [...byTenant.entries()].map(([tenant, perDay]) => [tenant, days.map((d) => perDay.get(d) || 0)])
      : [["(no usage)", days.map(() => 0)]];
    window.LoopgateCharts.draw("chart-usage", x, lines, "", true);
  }

  function dayRange(from, to) {
    const DAY = 86400000;
    const last = to ? Date.parse(`${to}T00:00:00Z`) : Date.parse(new Date().toISOString().slice(0, 10) + "T00:00:00Z");
    const first = from ? Date.parse(`${from}T00:00:00Z`) : last - 29 * DAY;
    const days = [];
    for (let t = first; t <= last && days.length < 366; t += DAY) days.push(new Date(t).toISOString().slice(0, 10));
    return days;
  }

  function renderBudgets(budgets) {
    fill($("budgets").tBodies[0], budgets.map((b) => {
      const unit = b.unit === "usd" ? " USD" : " tokens";
      const digits = b.unit === "usd" ? 2 : 0;
      const tr = row([b.scope, b.tenant, b.key_id ? keyLabel(b.key_id) : "–", b.period,
        { text: number(b.limit, digits) + unit, className: "num" }, { text: number(b.spent, b.unit === "usd" ? 6 : 0), className: "num" },
        { text: number(b.remaining, b.unit === "usd" ? 6 : 0), className: "num" }, b.resets_at || "never"]);
      tr.dataset.keyId = b.key_id || "";
      tr.dataset.remaining = String(b.remaining);
      return tr;
    }));
    $("budgets-empty").hidden = budgets.length > 0;
  }

  function csvCell(value) {
    let text = value === null || value === undefined ? "" : String(value);
    if (/^[=+\-@\t\r]/.test(text)) text = `'${text}`; // a spreadsheet must not run a formula from a name
    return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
  }

  function exportCsv() {
    const fields = ["date", "tenant", "key_id", "route", "model", ...SUMS, "cached_tokens", "reasoning_tokens"];
    const lines = [fields.join(","), ...usageRows.map((r) => fields.map((f) => csvCell(r[f])).join(","))];
    const blob = new Blob([lines.join("\r\n") + "\r\n"], { type: "text/csv" });
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = "loopgate-usage.csv";
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10000);
  }

  // ---- keys (console-keys.js) ---------------------------------------------------------------
  const keysPage = window.LoopgateKeysPage({ api, $, el, row, fill, say, setKeys: (map) => { keysById = map; } });
  const loadKeys = keysPage.load;

  // ---- audit ---------------------------------------------------------------------------------
  async function openAudit() {
    const names = await tenants();
    setOptions($("audit-tenant"), names.map((t) => [t, t]), 0);
    await loadAudit(false);
  }

  function isoDay(value, end) {
    return value ? `${value}T${end ? "23:59:59.999" : "00:00:00"}+00:00` : "";
  }

  async function loadAudit(more) {
    const tenant = $("audit-tenant").value;
    if (!tenant) {
      auditRows = [];
      renderAudit(false);
      return;
    }
    const params = { tenant, limit: "50", from: isoDay($("audit-from").value, false),
                     to: isoDay($("audit-to").value, true), cursor: more ? auditCursor : "" };
    const page = await api(`admin/audit${query(params)}`);
    auditRows = more ? [...auditRows, ...page.data] : page.data;
    auditCursor = page.next_cursor;
    renderAudit(page.has_more);
  }

  function renderAudit(hasMore) {
    const events = [...new Set(auditRows.map((e) => e.event).filter(Boolean))].sort();
    setOptions($("audit-event"), events.map((e) => [e, e]), 1);
    const only = $("audit-event").value;
    const shown = auditRows.filter((e) => !only || e.event === only);
    fill($("audit-table").tBodies[0], shown.map((e) => {
      const who = e.key && (e.key.name || e.key.id) ? `${e.key.name || ""} ${e.key.id ? `(${e.key.id})` : ""}`.trim() : "–";
      const by = e.admin ? (typeof e.admin === "string" ? e.admin : JSON.stringify(e.admin)) : "–";
      const detail = e.changes && e.changes.length ? `changed: ${e.changes.join(", ")}` : (e.reason || "–");
      const tr = row([when(e.created_at), e.event || "–", who, by, e.tool || "–", detail]);
      tr.dataset.event = e.event || "";
      return tr;
    }));
    $("audit-empty").hidden = shown.length > 0;
    $("audit-more").hidden = !hasMore;
  }

  // ---- wiring --------------------------------------------------------------------------------
  document.addEventListener("DOMContentLoaded", () => {
    $("sign-in-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const candidate = $("key").value.trim();
      $("sign-in-error").hidden = true;
      if (!candidate) {
        $("sign-in-error").textContent = "Enter a key.";
        $("sign-in-error").hidden = false;
        return;
      }
      try {
        await signIn(candidate);
        $("key").value = "";
      } catch (err) {
        $("sign-in-error").textContent = err.message;
        $("sign-in-error").hidden = false;
      }
    });
    $("sign-out").addEventListener("click", signOut);
    window.addEventListener("hashchange", show);
    $("usage-form").addEventListener("submit", (event) => {
      event.preventDefault();
      loadUsage().catch((err) => say(err.message, true));
    });
    $("usage-tenant").addEventListener("change", usageKeyOptions);
    const range = sessionStorage.getItem(RANGE_SLOT);
    if (range && [...$("overview-range").options].some((o) => o.value === range)) $("overview-range").value = range;
    $("overview-range").addEventListener("change", () => {
      sessionStorage.setItem(RANGE_SLOT, $("overview-range").value);
      fittedMinutes = null;
      clearTimeout(overviewTimer);
      loadOverview().catch((err) => say(err.message, true));
    });
    $("usage-csv").addEventListener("click", exportCsv);
    keysPage.wire();
    $("audit-form").addEventListener("submit", (event) => {
      event.preventDefault();
      loadAudit(false).catch((err) => say(err.message, true));
    });
    $("audit-event").addEventListener("change", () => renderAudit(!$("audit-more").hidden));
    $("audit-more").addEventListener("click", () => loadAudit(true).catch((err) => say(err.message, true)));

    if (!$("auth-off").hidden) return; // auth is off (the gateway says so in the page): no key opens the console
    const saved = sessionStorage.getItem(KEY_SLOT);
    if (saved) {
      signIn(saved).catch(() => { sessionStorage.removeItem(KEY_SLOT); key = null; });
    } else {
      $("key").focus();
    }
  });
})();
