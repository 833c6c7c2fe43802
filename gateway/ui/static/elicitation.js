// Loopgate approvals inbox: a tool call asking the user for input (an MCP elicitation).
//
// The question, its field names, titles, descriptions and enum labels come from an MCP server:
// hostile. They reach the page only as textContent and attribute values of inert elements, never
// as HTML. A URL question is shown as text, and as a link only when it is http(s), opened with
// rel="noopener noreferrer" (the page never fetches it). Loaded before approvals.js, which calls
// window.LoopgateElicitation.buildQuestion for each pending call of reason "elicitation".
"use strict";

(() => {
  const MAX_FIELDS = 100;
  let serial = 0;

  function text(value) {
    if (value === undefined || value === null) return "";
    return typeof value === "string" ? value : JSON.stringify(value);
  }

  function el(tag, className, content) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (content !== undefined) node.textContent = content;
    return node;
  }

  /** [{value, label}] of an enum field: `enum` (+ `enumNames`), or `oneOf`/`anyOf` of `const` + `title`. */
  function options(spec) {
    if (Array.isArray(spec.enum)) {
      const names = Array.isArray(spec.enumNames) ? spec.enumNames : [];
      return spec.enum.map((value, i) => ({value: text(value), label: text(names[i] ?? value)}));
    }
    const listed = Array.isArray(spec.oneOf) ? spec.oneOf : Array.isArray(spec.anyOf) ? spec.anyOf : null;
    if (!listed) return null;
    return listed.filter((o) => o && typeof o === "object" && "const" in o)
      .map((o) => ({value: text(o.const), label: text(o.title ?? o.const)}));
  }

  /** One input per field of the flat schema; returns [{name, read}] where read() gives the value or undefined. */
  function buildFields(container, schema) {
    const properties = schema && typeof schema.properties === "object" && schema.properties ? schema.properties : {};
    const required = new Set(Array.isArray(schema && schema.required) ? schema.required : []);
    const readers = [];
    for (const [name, raw] of Object.entries(properties).slice(0, MAX_FIELDS)) {
      const spec = raw && typeof raw === "object" ? raw : {};
      serial += 1;
      const id = `elicit-field-${serial}`;
      const row = el("div", "field");
      const label = el("label", "field-label", `${text(spec.title) || name}${required.has(name) ? " *" : ""}`);
      label.setAttribute("for", id);
      row.append(label);
      let input;
      let read;
      const choices = spec.type === "array" ? options(spec.items || {}) : options(spec);
      if (spec.type === "boolean") {
        input = el("input");
        input.type = "checkbox";
        input.checked = spec.default === true;
        read = () => input.checked;
      } else if (choices) {
        input = el("select");
        if (spec.type === "array") input.multiple = true;
        else if (!required.has(name)) input.append(el("option", "", ""));
        const chosen = Array.isArray(spec.default) ? spec.default.map(text) : [text(spec.default)];
        for (const choice of choices) {
          const option = el("option", "", choice.label);
          option.value = choice.value;
          if (spec.default !== undefined && chosen.includes(choice.value)) option.selected = true;
          input.append(option);
        }
        read = () => {
          if (spec.type !== "array") return input.value === "" ? undefined : input.value;
          const values = [...input.selectedOptions].map((o) => o.value);
          return values.length === 0 && !required.has(name) ? undefined : values;
        };
      } else if (spec.type === "number" || spec.type === "integer") {
        input = el("input");
        input.type = "number";
        input.step = spec.type === "integer" ? "1" : "any";
        if (typeof spec.minimum === "number") input.min = String(spec.minimum);
        if (typeof spec.maximum === "number") input.max = String(spec.maximum);
        if (typeof spec.default === "number") input.value = String(spec.default);
        read = () => input.value.trim() === "" ? undefined : Number(input.value);
      } else {
        input = el("input");
        input.type = spec.format === "email" ? "email" : spec.format === "date" ? "date" : "text";
        if (typeof spec.maxLength === "number") input.maxLength = spec.maxLength;
        if (typeof spec.default === "string") input.value = spec.default;
        input.autocomplete = "off";
        read = () => input.value === "" && !required.has(name) ? undefined : input.value;
      }
      input.id = id;
      input.className = "field-input";
      input.dataset.field = name;
      row.append(input);
      if (spec.description) row.append(el("p", "field-help", text(spec.description)));
      container.append(row);
      readers.push({name, read});
    }
    return readers;
  }

  function safeLink(raw) {
    try {
      const url = new URL(raw);
      return url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
    } catch (_) {
      return null;
    }
  }

  /**
   * The section of one question. `choose(card, call, decision)` records the decision maker for the call
   * (and sends at once when the card has this one call only).
   */
  function buildQuestion(call, choose) {
    const question = call.elicitation && typeof call.elicitation === "object" ? call.elicitation : {};
    const section = el("section", "call elicitation");
    section.dataset.callId = text(call.tool_call_id);
    const name = text(call.name) || "(unnamed tool)";
    section.append(el("h4", "call-name", `${name} asks for your input`));
    section.append(el("p", "call-meta", `server ${text(question.server)} · call ${text(call.tool_call_id)}`));
    section.append(el("p", "call-status"));
    section.append(el("p", "question", text(question.message)));
    let readers = [];
    if (question.mode === "url") {
      const where = el("p", "question-url");
      const href = safeLink(text(question.url));
      where.append(el("span", "", "Open this page to continue: "));
      if (href) {
        const link = el("a", "url-link", text(question.url));
        link.setAttribute("href", href);
        link.setAttribute("rel", "noopener noreferrer");
        link.setAttribute("target", "_blank");
        where.append(link);
      } else {
        where.append(el("code", "url-text", text(question.url)));
      }
      section.append(where);
      section.append(el("p", "field-help", "Accept once you have finished on that page. Never enter passwords "
        + "or other secrets in a form shown here: a server asking for them through this inbox is misbehaving."));
    } else {
      const fields = el("div", "fields");
      readers = buildFields(fields, question.requested_schema);
      section.append(fields);
      section.append(el("p", "field-help", "Never enter passwords or other secrets here."));
    }
    const buttons = el("div", "buttons");
    for (const action of ["accept", "decline", "cancel"]) {
      const button = el("button", action, action[0].toUpperCase() + action.slice(1));
      button.type = "button";
      button.setAttribute("aria-label", `${button.textContent} the question of ${name}`);
      button.addEventListener("click", () => {
        choose(call, action, () => {
          const decision = {tool_call_id: call.tool_call_id, action};
          if (action === "accept" && question.mode !== "url") {
            const content = {};
            for (const reader of readers) {
              const value = reader.read();
              if (value !== undefined) content[reader.name] = value;
            }
            decision.content = content;
          }
          return decision;
        }, section);
      });
      buttons.append(button);
    }
    section.append(buttons);
    return section;
  }

  window.LoopgateElicitation = {buildQuestion};
})();
