// Loopgate console, the Keys page: list, create (the secret shown once, with a copy button), edit, revoke.
// Loaded before console.js, which hands it the shared helpers; every value is put on the page as text.
"use strict";

window.LoopgateKeysPage = ({ api, $, el, row, fill, say, setKeys }) => {
  let editing = null; // the key id being edited, or null when creating
  let shownExpiry = ""; // the edited key's expires_at as the form showed it (sent again only when changed)

  async function loadKeys() {
    const keys = await api("admin/keys");
    setKeys(new Map(keys.data.map((k) => [k.id, k])));
    fill($("keys-table").tBodies[0], keys.data.map(keyRow));
  }

  function keyStatus(k) {
    if (k.degraded) return "unreadable";
    if (k.revoked) return "revoked";
    if (k.expired) return "expired";
    return "active";
  }

  function limits(k) {
    const parts = [];
    if (k.rpm) parts.push(`${k.rpm} rpm`);
    if (k.tpm) parts.push(`${k.tpm} tpm`);
    if (k.max_concurrent) parts.push(`${k.max_concurrent} concurrent`);
    return parts.join(", ") || "–";
  }

  function keyRow(k) {
    const actions = el("div", null, "actions");
    const status = keyStatus(k);
    if (k.source === "managed" && status !== "revoked" && !k.degraded) {
      const edit = el("button", "Edit");
      edit.type = "button";
      edit.setAttribute("aria-label", `Edit ${k.name || k.id}`);
      edit.addEventListener("click", () => openKeyForm(k));
      actions.append(edit);
    }
    if (k.source === "managed" && status !== "revoked") {
      const revoke = el("button", "Revoke", "danger");
      revoke.type = "button";
      revoke.setAttribute("aria-label", `Revoke ${k.name || k.id}`);
      revoke.addEventListener("click", () => revokeKey(k));
      actions.append(revoke);
    }
    if (k.source === "config") actions.append(el("span", "config file", "muted"));
    const budget = k.budget ? `${k.budget.limit} ${k.budget.unit}/${k.budget.period}` : "–";
    const role = (k.role || "caller") + (k.headless ? ", headless" : "");
    const tr = row([k.name || "–", el("code", k.id || "–"), k.tenant || "–", role, status,
      k.expires_at ? window.LoopgateCharts.when(Date.parse(k.expires_at) / 1000) : "never",
      limits(k),
      budget, (k.models && k.models.length ? k.models.join(", ") : "all"),
      (k.tools && k.tools.length ? k.tools.join(", ") : "route's"), actions]);
    tr.dataset.id = k.id || "";
    tr.dataset.status = status;
    tr.dataset.expiresAt = k.expires_at || "";
    tr.dataset.headless = String(Boolean(k.headless));
    return tr;
  }

  function list(text) {
    return text.split(",").map((s) => s.trim()).filter(Boolean);
  }

  function openKeyForm(k) {
    editing = k ? k.id : null;
    $("secret-box").hidden = true;
    $("key-form").hidden = false;
    $("key-form-error").hidden = true;
    $("key-form-title").textContent = k ? `Edit ${k.name || k.id}` : "Create a key";
    $("kf-submit").textContent = k ? "Save" : "Create";
    $("kf-tenant").value = k ? k.tenant : "";
    $("kf-tenant").disabled = Boolean(k);
    $("kf-name").value = k && k.name ? k.name : "";
    $("kf-role").value = k && k.role ? k.role : "caller";
    $("kf-models").value = k && k.models ? k.models.join(", ") : "";
    $("kf-tools").value = k && k.tools ? k.tools.join(", ") : "";
    $("kf-rpm").value = k && k.rpm ? k.rpm : "";
    $("kf-tpm").value = k && k.tpm ? k.tpm : "";
    $("kf-conc").value = k && k.max_concurrent ? k.max_concurrent : "";
    $("kf-budget").value = k && k.budget ? k.budget.limit : "";
    $("kf-unit").value = k && k.budget ? k.budget.unit : "usd";
    $("kf-period").value = k && k.budget ? k.budget.period : "month";
    shownExpiry = k && k.expires_at ? k.expires_at : "";
    $("kf-expires").value = shownExpiry;
    $("kf-headless").checked = Boolean(k && k.headless);
    (k ? $("kf-name") : $("kf-tenant")).focus();
  }

  function keyBody() {
    const body = { name: $("kf-name").value.trim() || null, role: $("kf-role").value };
    if (!editing) body.tenant = $("kf-tenant").value.trim();
    const models = list($("kf-models").value);
    const tools = list($("kf-tools").value);
    body.models = models.length ? models : null;
    body.tools = tools.length ? tools : null;
    for (const [field, id] of [["rpm", "kf-rpm"], ["tpm", "kf-tpm"], ["max_concurrent", "kf-conc"]]) {
      const value = $(id).value;
      body[field] = value === "" ? null : Number(value);
    }
    const limit = $("kf-budget").value;
    body.budget = limit === "" ? null : { limit: Number(limit), unit: $("kf-unit").value, period: $("kf-period").value };
    // Checked by the API (its message is shown as text); an unchanged one is not sent again, so an expired
    // key's other fields can still be edited.
    const expires = $("kf-expires").value.trim();
    if (!editing || expires !== shownExpiry) body.expires_at = expires || null;
    body.headless = $("kf-headless").checked;
    if (!editing) for (const name of Object.keys(body)) if (body[name] === null) delete body[name];
    return body;
  }

  async function submitKey(event) {
    event.preventDefault();
    $("key-form-error").hidden = true;
    try {
      if (editing) {
        await api(`admin/keys/${encodeURIComponent(editing)}`, { method: "PATCH", body: keyBody() });
        say("Key saved.");
      } else {
        const created = await api("admin/keys", { method: "POST", body: keyBody() });
        $("secret-value").textContent = created.key;
        $("secret-copied").textContent = "";
        $("secret-box").hidden = false;
        say(`Key ${created.id} created.`);
      }
      $("key-form").hidden = true;
      await loadKeys();
      if (!$("secret-box").hidden) $("secret-copy").focus();
    } catch (err) {
      $("key-form-error").textContent = err.message;
      $("key-form-error").hidden = false;
    }
  }

  async function revokeKey(k) {
    if (!window.confirm(`Revoke ${k.name || k.id}? Requests with it stop working at once, on every replica.`)) return;
    try {
      await api(`admin/keys/${encodeURIComponent(k.id)}`, { method: "DELETE" });
      say(`Key ${k.id} revoked.`);
      await loadKeys();
    } catch (err) {
      say(err.message, true);
    }
  }

  async function copySecret() {
    const secret = $("secret-value").textContent;
    try {
      await navigator.clipboard.writeText(secret);
      $("secret-copied").textContent = "Copied to the clipboard.";
    } catch (err) {
      const range = document.createRange();
      range.selectNodeContents($("secret-value"));
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      $("secret-copied").textContent = "Selected: press Ctrl+C (⌘C) to copy.";
    }
  }

  function wire() {
    $("key-new").addEventListener("click", () => openKeyForm(null));
    $("key-form").addEventListener("submit", submitKey);
    $("kf-cancel").addEventListener("click", () => { $("key-form").hidden = true; $("key-new").focus(); });
    $("secret-copy").addEventListener("click", copySecret);
    $("secret-done").addEventListener("click", () => {
      $("secret-value").textContent = "";
      $("secret-box").hidden = true;
      $("key-new").focus();
    });
  }

  return { load: loadKeys, wire };
};
