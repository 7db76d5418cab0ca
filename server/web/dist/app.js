// The management page: sign in with a token, the apps the user has a role in, each
// app's policies with live stats and its audit log; owners create, edit and delete
// policies, previewing each change with the wasm core before saving it. Routes are in
// the fragment (#/apps/web), so the server serves one page.

import init, { Limiter } from "./wasm/index.js";
import { ApiError, call, segment, token } from "./api.js";
import { barChart, legend } from "./chart.js";
import { ALGORITHMS, describe, human, inUnitOf, parseDuration, periodOf, shortDuration, sustained, unshownSettings } from "./policy.js";
import { simulate } from "./preview.js";

// The module loads once; if it cannot, the preview says so and the rest of the page works.
let wasmError = null;
const wasm = init().catch((error) => {
  wasmError = error;
});
const view = document.getElementById("view");
const who = document.getElementById("who");

// ---- HTML with escaped values -------------------------------------------------------

class Raw {
  constructor(text) {
    this.text = text;
  }
  toString() {
    return this.text;
  }
}

function escape(value) {
  if (value instanceof Raw) return value.text;
  if (Array.isArray(value)) return value.map(escape).join("");
  if (value === null || value === undefined || value === false) return "";
  return String(value).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** A template whose values are escaped, unless they are `html` themselves. */
function html(strings, ...values) {
  return new Raw(strings.reduce((out, text, i) => out + text + (i < values.length ? escape(values[i]) : ""), ""));
}

function show(content, title) {
  view.innerHTML = String(content);
  document.title = title ? `${title} · sluicegate` : "sluicegate";
  // Move focus to the new view's heading, so keyboard and screen reader users follow.
  view.querySelector("h1")?.focus();
}

const when = (at) => (at ? new Date(at).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" }) : "");

// ---- Session -------------------------------------------------------------------------

/** The signed-in user (`GET /v1/me`) and their apps (`GET /v1/apps`), loaded once per sign-in. */
let session = null;

async function loadSession() {
  if (session) return session;
  const [me, { apps }] = await Promise.all([call("GET", "v1/me"), call("GET", "v1/apps")]);
  session = { me, apps };
  who.innerHTML = String(html`Signed in as <strong>${me.name}</strong>${me.admin ? " (admin)" : ""}
    <button type="button" id="sign-out">Sign out</button>`);
  document.getElementById("sign-out").addEventListener("click", signOut);
  return session;
}

function signOut() {
  token.clear();
  session = null;
  who.textContent = "";
  location.hash = "#/";
  route();
}

/** The caller's role in `app`: "owner", "viewer", "admin", or undefined. */
const roleIn = (app) => session.apps.find((a) => a.name === app)?.role;
const canEdit = (app) => ["owner", "admin"].includes(roleIn(app));

function signIn(message) {
  show(
    html`<h1 tabindex="-1">Sign in</h1>
    <form id="sign-in" class="panel narrow">
      <label for="token">Access token</label>
      <input id="token" name="token" type="password" autocomplete="off" required
        aria-describedby="token-hint${message ? " token-error" : ""}">
      <p id="token-hint" class="hint">The user token (sgu_…) an admin gave you. It is kept in this tab only.</p>
      ${message ? html`<p id="token-error" class="error" role="alert">${message}</p>` : ""}
      <button type="submit">Sign in</button>
    </form>`,
    "Sign in",
  );
  document.getElementById("sign-in").addEventListener("submit", (event) => {
    event.preventDefault();
    token.set(document.getElementById("token").value.trim());
    session = null;
    route();
  });
}

// ---- Views ---------------------------------------------------------------------------

function appsView() {
  const { apps } = session;
  show(
    html`<h1 tabindex="-1">Your apps</h1>
    ${apps.length === 0
      ? html`<p>You have no role in any app yet: ask an admin to give you one.</p>`
      : html`<ul class="cards">${apps.map(
          (app) => html`<li><a href="#/apps/${segment(app.name)}">${app.name}</a> <span class="badge">${app.role}</span></li>`,
        )}</ul>`}`,
    "Apps",
  );
}

/** The tabs of an app's pages. */
function appNav(app, current) {
  const tab = (href, label, name) =>
    html`<a href="${href}"${name === current ? html` aria-current="page"` : ""}>${label}</a>`;
  return html`<nav class="tabs" aria-label="${app}">
    ${tab(`#/apps/${segment(app)}`, "Policies", "policies")}
    ${tab(`#/apps/${segment(app)}/audit`, "Audit log", "audit")}
  </nav>`;
}

/** Refreshes the live stats while the app's page is open; the last ones, to redraw on resize. */
let statsTimer = null;
let lastStats = null;

async function appView(app) {
  const { policies } = await call("GET", `v1/policies?app=${segment(app)}`);
  const owner = canEdit(app);
  show(
    html`<p class="crumbs"><a href="#/">Apps</a> › ${app}</p>
    <h1 tabindex="-1">${app} <span class="badge">${roleIn(app)}</span></h1>
    ${appNav(app, "policies")}
    <section aria-labelledby="policies-title">
      <div class="row">
        <h2 id="policies-title">Policies</h2>
        ${owner ? html`<a class="button" id="new-policy" href="#/apps/${segment(app)}/new">New policy</a>` : ""}
      </div>
      ${policies.length === 0
        ? html`<p>No policy lists ${app} yet.</p>`
        : html`<div class="scroll"><table id="policies">
          <thead><tr><th scope="col">Name</th><th scope="col">Limit</th><th scope="col">Apps</th><th scope="col">Last change</th></tr></thead>
          <tbody>${policies.map(
            (p) => html`<tr>
              <th scope="row"><a href="#/apps/${segment(app)}/policies/${segment(p.name)}">${p.name}</a></th>
              <td data-label="Limit"><span class="algorithm">${p.algorithm}</span>: ${describe(p)}${p.description ? html`<br><span class="hint">${p.description}</span>` : ""}</td>
              <td data-label="Apps">${(p.apps ?? []).join(", ")}</td>
              <td data-label="Last change">${p.updated_by} <span class="hint">${when(p.updated_at)}, version ${p.version}</span></td>
            </tr>`,
          )}</tbody></table></div>`}
    </section>
    <section aria-labelledby="stats-title">
      <h2 id="stats-title">Live: decisions over the last 10 minutes</h2>
      <div id="stats"><p class="hint">Loading…</p></div>
    </section>`,
    app,
  );
  const shown = location.hash;
  lastStats = null;
  const refresh = async () => {
    try {
      const stats = await call("GET", `v1/stats?app=${segment(app)}`);
      // The user may have moved on while the stats were on their way.
      const target = document.getElementById("stats");
      if (!target || location.hash !== shown) return;
      lastStats = stats;
      target.innerHTML = String(statsCharts(stats));
      statsTimer = setTimeout(refresh, Math.max(stats.step_s ?? 5, 2) * 1000);
    } catch (error) {
      const target = document.getElementById("stats");
      if (target) target.innerHTML = String(html`<p class="error">Stats unavailable: ${error.message}</p>`);
    }
  };
  refresh();
}

/** One small chart per policy from `GET /v1/stats`: admitted and denied per step. */
function statsCharts(stats) {
  const step = (stats.step_s ?? 5) * 1_000_000;
  const entries = Object.entries(stats.policies ?? {});
  if (entries.length === 0) return html`<p class="hint">No decisions yet.</p>`;
  // As wide as a column of #stats (one or two, by the style sheet), less the figure's padding.
  const box = document.getElementById("stats");
  const room = box?.clientWidth || 600;
  const columns = box ? getComputedStyle(box).gridTemplateColumns.split(" ").length : 1;
  const width = Math.max(200, Math.floor((room - 16 * (columns - 1)) / columns) - 26);
  return entries.map(([name, series]) => {
    const bins = series.t.map((_, i) => [series.allowed[i] ?? 0, series.denied[i] ?? 0]);
    const start = (series.t[0] ?? 0) * 1_000_000;
    // The newest step is still filling: the rate is that of the step before.
    const last = bins.at(-2) ?? [0, 0];
    const perSecond = (n) => (n / (stats.step_s ?? 5)).toFixed(1).replace(/\.0$/, "");
    const { svg } = barChart({
      bins,
      bin: step,
      duration: Math.max(bins.length, 1) * step,
      width,
      height: 170,
      label: (t) => new Date((start + t) / 1000).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", hour12: false }),
      yLabel: `per ${stats.step_s ?? 5} s`,
      limit: null,
      title: `${name}: admitted and denied requests per ${stats.step_s ?? 5} s`,
    });
    return html`<figure class="stats" data-policy="${name}">
      <figcaption><strong>${name}</strong>: ${perSecond(last[0] + last[1])} decisions/s, ${perSecond(last[1])} denied/s over the last full ${stats.step_s ?? 5} s</figcaption>
      ${new Raw(svg)}${new Raw(legend(null, false))}
      ${series.shares ? sharesTable(series.shares) : ""}
    </figure>`;
  });
}

/** A policy's live Envoy quota shares (RLQS): its subscribed buckets and their rates now. */
function sharesTable(shares) {
  const rate = (n) => Number(n).toFixed(1).replace(/\.0$/, "");
  return html`<table class="shares">
    <caption>Envoy quota shares now</caption>
    <thead><tr><th scope="col">Buckets</th><th scope="col">Demand/s</th><th scope="col">Assigned/s</th><th scope="col">Limit/s</th></tr></thead>
    <tbody><tr>
      <td data-label="Buckets">${shares.subscribers}</td>
      <td data-label="Demand/s">${rate(shares.demand_per_s)}</td>
      <td data-label="Assigned/s">${rate(shares.assigned_per_s)}</td>
      <td data-label="Limit/s">${rate(shares.limit_per_s)}</td>
    </tr></tbody>
  </table>`;
}

/** The width a chart gets in `container`: its box, within reason. */
const chartWidth = (container) => Math.max(200, Math.min(container?.clientWidth || 600, 1100));

async function auditView(app) {
  const { entries } = await call("GET", `v1/audit?app=${segment(app)}`);
  const words = (policy) => (policy ? html`<span class="algorithm">${policy.algorithm}</span>: ${describe(policy)}` : html`<span class="hint">none</span>`);
  show(
    html`<p class="crumbs"><a href="#/">Apps</a> › <a href="#/apps/${segment(app)}">${app}</a> › audit log</p>
    <h1 tabindex="-1">${app}: audit log</h1>
    ${appNav(app, "audit")}
    ${entries.length === 0
      ? html`<p>No changes yet.</p>`
      : html`<div class="scroll"><table id="audit">
        <thead><tr><th scope="col">When</th><th scope="col">Who</th><th scope="col">What</th><th scope="col">Before</th><th scope="col">After</th></tr></thead>
        <tbody>${entries.map(
          (e) => html`<tr>
            <td data-label="When">${when(e.at)}</td><td data-label="Who">${e.actor}</td>
            <td data-label="What">${e.action} <strong>${e.policy}</strong></td>
            <td data-label="Before">${words(e.before)}</td><td data-label="After">${words(e.after)}</td>
          </tr>`,
        )}</tbody></table></div>`}`,
    `${app} audit log`,
  );
}

// ---- A policy: its page, the editor and the preview ------------------------------------

/** The parameters a policy form edits, by field name. */
const PARAMETERS = {
  limit: { label: "Limit", hint: "requests admitted per period (or per calendar day, week or month)", type: "number" },
  capacity: { label: "Capacity", hint: "the burst: most requests at once (pacing: most waiting)", type: "number" },
  rate: { label: "Rate", hint: "requests refilled or leaked per period", type: "number" },
  period: { label: "Period", hint: "like 250ms, 1s, 1m, 1h, 1d", type: "text" },
  lease: { label: "Lease", hint: "how long a holder keeps one, like 30s", type: "text" },
  fair: {
    label: "Fair queue",
    hint: "true: leases go in the order asked; false: to whoever asks first after a release",
    type: "choice",
    choices: ["false", "true"],
    flag: true,
  },
  calendar: {
    label: "Calendar",
    hint: "the window: a day, an ISO week (from Monday) or a month, in the time zone",
    type: "choice",
    choices: ["day", "week", "month"],
  },
  "time-zone": { label: "Time zone", hint: "an IANA name like Europe/Berlin; empty for UTC", type: "text", zones: true },
  overdraft: {
    label: "Overdraft",
    hint: "the most a cost reported after the work may take a key beyond its limit; empty for none",
    type: "number",
    min: 0,
  },
  limits: {
    label: "Limits",
    hint: 'a JSON list of limits, like [{"algorithm": "token-bucket", "capacity": 10, "rate": 5, "period": "1s"}]',
    type: "json",
  },
};

async function policyView(app, name) {
  let policy = null;
  if (name !== null) policy = await call("GET", `v1/policies/${segment(name)}`);
  const editing = canEdit(app);
  if (name === null && !editing) throw new ApiError(403, { error: "Only owners of the app create policies." });
  const title = name ?? "New policy";
  show(
    html`<p class="crumbs"><a href="#/">Apps</a> › <a href="#/apps/${segment(app)}">${app}</a> › ${title}</p>
    <h1 tabindex="-1">${title}</h1>
    <div class="columns">
      <div>${editing ? editorForm(app, policy) : policyDetails(policy)}</div>
      <section class="panel" aria-labelledby="preview-title">
        <h2 id="preview-title">Preview</h2>
        <p class="hint">The policy decides synthetic traffic for one key in your browser, with the same core as the server${editing ? ", before you save" : ""}.</p>
        ${trafficForm()}
        <p id="summary" role="status"></p>
        <div id="preview"></div>
      </section>
    </div>`,
    title,
  );
  if (policy?.algorithm === "concurrency") showLeases(name);
  const current = () => (editing ? readForm() : policy);
  setUpTraffic(current() ?? { algorithm: "token-bucket", rate: 5, period: "1s" });
  if (editing) setUpEditor(app, policy);
  await wasm;
  preview(current());
}

/** A key's holders and queue under the lease policy `name`, looked up as the reader asks. */
function showLeases(name) {
  const section = document.createElement("section");
  section.className = "panel";
  section.setAttribute("aria-labelledby", "leases-title");
  section.innerHTML = String(html`<h2 id="leases-title">Holders and queue</h2>
    <form id="lease-lookup" class="lookup">
      <div class="field">
        <label for="lease-key">Key</label>
        <input id="lease-key" name="key" type="text" required autocomplete="off">
      </div>
      <button type="submit" id="lease-show">Show</button>
    </form>
    <div id="lease-state" role="status"></div>`);
  view.append(section);
  const form = section.querySelector("form");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = form.elements.key.value;
    const target = document.getElementById("lease-state");
    try {
      const state = await call("GET", `v1/policies/${segment(name)}/leases/${segment(key)}`);
      target.innerHTML = String(leaseTables(state));
    } catch (error) {
      target.innerHTML = String(html`<p class="error">${error.message}</p>`);
    }
  });
}

function leaseTables(state) {
  const left = (us) => human(us);
  const table = (caption, id, columns, rows) =>
    rows.length === 0
      ? html`<p class="hint" id="${id}">${caption}: none</p>`
      : html`<table class="leases" id="${id}">
    <caption>${caption}</caption>
    <thead><tr>${columns.map((c) => html`<th scope="col">${c}</th>`)}</tr></thead>
    <tbody>${rows.map((cells) => html`<tr>${cells.map((cell, i) => html`<td data-label="${columns[i]}">${cell}</td>`)}</tr>`)}</tbody>
  </table>`;
  const holders = state.holders.map((h) => [h.owner, h.mode, h.token, h.holds, left(h.expires_in_us)]);
  const queue = state.queue.map((w, i) => [i + 1, w.owner, w.mode, left(w.expires_in_us)]);
  return html`${table("Holders", "lease-holders", ["Owner", "Mode", "Token", "Holds", "Expires in"], holders)}
    ${table("Queue", "lease-queue", ["Turn", "Owner", "Mode", "Place expires in"], queue)}`;
}

function policyDetails(policy) {
  return html`<dl class="details" id="details">
    <dt>Algorithm</dt><dd>${policy.algorithm}</dd>
    <dt>Limit</dt><dd>${describe(policy)}</dd>
    <dt>Apps</dt><dd>${(policy.apps ?? []).join(", ")}</dd>
    <dt>Description</dt><dd>${policy.description || "—"}</dd>
    <dt>Created</dt><dd>${policy.created_by}, ${when(policy.created_at)}</dd>
    <dt>Last change</dt><dd>${policy.updated_by}, ${when(policy.updated_at)} (version ${policy.version})</dd>
  </dl>`;
}

/** The IANA zones this browser knows, offered as a time zone is typed (any name may be sent). */
const ZONES = Intl.supportedValuesOf?.("timeZone") ?? [];

/**
 * A labelled input with its hint and a slot for the server's message about it: a select
 * of `choices` (keeping a stored value it does not list), a number of at least `min`, or
 * text, suggesting time zones if `zones`.
 */
function field(name, label, value, { type = "text", hint = "", attributes = "", min = 1, choices = [], zones = false } = {}) {
  if (type === "choice") {
    const options = value === "" || choices.includes(value) ? choices : [...choices, value];
    return html`<div class="field" data-field="${name}">
      <label for="f-${name}">${label}</label>
      <select id="f-${name}" name="${name}" aria-describedby="h-${name} e-${name}">
        ${options.map((c) => html`<option value="${c}"${c === value ? html` selected` : ""}>${c}</option>`)}
      </select>
      <p class="hint" id="h-${name}">${hint}</p>
      <p class="error" id="e-${name}"></p>
    </div>`;
  }
  if (type === "json") {
    return html`<div class="field" data-field="${name}">
      <label for="f-${name}">${label}</label>
      <textarea id="f-${name}" name="${name}" rows="5" spellcheck="false" aria-describedby="h-${name} e-${name}">${value ? JSON.stringify(value, null, 1) : ""}</textarea>
      <p class="hint" id="h-${name}">${hint}</p>
      <p class="error" id="e-${name}"></p>
    </div>`;
  }
  return html`<div class="field" data-field="${name}">
    <label for="f-${name}">${label}</label>
    <input id="f-${name}" name="${name}" type="${type}" value="${value ?? ""}" ${new Raw(attributes)}
      aria-describedby="h-${name} e-${name}"${type === "number" ? html` min="${min}" step="1" inputmode="numeric"` : ""}${zones ? html` list="zones-${name}" autocomplete="off"` : ""}>
    ${zones ? html`<datalist id="zones-${name}">${ZONES.map((zone) => html`<option value="${zone}">`)}</datalist>` : ""}
    <p class="hint" id="h-${name}">${hint}</p>
    <p class="error" id="e-${name}"></p>
  </div>`;
}

function editorForm(app, policy) {
  const p = policy ?? { algorithm: "token-bucket", capacity: 10, rate: 5, period: "1s", apps: [app] };
  const ban = p.ban ?? {};
  return html`<form id="editor" class="panel" novalidate>
    <h2>${policy ? `Edit (version ${policy.version})` : "Create"}</h2>
    <div id="conflict"></div>
    <p class="error" id="e-form" role="alert"></p>
    ${policy
      ? html`<p class="hint">Last changed by ${policy.updated_by}, ${when(policy.updated_at)}.</p>`
      : field("name", "Name", "", { hint: "1 to 64 letters, digits, -, _ or .; apps name it in their requests", attributes: "required" })}
    <div class="field" data-field="algorithm">
      <label for="f-algorithm">Algorithm</label>
      <select id="f-algorithm" name="algorithm" aria-describedby="h-algorithm e-algorithm">
        ${Object.keys(ALGORITHMS).map((a) => html`<option value="${a}"${a === p.algorithm ? html` selected` : ""}>${a}</option>`)}
        ${ALGORITHMS[p.algorithm] ? "" : html`<option value="${p.algorithm}" selected>${p.algorithm}</option>`}
      </select>
      <p class="hint" id="h-algorithm">${ALGORITHMS[p.algorithm]?.about ?? ""}</p>
      <p class="error" id="e-algorithm"></p>
    </div>
    ${Object.entries(PARAMETERS).map(([name, about]) => field(name, about.label, about.flag ? String(p[name] ?? false) : p[name] ?? "", about))}
    <fieldset>
      <legend><label><input type="checkbox" id="f-ban" name="ban"${p.ban ? html` checked` : ""}> Ban repeat offenders</label></legend>
      <div id="ban-fields">
        ${field("ban.threshold", "Denied requests before a ban", ban.threshold ?? 10, { type: "number" })}
        ${field("ban.window", "…within", ban.window ?? "1m", { hint: "like 1m" })}
        ${field("ban.duration", "Ban for", ban.duration ?? "10m", { hint: "like 10m" })}
      </div>
    </fieldset>
    ${field("apps", "Apps", (p.apps ?? []).join(", "), { hint: "the apps that may use it, separated by commas" })}
    <div class="field" data-field="description">
      <label for="f-description">Description</label>
      <textarea id="f-description" name="description" rows="2" aria-describedby="e-description">${p.description ?? ""}</textarea>
      <p class="error" id="e-description"></p>
    </div>
    <div class="row">
      <button type="submit" id="save">${policy ? "Save" : "Create"}</button>
      ${policy ? html`<button type="button" id="delete" class="danger">Delete…</button>` : ""}
      <a href="#/apps/${segment(app)}">Back to ${app}</a>
    </div>
    <p id="status" role="status"></p>
    <div id="confirm-delete" hidden>
      <p>Delete <strong>${policy?.name ?? ""}</strong>? Apps using it will get 404s.</p>
      <button type="button" id="delete-yes" class="danger">Delete it</button>
      <button type="button" id="delete-no">Keep it</button>
    </div>
  </form>`;
}

/** The policy the form describes, as the API takes it (only the algorithm's fields). */
function readForm() {
  const form = document.getElementById("editor");
  const value = (name) => form.elements[name]?.value.trim() ?? "";
  // Whole numbers as numbers; anything else as written, for the server to name; empty left out
  // (the server names a missing field; optional ones, like the time zone, take their default).
  const number = (name) => (/^\d+$/.test(value(name)) ? Number(value(name)) : value(name) || undefined);
  // Malformed JSON is sent as written: the server names the field in its 400/422.
  const json = (name) => {
    try {
      return JSON.parse(value(name));
    } catch {
      return value(name);
    }
  };
  const algorithm = value("algorithm");
  const policy = { algorithm };
  for (const name of ALGORITHMS[algorithm]?.fields ?? []) {
    const { type, flag } = PARAMETERS[name];
    if (flag) policy[name] = value(name) === "true";
    else policy[name] = type === "number" ? number(name) : type === "json" ? json(name) : value(name) || undefined;
  }
  if (form.elements.ban.checked) {
    policy.ban = { threshold: number("ban.threshold"), window: value("ban.window"), duration: value("ban.duration") };
  }
  policy.apps = value("apps").split(",").map((a) => a.trim()).filter(Boolean);
  policy.description = value("description");
  return policy;
}

/** Shows only the fields the chosen algorithm takes. */
function showFields() {
  const form = document.getElementById("editor");
  const algorithm = form.elements.algorithm.value;
  const fields = ALGORITHMS[algorithm]?.fields ?? [];
  for (const name of Object.keys(PARAMETERS)) {
    form.querySelector(`[data-field="${name}"]`).hidden = !fields.includes(name);
  }
  document.getElementById("h-algorithm").textContent = ALGORITHMS[algorithm]?.about ?? "";
  document.getElementById("ban-fields").hidden = !form.elements.ban.checked;
}

function clearErrors() {
  for (const error of document.querySelectorAll("#editor .error")) error.textContent = "";
  for (const input of document.querySelectorAll("#editor [aria-invalid]")) input.removeAttribute("aria-invalid");
}

/** The server's message next to the field it names, or above the form. */
function showError(error) {
  const slot = (error.field && document.getElementById(`e-${error.field}`)) || document.getElementById("e-form");
  slot.textContent = error.message;
  const input = error.field && document.getElementById(`f-${error.field}`);
  if (input) {
    input.setAttribute("aria-invalid", "true");
    input.closest("[hidden]")?.removeAttribute("hidden");
    input.focus();
  }
}

function setUpEditor(app, policy) {
  const form = document.getElementById("editor");
  let version = policy?.version;
  showFields();
  let pending;
  // "change" too: a select or a checkbox changed by a script or a driver may fire only that.
  const edited = () => {
    showFields();
    clearTimeout(pending);
    pending = setTimeout(() => preview(readForm()), 120);
  };
  form.addEventListener("input", edited);
  form.addEventListener("change", edited);
  const save = async (ifVersion) => {
    clearErrors();
    document.getElementById("conflict").innerHTML = "";
    const status = document.getElementById("status");
    const name = policy?.name ?? form.elements.name.value.trim();
    if (!name) return showError(new ApiError(422, { error: "A policy needs a name.", field: "name" }));
    status.textContent = "Saving…";
    try {
      const shown = ["algorithm", "ban", "apps", "description", ...Object.keys(PARAMETERS)];
      const body = { ...unshownSettings(policy, shown), ...readForm() };
      const saved = await call("PUT", `v1/policies/${segment(name)}`, { body, version: ifVersion });
      status.textContent = `Saved: version ${saved.version}.`;
      if (!policy) {
        location.hash = `#/apps/${segment(app)}/policies/${segment(name)}`;
        return;
      }
      version = saved.version;
      form.querySelector("h2").textContent = `Edit (version ${version})`;
    } catch (error) {
      status.textContent = "";
      if (!(error instanceof ApiError)) return showError(new ApiError(0, { error: `Not saved: ${error.message}` }));
      if (error.status === 409 && error.current) return showConflict(app, error.current, (newer) => save(newer));
      if (error.status === 428 && !policy) {
        return showError(new ApiError(428, { error: `A policy named ${name} exists already.`, field: "name" }));
      }
      showError(error);
    }
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    save(version);
  });
  if (!policy) return;
  const confirm = document.getElementById("confirm-delete");
  document.getElementById("delete").addEventListener("click", () => {
    confirm.hidden = false;
    document.getElementById("delete-no").focus();
  });
  document.getElementById("delete-no").addEventListener("click", () => {
    confirm.hidden = true;
    document.getElementById("delete").focus();
  });
  document.getElementById("delete-yes").addEventListener("click", async () => {
    try {
      await call("DELETE", `v1/policies/${segment(policy.name)}`, { version });
      location.hash = `#/apps/${segment(app)}`;
    } catch (error) {
      confirm.hidden = true;
      if (error instanceof ApiError && error.status === 409 && error.current) {
        return showConflict(app, error.current, (newer) => {
          version = newer;
          document.getElementById("delete").click();
        });
      }
      showError(error);
    }
  });
}

/**
 * A 409: someone saved a newer version. Shows it, keeps the user's edits in the form,
 * and offers to save them over the newer version (`retry(version)`) or to load it.
 */
function showConflict(app, current, retry) {
  const box = document.getElementById("conflict");
  box.innerHTML = String(html`<div class="panel warning" role="alert" id="conflict-box">
    <h3>Someone changed this policy meanwhile</h3>
    <p><strong>${current.updated_by}</strong> saved version ${current.version}, ${when(current.updated_at)}:
      <span class="algorithm">${current.algorithm}</span>: ${describe(current)}.</p>
    <p>Your changes are still in the form.</p>
    <button type="button" id="retry">Save mine over version ${current.version}</button>
    <button type="button" id="load-theirs">Load version ${current.version}</button>
  </div>`);
  document.getElementById("retry").addEventListener("click", () => {
    box.innerHTML = "";
    retry(current.version);
  });
  document.getElementById("load-theirs").addEventListener("click", () => {
    const form = document.getElementById("editor");
    form.outerHTML = String(editorForm(app, current));
    setUpEditor(app, current);
    preview(readForm());
    document.getElementById("f-algorithm").focus();
  });
  document.getElementById("retry").focus();
}

// ---- The preview's traffic -------------------------------------------------------------

function trafficForm() {
  return html`<form id="traffic" class="traffic" novalidate>
    <div class="field"><label for="t-kind">Traffic</label>
      <select id="t-kind" name="kind">
        <option value="steady">steady</option><option value="poisson">Poisson (random)</option><option value="burst">bursts</option>
      </select></div>
    <div class="field" data-for="steady poisson"><label for="t-rate">Requests per second</label>
      <input id="t-rate" name="rate" type="number" min="1" step="1" inputmode="numeric"></div>
    <div class="field" data-for="burst"><label for="t-size">Burst size</label>
      <input id="t-size" name="size" type="number" min="1" step="1" inputmode="numeric"></div>
    <div class="field" data-for="burst"><label for="t-every">Every</label>
      <input id="t-every" name="every" type="text"></div>
    <div class="field"><label for="t-duration">For</label>
      <input id="t-duration" name="duration" type="text"></div>
  </form>`;
}

/**
 * Traffic that shows the policy's shape: twice its sustained rate, over ten periods; for
 * a calendar window, hourly bursts of twice its limit per period, over seven days, four
 * weeks or three months.
 */
function setUpTraffic(policy) {
  const form = document.getElementById("traffic");
  const [units, period] = sustained(policy) ?? [5, 1_000_000];
  const perSecond = Math.max(1, Math.min(10_000, Math.round((2 * units * 1_000_000) / period)));
  const duration = Math.min(Math.max(10 * period, 10_000_000), 3_600_000_000);
  form.elements.rate.value = perSecond;
  form.elements.size.value = Math.max(2, 2 * units);
  form.elements.every.value = shortDuration(Math.max(period, 1_000));
  form.elements.duration.value = shortDuration(duration);
  // Days in a period and in the run (binned by day: at most the chart's 120).
  const [days, runDays] = { day: [1, 7], week: [7, 28], month: [30, 90] }[policy.calendar] ?? [];
  if (policy.algorithm === "calendar-window" && days) {
    form.elements.kind.value = "burst";
    form.elements.size.value = Math.max(1, Math.ceil((2 * policy.limit) / (24 * days)));
    form.elements.every.value = "1h";
    form.elements.duration.value = `${runDays}d`;
  }
  const kinds = () => {
    for (const f of form.querySelectorAll("[data-for]")) f.hidden = !f.dataset.for.split(" ").includes(form.elements.kind.value);
  };
  kinds();
  const changed = () => {
    kinds();
    const editor = document.getElementById("editor");
    preview(editor ? readForm() : currentPolicy);
  };
  form.addEventListener("input", changed);
  form.addEventListener("change", changed);
}

/** The policy a viewer's preview runs (the saved one). */
let currentPolicy = null;

function readTraffic() {
  const form = document.getElementById("traffic");
  const whole = (name) => {
    const text = form.elements[name].value.trim();
    if (!/^\d+$/.test(text) || Number(text) < 1) throw new Error(`${form.querySelector(`label[for="t-${name}"]`).textContent}: a whole number of at least 1`);
    return Number(text);
  };
  const duration = (name) => {
    const ticks = parseDuration(form.elements[name].value);
    if (!ticks) throw new Error(`${form.querySelector(`label[for="t-${name}"]`).textContent}: a duration like 10s or 5m`);
    return ticks;
  };
  const kind = form.elements.kind.value;
  const traffic = kind === "burst" ? { kind, size: whole("size"), every: duration("every") } : { kind, rate: whole("rate"), seed: 1 };
  return { traffic, duration: duration("duration") };
}

/** An axis tick's date, in the run's zone: "Dec 7", or for months "Dec 2026". */
const dateOf = ({ startMs, timeZone, per }) => {
  const fields = per === "month" ? { month: "short", year: "numeric" } : { month: "short", day: "numeric" };
  const format = new Intl.DateTimeFormat(undefined, { timeZone, ...fields });
  return (t) => format.format(startMs + t / 1000);
};

/** When a run starts, in its zone: "Dec 7, 2026, 00:00". */
const startOf = ({ startMs, timeZone }) =>
  new Date(startMs).toLocaleString(undefined, { timeZone, dateStyle: "medium", timeStyle: "short", hourCycle: "h23" });

/** Runs `policy` on the chosen traffic with the wasm core and draws the result. */
function preview(policy) {
  const target = document.getElementById("preview");
  const summary = document.getElementById("summary");
  if (!target) return;
  if (!document.getElementById("editor")) currentPolicy = policy;
  try {
    if (wasmError) throw new Error(`the WebAssembly module did not load (${wasmError.message})`);
    const { traffic, duration } = readTraffic();
    const run = simulate(Limiter, policy, traffic, duration, { period: periodOf(policy) ?? 1_000_000 });
    const rate = sustained(policy);
    // A rate has a period, so its run has no calendar: round bins, each edges[1] wide.
    const perBin = rate ? (rate[0] * run.edges[1]) / rate[1] : null;
    const limitWords = rate ? `${policy.limit !== undefined ? "limit" : "sustained rate"}: ${rate[0]} per ${human(rate[1])}` : null;
    const percent = (n) => `${((100 * n) / Math.max(run.offered, 1)).toFixed(1)}%`;
    const { svg, limitDrawn } = barChart({
      ...run,
      duration,
      width: chartWidth(target),
      height: 240,
      label: inUnitOf,
      edgeLabel: run.timeZone ? dateOf(run) : null,
      yLabel: `requests per ${run.per}`,
      limit: perBin === null ? null : [perBin, limitWords],
      title: `Preview of ${describe(policy)}: admitted and denied requests over ${human(duration)}`,
    });
    // Only the counts are announced (the summary is a status); the chart is redrawn quietly.
    summary.innerHTML = String(html`<strong>${run.admitted}</strong> of ${run.offered} admitted (${percent(run.admitted)}),
      <strong>${run.denied}</strong> denied (${percent(run.denied)}) over ${human(duration)}${
        run.timeZone ? html` from ${startOf(run)} in ${run.timeZone}, this browser's time zone, in calendar periods from its time-zone data` : ""
      }.`);
    target.innerHTML = String(html`<div class="chart" id="preview-chart" data-policy="${describe(policy)}" data-start-ms="${run.startMs}" data-admitted="${run.admitted}" data-denied="${run.denied}">${new Raw(svg)}</div>
      ${new Raw(legend(limitWords, limitDrawn))}`);
  } catch (error) {
    summary.innerHTML = String(html`<span class="error" id="preview-error">Cannot preview: ${error.message}</span>`);
    target.innerHTML = "";
  }
}

// ---- Routing -----------------------------------------------------------------------------

async function route() {
  clearTimeout(statsTimer);
  if (!token.get()) return signIn();
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  try {
    await loadSession();
    const [top, app, page, name] = parts;
    if (top !== "apps" || !app) return appsView();
    if (!roleIn(app)) throw new ApiError(403, { error: `You have no role in ${app}.` });
    if (page === "audit") return await auditView(app);
    if (page === "new") return await policyView(app, null);
    if (page === "policies" && name) return await policyView(app, name);
    return await appView(app);
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      token.clear();
      session = null;
      who.textContent = "";
      return signIn("This token was not accepted: check it, or ask an admin for a new one.");
    }
    if (error instanceof ApiError && error.status === 403 && !session) {
      token.clear();
      return signIn("This token cannot sign in here: use a user token (sgu_…), not an app token.");
    }
    show(
      html`<h1 tabindex="-1">${error instanceof ApiError ? `Error ${error.status}` : "Cannot reach the server"}</h1>
      <p class="error" role="alert">${error.message}</p><p><a href="#/">Back to your apps</a></p>`,
      "Error",
    );
  }
}

window.addEventListener("hashchange", route);
let resized;
window.addEventListener("resize", () => {
  clearTimeout(resized);
  resized = setTimeout(() => {
    const editor = document.getElementById("editor");
    if (document.getElementById("preview")) preview(editor ? readForm() : currentPolicy);
    const stats = document.getElementById("stats");
    if (stats && lastStats) stats.innerHTML = String(statsCharts(lastStats));
  }, 200);
});
route();
