// Yak console: a hash-routed single page over the gateway's /api. No build step, no
// dependencies: every view is a function that fetches once, renders, and may poll.
import { LiveChart, fmtShort } from "./chart.js";
import { shareViews } from "./share.js";
import { reassignViews } from "./reassign.js";

const view = document.getElementById("view");
const banner = document.getElementById("banner");
const health = document.getElementById("health");
let timers = [];
let generation = 0; // a view's async work checks it to stop rendering after navigation

// ------------------------------------------------------------------ helpers

const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({
  "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

// A broker's published load (issue 23; only a gateway beside a broker knows it).
function fmtLoad(l) {
  if (!l) return "–";
  return `cpu ${Math.round(l.cpu_percent)}% · busy ${Math.round(100 * l.busy_ratio)}% · in ${fmtBytes(l.bytes_in_per_s)}/s · out ${fmtBytes(l.bytes_out_per_s)}/s`;
}

function fmtBytes(n) {
  if (n === null || n === undefined || n < 0) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function fmtMs(v) {
  if (v === null || v === undefined) return "–";
  const n = Number(v);
  if (n < 0) return "unlimited";
  if (n % 86400000 === 0) return `${n / 86400000} d`;
  if (n % 3600000 === 0) return `${n / 3600000} h`;
  return `${n} ms`;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error_code;
  }
}

async function api(path, opts = {}) {
  let resp;
  try {
    resp = await fetch("/api" + path, {
      ...opts,
      headers: { "content-type": "application/json", ...(opts.headers || {}) },
    });
  } catch (e) {
    throw new ApiError(0, { message: "The gateway is not reachable: " + e.message });
  }
  if (resp.status === 204) return null;
  let body = null;
  try { body = await resp.json(); } catch { /* non-JSON error page */ }
  if (!resp.ok) throw new ApiError(resp.status, body);
  return body;
}

function showError(e) {
  banner.hidden = false;
  const unreachable = e.status === 503 || e.status === 0;
  const prefix = /unreachable/i.test(e.message) ? "" : unreachable ? "Cluster unreachable: " : "Error: ";
  banner.textContent = prefix + e.message +
    (e.code ? ` (error ${e.code})` : "");
}
function clearError() { banner.hidden = true; banner.textContent = ""; }

function every(ms, fn) { timers.push(setInterval(fn, ms)); }

// "21–40 of 109" with Previous / Next buttons; `go(offset)` loads that page.
function pager(id, offset, limit, total, go) {
  const box = document.getElementById(id);
  if (total <= limit) { box.innerHTML = ""; return; }
  const last = Math.floor((total - 1) / limit) * limit;
  box.innerHTML = `<div class="pager row"><button class="secondary" data-page="prev" ${offset <= 0 ? "disabled" : ""}>‹ Previous</button>
    <span class="muted page-info">${offset + 1}–${Math.min(offset + limit, total)} of ${total}</span>
    <button class="secondary" data-page="next" ${offset >= last ? "disabled" : ""}>Next ›</button></div>`;
  box.querySelector("[data-page=prev]").addEventListener("click", () => go(Math.max(0, offset - limit)));
  box.querySelector("[data-page=next]").addEventListener("click", () => go(Math.min(last, offset + limit)));
}

// Search and pagination of any list (issue 26). `enhance(id)` is called after the table
// inside the container #id is (re)drawn: a filter box goes before the container and a
// pager after it, both kept across the view's polls, so typing is never interrupted.
// Rows match when every word of the filter is in their text (or their inputs' values).
const PAGE_SIZE = 25;
let listState = new Map(); // container id -> { q, offset }; cleared on navigation

function enhance(id, pageSize = PAGE_SIZE) {
  const box = document.getElementById(id);
  if (!box) return;
  let st = listState.get(id);
  if (!st) { st = { q: "", offset: 0 }; listState.set(id, st); }
  let tools = document.getElementById(`${id}-filter`);
  if (!tools) {
    tools = document.createElement("div");
    tools.id = `${id}-filter`;
    tools.className = "list-tools row";
    tools.innerHTML = `<input type="search" class="filter" data-filter="${esc(id)}" placeholder="Filter…"
      aria-label="Filter this list"><span class="muted filter-count"></span>`;
    box.before(tools);
    const input = tools.querySelector("input");
    input.value = st.q;
    input.addEventListener("input", () => { st.q = input.value; st.offset = 0; applyFilter(id, pageSize); });
  }
  if (!document.getElementById(`${id}-pages`)) {
    const pages = document.createElement("div");
    pages.id = `${id}-pages`;
    box.after(pages);
  }
  applyFilter(id, pageSize);
}

function applyFilter(id, pageSize) {
  const box = document.getElementById(id);
  const st = listState.get(id);
  const tools = document.getElementById(`${id}-filter`);
  const table = box && box.querySelector("table");
  if (!table || !table.tBodies.length) {
    tools.hidden = !st.q; // nothing to filter (an empty list): keep a filter being typed
    document.getElementById(`${id}-pages`).innerHTML = "";
    return;
  }
  tools.hidden = false;
  const rows = [...table.tBodies[0].rows];
  const words = st.q.trim().toLowerCase().split(/\s+/).filter(Boolean);
  const text = (r) => (r.textContent + " " + [...r.querySelectorAll("input")].map((i) => i.value)
    .join(" ")).toLowerCase();
  const match = words.length ? rows.filter((r) => { const t = text(r); return words.every((w) => t.includes(w)); }) : rows;
  const last = match.length ? Math.floor((match.length - 1) / pageSize) * pageSize : 0;
  st.offset = Math.min(st.offset, last);
  const shown = new Set(match.slice(st.offset, st.offset + pageSize));
  rows.forEach((r) => { r.hidden = !shown.has(r); });
  tools.querySelector(".filter-count").textContent = words.length
    ? (match.length ? `${match.length} of ${rows.length} match` : `nothing matches (${rows.length} in all)`) : "";
  pager(`${id}-pages`, st.offset, pageSize, match.length, (off) => { st.offset = off; applyFilter(id, pageSize); });
}

async function guarded(fn) {
  try { await fn(); } catch (e) { showError(e); }
}

// Renders a value as JSON (pretty), text, or hex, from base64.
function decode(b64, mode) {
  if (b64 === null || b64 === undefined) return { text: "null", cls: "muted" };
  const bin = atob(b64);
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  if (mode === "hex") {
    const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0"));
    const lines = [];
    for (let i = 0; i < hex.length; i += 16) lines.push(hex.slice(i, i + 16).join(" "));
    return { text: lines.join("\n") };
  }
  let text;
  try { text = new TextDecoder("utf-8", { fatal: true }).decode(bytes); } catch {
    return decode(b64, "hex");
  }
  if (mode === "json") {
    try { return { text: JSON.stringify(JSON.parse(text), null, 2) }; } catch { /* text */ }
  }
  return { text };
}

// Asks the registry to decode registry-framed values; [] when it cannot (never fatal).
async function registryDecode(values) {
  try {
    const r = await fetch("/api/registry/decode", {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ values }),
    });
    if (!r.ok) return [];
    return (await r.json()).decoded;
  } catch { return []; }
}

// Confluent's Schema Registry API, served at the gateway's root.
async function sr(path, opts = {}) {
  let resp;
  try {
    resp = await fetch(path, { ...opts,
      headers: { "content-type": "application/vnd.schemaregistry.v1+json", ...(opts.headers || {}) } });
  } catch (e) {
    throw new ApiError(0, { message: "The gateway is not reachable: " + e.message });
  }
  let body = null;
  try { body = await resp.json(); } catch { /* not JSON */ }
  if (!resp.ok) throw new ApiError(resp.status, body);
  return body;
}

// Line diff (longest common subsequence): [[" "|"+"|"-", line], ...].
function diffLines(a, b) {
  const n = a.length, m = b.length;
  const L = Array.from({ length: n + 1 }, () => new Int32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
    L[i][j] = a[i] === b[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([" ", a[i]]); i++; j++; }
    else if (L[i + 1][j] >= L[i][j + 1]) out.push(["-", a[i++]]);
    else out.push(["+", b[j++]]);
  }
  while (i < n) out.push(["-", a[i++]]);
  while (j < m) out.push(["+", b[j++]]);
  return out;
}

function pretty(v) {
  if (v.schemaType === "PROTOBUF") return v.schema;
  try { return JSON.stringify(JSON.parse(v.schema), null, 2); } catch { return v.schema; }
}

// ------------------------------------------------------------------ health

async function pollHealth() {
  try {
    const r = await fetch("/api/health");
    const body = await r.json();
    if (body.up) {
      health.className = "health up";
      health.textContent = `cluster up · ${body.rtt_ms} ms`;
    } else {
      health.className = "health down";
      health.textContent = "cluster DOWN";
      health.title = body.error || "";
    }
  } catch {
    health.className = "health down";
    health.textContent = "gateway unreachable";
  }
}

// ------------------------------------------------------------------ views

async function overview() {
  const g = generation;
  view.innerHTML = `
    <h1>Cluster overview</h1>
    <div class="cards" id="cards"></div>
    <h2>Throughput <span class="legend"><span class="in">■ in</span> · <span class="out">■ out</span> (messages/s)</span></h2>
    <div class="panel"><canvas class="chart" id="tput"></canvas></div>
    <h2>Brokers</h2><div id="brokers"></div>
    <h2>Under-replicated partitions</h2><div id="urp"></div><div id="urp-pager"></div>`;
  const chart = new LiveChart(document.getElementById("tput"),
    [{ name: "in", color: "#2f6fde" }, { name: "out", color: "#e07b24" }], { integer: true });
  let prev = null;
  const URP_PAGE = 20;
  let urpOffset = 0;
  const tick = async () => {
    const asked = urpOffset;
    const o = await api(`/overview?urp_offset=${asked}&urp_limit=${URP_PAGE}`);
    // A poll that left before a click on the pager answers for the old page: drop it.
    if (g !== generation || asked !== urpOffset) return;
    clearError();
    if (o.under_replicated && urpOffset >= o.under_replicated) {
      urpOffset = Math.floor((o.under_replicated - 1) / URP_PAGE) * URP_PAGE; // the list shrank
    }
    const online = o.brokers.filter((b) => b.online).length;
    // Topics and partitions of the same topics: the user's, the internal ones below.
    const internal = (k) => (k ? `+${k} internal` : "");
    const cards = [
      ["Brokers", online === o.brokers.length ? online : `${online} of ${o.brokers.length} up`],
      ["Topics", o.topics, internal(o.internal_topics)],
      ["Partitions", o.partitions, internal(o.internal_partitions)],
      ["Messages", fmtShort(o.messages_total)], ["Size on disk", fmtBytes(o.bytes_total)],
      ["Controller", o.controller_id < 0 ? "none" : o.controller_id],
      ["Under-replicated", o.under_replicated], ["Offline partitions", o.offline_partitions],
      ...(o.reassignments === null || o.reassignments === undefined ? []
        : [["Reassignments", o.reassignments, o.reassignments ? "partitions moving" : ""]]),
    ];
    document.getElementById("cards").innerHTML = cards.map(([l, v, sub]) =>
      `<div class="card" data-card="${esc(l)}"><div class="label">${esc(l)}</div><div class="value">${esc(v)}</div>${
        sub ? `<div class="sub muted">${esc(sub)}</div>` : ""}</div>`).join("");
    document.getElementById("brokers").innerHTML = `<table id="brokers-table"><thead><tr><th>ID</th><th>Status</th><th>Host</th>
      <th>Port</th><th>Rack</th><th>Role</th><th class="num">Leaders</th><th class="num">Replicas</th><th>Load</th></tr></thead>
      <tbody>${o.brokers.map((b) => `<tr data-broker="${b.id}" class="${b.online ? "" : "offline"}"><td><a href="#/broker/${b.id}">${b.id}</a></td>
      <td class="status">${b.online ? '<span class="ok">● online</span>'
        : '<span class="err" title="not in the cluster\'s metadata: stopped, crashed or cut off">● offline</span>'}</td>
      <td>${esc(b.host ?? "–")}</td><td>${b.port ?? "–"}</td><td class="rack">${esc(b.rack ?? "–")}</td><td>${b.id === o.controller_id ? "controller" : ""}</td>
      <td class="num">${b.leaders}</td><td class="num">${b.replicas}</td><td class="load">${esc(fmtLoad(b.load))}</td>
      </tr>`).join("")}</tbody></table><p class="muted">Cluster id ${esc(o.cluster_id)}</p>`;
    enhance("brokers");
    pager("urp-pager", urpOffset, URP_PAGE, o.under_replicated, (off) => {
      urpOffset = off;
      guarded(tick);
    });
    document.getElementById("urp").innerHTML = o.under_replicated_partitions.length
      ? `<table><thead><tr><th>Topic</th><th>Partition</th><th>Leader</th><th>Replicas</th>
        <th>ISR</th></tr></thead><tbody>${o.under_replicated_partitions.map((u) =>
          `<tr class="urp" data-urp="${esc(u.topic)}-${u.partition}"><td><a href="#/topic/${encodeURIComponent(u.topic)}">${esc(u.topic)}</a></td>
          <td>${u.partition}</td><td>${u.leader < 0 ? "none" : u.leader}</td>
          <td>${u.replicas.join(", ")}</td><td>${u.isr.join(", ")}</td></tr>`).join("")}</tbody></table>`
      : `<p class="muted">None: every partition has its full ISR.</p>`;
    if (prev) {
      const dt = o.time - prev.time;
      const msgIn = (o.messages_total - prev.messages_total) / dt;
      const msgOut = o.broker && prev.broker ? (o.broker.messages_out - prev.broker.messages_out) / dt : null;
      chart.push(o.time, [Math.max(msgIn, 0), msgOut === null ? null : Math.max(msgOut, 0)]);
    } else {
      chart.push(o.time, [0, o.broker ? 0 : null]);
    }
    prev = o;
  };
  await guarded(tick);
  every(2000, () => guarded(tick));
}

// Kafka's topic configs, offered as the config name box's completions (any name may be typed).
const TOPIC_CONFIGS = ["cleanup.policy", "compression.type", "delete.retention.ms",
  "file.delete.delay.ms", "flush.messages", "flush.ms", "index.interval.bytes",
  "max.compaction.lag.ms", "max.message.bytes", "message.timestamp.after.max.ms",
  "message.timestamp.before.max.ms", "message.timestamp.type", "min.cleanable.dirty.ratio",
  "min.compaction.lag.ms", "min.insync.replicas", "preallocate", "retention.bytes",
  "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
  "unclean.leader.election.enable"];

async function topics() {
  const g = generation;
  view.innerHTML = `
    <h1>Topics</h1>
    <div class="panel"><form id="create">
      <div class="row">
      <label>Name <input name="name" required pattern="[A-Za-z0-9._-]+" placeholder="orders"></label>
      <label>Partitions <input name="partitions" type="number" min="1" value="1" style="width:90px"></label>
      <label>Replication <input name="rf" type="number" min="1" value="1" style="width:90px"></label>
      <button type="button" class="secondary" id="add-config" title="any topic config, as key = value">+ Config</button>
      <button type="submit">Create topic</button></div>
      <div id="create-configs"></div>
      <datalist id="topic-config-names">${TOPIC_CONFIGS.map((c) => `<option value="${c}">`).join("")}</datalist>
    </form></div>
    <h2>All topics</h2><div id="list"><p class="muted">Loading…</p></div>`;
  // Any topic config, one key = value row each (a "key=value" typed or pasted into the
  // key box is split); a key given twice, or a value without a key, is refused here.
  const rowsBox = document.getElementById("create-configs");
  const addConfig = (key = "", value = "") => {
    const row = document.createElement("div");
    row.className = "row config-row";
    row.innerHTML = `<input class="config-key" list="topic-config-names" placeholder="cleanup.policy"
      aria-label="config name" value="${esc(key)}"><span class="muted">=</span>
      <input class="config-val" placeholder="compact" aria-label="config value" value="${esc(value)}">
      <button type="button" class="secondary" data-remove-config title="remove this config">✕</button>`;
    const k = row.querySelector(".config-key");
    k.addEventListener("input", () => {
      const i = k.value.indexOf("=");
      if (i > 0) {
        row.querySelector(".config-val").value = k.value.slice(i + 1).trim();
        k.value = k.value.slice(0, i).trim();
        row.querySelector(".config-val").focus();
      }
    });
    row.querySelector("[data-remove-config]").addEventListener("click", () => row.remove());
    rowsBox.append(row);
    return row;
  };
  document.getElementById("add-config").addEventListener("click", () =>
    addConfig().querySelector(".config-key").focus());
  document.getElementById("create").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = ev.target;
    guarded(async () => {
      const configs = {};
      for (const row of rowsBox.querySelectorAll(".config-row")) {
        const key = row.querySelector(".config-key").value.trim();
        const value = row.querySelector(".config-val").value.trim();
        if (!key && !value) continue;
        if (!key) throw new ApiError(400, { message: `the value "${value}" has no config name` });
        if (key in configs) throw new ApiError(400, { message: `config ${key} is given twice` });
        configs[key] = value;
      }
      await api("/topics", { method: "POST", body: JSON.stringify({
        name: f.name.value.trim(), partitions: Number(f.partitions.value),
        replication_factor: Number(f.rf.value), configs }) });
      f.reset();
      rowsBox.innerHTML = "";
      clearError();
      await load();
    });
  });
  const load = async () => {
    const rows = await api("/topics");
    if (g !== generation) return;
    const list = document.getElementById("list");
    if (!rows.length) { list.innerHTML = `<p class="muted">No topics yet.</p>`; enhance("list"); return; }
    list.innerHTML = `<table id="topics-table"><thead><tr><th>Name</th><th class="num">Partitions</th>
      <th class="num">RF</th><th class="num">Messages</th><th class="num">Size</th>
      <th>Retention</th><th>Cleanup</th><th></th></tr></thead><tbody>${rows.map((t) => `
      <tr data-topic="${esc(t.name)}"><td><a href="#/topic/${encodeURIComponent(t.name)}">${esc(t.name)}</a>
      ${t.internal ? '<span class="tag">internal</span>' : ""}</td>
      <td class="num">${t.partitions}</td><td class="num">${t.replication_factor}</td>
      <td class="num">${fmtShort(t.messages)}</td><td class="num">${fmtBytes(t.size)}</td>
      <td>${fmtMs(t.retention_ms)}${t.retention_bytes && t.retention_bytes !== "-1" ? " / " + fmtBytes(Number(t.retention_bytes)) : ""}</td>
      <td>${esc(t.cleanup_policy || "")}</td>
      <td>${t.internal ? "" : `<button class="danger" data-delete="${esc(t.name)}">Delete</button>`}</td></tr>`).join("")}
      </tbody></table>`;
    enhance("list");
    list.querySelectorAll("[data-delete]").forEach((b) => b.addEventListener("click", () => {
      const name = b.dataset.delete;
      if (!confirm(`Delete topic ${name} and all its data?`)) return;
      guarded(async () => { await api(`/topics/${encodeURIComponent(name)}`, { method: "DELETE" }); await load(); });
    }));
    clearError();
  };
  await guarded(load);
  every(5000, () => guarded(load));
}

async function topicPage(name) {
  const g = generation;
  const enc = encodeURIComponent(name);
  view.innerHTML = `
    <h1>Topic ${esc(name)}</h1>
    <p id="topic-loading" class="muted">Loading…</p>
    <div id="topic-body" hidden>
    <h2>Partitions</h2><div id="parts"></div>
    <div class="grid2">
      <div><h2>Produce a message</h2><div class="panel"><form id="produce">
        <div class="row"><label>Partition <input name="partition" type="number" min="0" placeholder="any" style="width:90px"></label>
        <label style="flex:1">Key <input name="key" placeholder="(none)"></label></div>
        <label class="muted" style="display:block;margin-top:8px">Value<textarea name="value" placeholder='{"hello": "yak"}'></textarea></label>
        <label class="muted" style="display:block">Headers (JSON object)<input name="headers" placeholder='{"source": "console"}' style="width:100%"></label>
        <div class="row" style="margin-top:8px"><button type="submit">Produce</button><span id="produced" class="muted"></span></div>
      </form></div></div>
      <div><h2>Configuration</h2><div id="configs" class="panel"><p class="muted">Loading…</p></div></div>
    </div>
    <h2>Messages</h2>
    <div class="panel"><form id="browse" class="row">
      <label>Partition <select name="partition"></select></label>
      <label>From <select name="mode"><option value="latest">latest</option><option value="offset">offset</option>
        <option value="timestamp">timestamp</option><option value="earliest">earliest</option></select></label>
      <label>Offset / time <input name="at" placeholder="offset or 2026-01-01T00:00:00Z"></label>
      <label>Limit <input name="limit" type="number" min="1" max="500" value="50" style="width:80px"></label>
      <label>Show as <select name="fmt"><option value="json">JSON</option><option value="text">text</option><option value="hex">hex</option></select></label>
      <button type="submit">Load</button>
    </form></div>
    <div id="messages" style="margin-top:8px"></div>
    </div>`;

  // A topic that does not exist (a typo, or deleted meanwhile) says so, with nothing to
  // produce to or browse; any other error keeps the page and retries.
  const missing = () => {
    timers.forEach(clearInterval);
    timers = [];
    clearError();
    view.innerHTML = `<h1>Topic ${esc(name)}</h1><div class="panel" id="topic-missing">
      <p>Topic <b>${esc(name)}</b> does not exist${me && me.authenticated ? " (or you may not see it)" : ""}.</p>
      <p><a href="#/topics">All topics</a></p></div>`;
  };
  const loadParts = async () => {
    let t;
    try { t = await api(`/topics/${enc}`); } catch (e) {
      if (e.status === 404 && g === generation) { missing(); return null; }
      throw e;
    }
    if (g !== generation) return t;
    document.getElementById("topic-loading").hidden = true;
    document.getElementById("topic-body").hidden = false;
    document.getElementById("parts").innerHTML = `<table id="partitions-table"><thead><tr><th>Partition</th>
      <th>Leader</th><th>Replicas</th><th>ISR</th><th class="num">Log start</th><th class="num">Log end</th>
      <th class="num">High watermark</th><th class="num">Last stable</th><th class="num">Size</th>${t.tiered
        ? `<th class="num" title="the leader's local log start (ListOffsets EARLIEST_LOCAL); below it, records are read from remote storage">Local start</th><th class="num" title="records below this offset are in remote storage (ListOffsets LATEST_TIERED + 1)">Uploaded to</th>` : ""}</tr></thead>
      <tbody>${t.partitions.map((p) => `<tr class="${p.isr.length < p.replicas.length ? "urp" : ""}"
      title="${p.isr.length < p.replicas.length ? "under-replicated: ISR smaller than replicas" : ""}"><td>${p.partition}</td><td>${p.leader < 0 ? "none" : p.leader}</td>
      <td>${p.replicas.join(", ")}${p.adding?.length || p.removing?.length
        ? ` <a class="moving" href="#/reassignments" title="being reassigned: adding ${esc(p.adding.join(", ") || "none")}, removing ${
          esc(p.removing.join(", ") || "none")}">moving → ${esc(p.replicas.filter((r) => !p.removing.includes(r)).join(", "))}</a>` : ""}</td>
      <td>${p.isr.join(", ")}</td><td class="num">${p.log_start_offset}</td>
      <td class="num">${p.log_end_offset}</td><td class="num">${p.high_watermark}</td>
      <td class="num">${p.last_stable_offset}</td><td class="num">${fmtBytes(p.size)}</td>${t.tiered
        ? `<td class="num">${p.local_start_offset ?? "–"}</td><td class="num">${p.uploaded_upto ?? "–"}</td>` : ""}</tr>`).join("")}
      </tbody></table>`;
    enhance("parts");
    const sel = document.querySelector("#browse select[name=partition]");
    if (!sel.options.length) {
      sel.innerHTML = t.partitions.map((p) => `<option>${p.partition}</option>`).join("") +
        (t.partitions.length > 1 ? `<option value="all">all</option>` : "");
    }
    clearError();
    return t;
  };

  const renderConfigs = (configs) => {
    const box = document.getElementById("configs");
    box.innerHTML = `<table id="configs-table"><thead><tr><th>Name</th><th>Value</th><th>Source</th></tr></thead>
      <tbody>${configs.map((c) => `<tr><td>${esc(c.name)}</td><td>${c.read_only ? esc(c.value) :
      `<input data-config="${esc(c.name)}" data-orig="${esc(c.value ?? "")}" value="${esc(c.value ?? "")}"
        class="config-value" size="${Math.max(String(c.value ?? "").length, 8) + 1}">`}</td>
      <td class="muted">${c.is_default ? "default" : esc(c.source)}</td></tr>`).join("")}</tbody></table>
      <div class="row" style="margin-top:8px"><button id="save-configs" disabled>Save changes</button>
      <span id="config-status" class="muted"></span></div>`;
    enhance("configs", 1e9);
    const inputs = [...box.querySelectorAll("[data-config]")];
    const save = document.getElementById("save-configs");
    inputs.forEach((i) => i.addEventListener("input", () => {
      i.classList.toggle("changed", i.value !== i.dataset.orig);
      save.disabled = !inputs.some((x) => x.value !== x.dataset.orig);
    }));
    save.addEventListener("click", () => guarded(async () => {
      const changes = {};
      inputs.filter((x) => x.value !== x.dataset.orig)
        .forEach((x) => { changes[x.dataset.config] = x.value === "" ? null : x.value; });
      const r = await api(`/topics/${enc}/configs`, { method: "PUT", body: JSON.stringify({ configs: changes }) });
      renderConfigs(r.configs);
      document.getElementById("config-status").textContent = `Saved ${Object.keys(changes).join(", ")}`;
      clearError();
    }));
  };

  const browse = async () => {
    const f = document.getElementById("browse");
    const q = new URLSearchParams({ partition: f.partition.value || "0", limit: f.limit.value || "50" });
    if (f.partition.value === "all") { q.delete("partition"); q.set("all", "true"); }
    const at = f.at.value.trim();
    if (f.mode.value === "offset") q.set("offset", at || "0");
    if (f.mode.value === "earliest") q.set("offset", "-2");
    if (f.mode.value === "timestamp") {
      const ms = /^\d+$/.test(at) ? Number(at) : Date.parse(at);
      if (Number.isNaN(ms)) throw new ApiError(400, { message: `"${at}" is not a timestamp` });
      q.set("timestamp", String(ms));
    }
    const r = await api(`/topics/${enc}/messages?${q}`);
    const fmt = f.fmt.value;
    const box = document.getElementById("messages");
    if (!r.messages.length) {
      box.innerHTML = r.all ? `<p class="muted">No messages in any of the ${r.partitions.length} partitions${
        r.timestamp !== null ? " at or after " + esc(new Date(r.timestamp).toISOString()) : ""}.</p>`
        : `<p class="muted">No messages (partition ${r.partition}: offsets ${r.log_start_offset}–${r.high_watermark}).</p>`;
      enhance("messages", 1e9);
      return;
    }
    // Registry-framed values (magic byte 0 + schema id) are decoded by the gateway's registry.
    const framed = fmt === "json" ? await registryDecode(r.messages.map((m) => m.value)) : [];
    // Across all partitions the records come in timestamp order, each with its partition.
    const pcol = r.all ? `<th class="num">Partition</th>` : "";
    box.innerHTML = `<table id="messages-table" class="${r.all ? "all-partitions" : ""}"><thead><tr>${pcol}<th class="num">Offset</th><th>Timestamp</th><th>Key</th>
      <th>Value</th><th>Headers</th></tr></thead><tbody>${r.messages.map((m, i) => {
        const k = decode(m.key, fmt === "json" ? "text" : fmt);
        const d = framed[i];
        const v = !d ? decode(m.value, fmt) : d.error
          ? { text: `${d.error}\n${decode(m.value, "hex").text}`, cls: "decode-error" }
          : { text: `${d.schema_type} · schema ${d.schema_id}\n${JSON.stringify(d.value, null, 2)}` };
        const hs = m.headers.map(([hk, hv]) => `${esc(hk)}: ${esc(decode(hv, fmt === "hex" ? "hex" : "text").text)}`).join("<br>");
        return `<tr data-record="${m.partition}-${m.offset}">${r.all ? `<td class="num">${m.partition}</td>` : ""}<td class="num">${m.offset}</td><td>${esc(new Date(m.timestamp).toISOString())}</td>
        <td><pre class="data ${k.cls || ""}">${esc(k.text)}</pre></td><td><pre class="data ${v.cls || ""}">${esc(v.text)}</pre></td>
        <td>${hs || '<span class="muted">–</span>'}</td></tr>`;
      }).join("")}</tbody></table>`;
    enhance("messages", 1e9);
    clearError();
  };

  document.getElementById("browse").addEventListener("submit", (ev) => { ev.preventDefault(); guarded(browse); });
  document.getElementById("produce").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = ev.target;
    guarded(async () => {
      let headers = {};
      if (f.headers.value.trim()) {
        try { headers = JSON.parse(f.headers.value); } catch (e) {
          throw new ApiError(400, { message: "Headers must be a JSON object: " + e.message });
        }
      }
      const body = { value: f.value.value, key: f.key.value === "" ? null : f.key.value, headers };
      if (f.partition.value !== "") body.partition = Number(f.partition.value);
      const r = await api(`/topics/${enc}/messages`, { method: "POST", body: JSON.stringify(body) });
      document.getElementById("produced").textContent = `Written to partition ${r.partition} at offset ${r.offset}`;
      clearError();
      await loadParts();
      await browse();
    });
  });

  let configsShown = false;
  const refresh = async () => {
    const t = await loadParts();
    if (!t || g !== generation) return;
    if (!configsShown) {  // once: edits in progress are not overwritten by the poll
      configsShown = true;
      renderConfigs(t.configs);
      await browse();
    }
  };
  await guarded(refresh);
  if (g === generation && document.getElementById("topic-body")) every(3000, () => guarded(refresh));
}

const LEVELS = ["BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
  "FULL_TRANSITIVE", "NONE"];

async function schemas() {
  const gen = generation;
  const names = await sr("/subjects");
  const rows = await Promise.all(names.map(async (s) => {
    const enc = encodeURIComponent(s);
    const [latest, cfg] = await Promise.all([sr(`/subjects/${enc}/versions/latest`),
      sr(`/config/${enc}?defaultToGlobal=true`)]);
    return { s, latest, level: cfg.compatibilityLevel };
  }));
  const global = await sr("/config");
  if (gen !== generation) return;
  view.innerHTML = `<h1>Schemas</h1>
    <p class="muted">Schema registry (Confluent's API at this address). Global compatibility:
      <b id="global-level">${esc(global.compatibilityLevel)}</b></p>
    <div id="subjects">${rows.length ? `<table id="subjects-table"><thead><tr><th>Subject</th><th>Type</th>
      <th class="num">Latest version</th><th class="num">Schema id</th><th>Compatibility</th></tr></thead>
      <tbody>${rows.map((r) => `<tr data-subject="${esc(r.s)}">
        <td><a href="#/subject/${encodeURIComponent(r.s)}">${esc(r.s)}</a></td>
        <td>${esc(r.latest.schemaType || "AVRO")}</td><td class="num">${r.latest.version}</td>
        <td class="num">${r.latest.id}</td><td>${esc(r.level)}</td></tr>`).join("")}</tbody></table>`
      : '<p class="muted">No subjects registered yet.</p>'}</div>`;
  enhance("subjects");
}

async function subjectPage(subject) {
  const gen = generation;
  const enc = encodeURIComponent(subject);
  const versions = await sr(`/subjects/${enc}/versions`);
  const all = await Promise.all(versions.map((v) => sr(`/subjects/${enc}/versions/${v}`)));
  const cfg = await sr(`/config/${enc}?defaultToGlobal=true`);
  if (gen !== generation) return;
  const opts = (sel) => all.map((v) => `<option value="${v.version}" ${v.version === sel ? "selected" : ""}>v${v.version} (id ${v.id})</option>`).join("");
  const last = all[all.length - 1];
  const prev = all.length > 1 ? all[all.length - 2] : last;
  view.innerHTML = `<h1>Subject ${esc(subject)}</h1>
    <div class="panel"><form id="compat" class="row">
      <label>Compatibility <select name="level">${LEVELS.map((l) =>
        `<option ${l === cfg.compatibilityLevel ? "selected" : ""}>${l}</option>`).join("")}</select></label>
      <button type="submit">Save</button> <span id="compat-status" class="muted"></span></form></div>
    <table id="versions-table"><thead><tr><th class="num">Version</th><th class="num">Schema id</th>
      <th>Type</th><th>References</th></tr></thead><tbody>${all.map((v) => `<tr>
      <td class="num">${v.version}</td><td class="num">${v.id}</td><td>${esc(v.schemaType || "AVRO")}</td>
      <td>${esc((v.references || []).map((r) => `${r.name} → ${r.subject} v${r.version}`).join(", ")) || "–"}</td>
      </tr>`).join("")}</tbody></table>
    <div class="panel"><form id="diff" class="row">
      <label>Compare <select name="a">${opts(prev.version)}</select></label>
      <label>with <select name="b">${opts(last.version)}</select></label></form>
      <pre id="schema-diff" class="data"></pre></div>`;
  const showDiff = () => {
    const f = document.getElementById("diff");
    const a = all.find((v) => v.version === Number(f.a.value));
    const b = all.find((v) => v.version === Number(f.b.value));
    const lines = diffLines(pretty(a).split("\n"), pretty(b).split("\n"));
    document.getElementById("schema-diff").innerHTML = lines.map(([op, line]) =>
      `<span class="${op === "+" ? "diff-add" : op === "-" ? "diff-del" : ""}">${esc(op + " " + line)}</span>`).join("\n");
  };
  document.getElementById("diff").addEventListener("change", showDiff);
  showDiff();
  document.getElementById("compat").addEventListener("submit", (ev) => {
    ev.preventDefault();
    guarded(async () => {
      const level = document.querySelector("#compat select[name=level]").value;
      await sr(`/config/${enc}`, { method: "PUT", body: JSON.stringify({ compatibility: level }) });
      document.getElementById("compat-status").textContent = `Saved ${level}`;
      clearError();
    });
  });
}

async function groups() {
  const g = generation;
  view.innerHTML = `<h1>Consumer groups</h1><div id="groups"><p class="muted">Loading…</p></div>`;
  const load = async () => {
    const rows = await api("/groups");
    if (g !== generation) return;
    const box = document.getElementById("groups");
    box.innerHTML = rows.length ? `<table id="groups-table"><thead><tr><th>Group</th><th>State</th>
      <th class="num">Members</th><th class="num">Partitions</th><th class="num">Total lag</th></tr></thead>
      <tbody>${rows.map((r) => `<tr data-group="${esc(r.group_id)}"><td><a href="#/group/${encodeURIComponent(r.group_id)}">${esc(r.group_id)}</a></td>
      <td>${esc(r.state)}</td><td class="num">${r.members ?? "–"}</td><td class="num">${r.partitions ?? "–"}</td>
      <td class="num lag">${r.lag ?? "–"}</td></tr>`).join("")}</tbody></table>` : `<p class="muted">No consumer groups.</p>`;
    enhance("groups");
    clearError();
  };
  await guarded(load);
  every(3000, () => guarded(load));
}

async function groupPage(id) {
  const g = generation;
  view.innerHTML = `<h1>Consumer group ${esc(id)}</h1><div id="summary" class="cards"></div>
    <h2>Lag <span class="legend">(total, messages)</span></h2>
    <div class="panel"><canvas class="chart" id="lagchart"></canvas></div>
    <h2>Lag per partition</h2><div id="lag"></div><h2>Members</h2><div id="members"></div>
    <h2>Manage offsets <span class="legend">(the group must have no active members)</span></h2>
    <div class="panel" id="offset-tools"><form id="reset-form" class="row">
      <label>Topic <select name="topic" id="reset-topic"></select></label>
      <label>Reset to <select name="to" id="reset-to"><option value="earliest">earliest</option>
        <option value="latest">latest</option><option value="offset">offset</option>
        <option value="timestamp">timestamp</option><option value="shift">shift by N</option></select></label>
      <input name="value" id="reset-value" placeholder="offset / ms or ISO time / N" hidden>
      <button type="submit" id="reset-preview">Preview</button>
      <button type="button" class="secondary" id="offsets-delete">Delete offsets of topic</button>
      <button type="button" class="danger" id="group-delete">Delete group</button></form>
      <div id="reset-result"></div></div>`;
  const chart = new LiveChart(document.getElementById("lagchart"), [{ name: "lag", color: "#e07b24" }],
    { integer: true });
  offsetTools(id, g);
  const load = async () => {
    const d = await api(`/groups/${encodeURIComponent(id)}`);
    if (g !== generation) return;
    document.getElementById("summary").innerHTML = [["State", d.state], ["Members", d.members.length],
      ["Assignor", d.protocol || "–"], ["Total lag", d.total_lag]].map(([l, v]) =>
      `<div class="card"><div class="label">${esc(l)}</div><div class="value">${esc(v)}</div></div>`).join("");
    document.getElementById("lag").innerHTML = d.lag.length ? `<table id="lag-table"><thead><tr><th>Topic</th>
      <th class="num">Partition</th><th class="num">Committed</th><th class="num">High watermark</th><th class="num">Lag</th></tr></thead>
      <tbody>${d.lag.map((r) => `<tr><td>${esc(r.topic)}</td><td class="num">${r.partition}</td><td class="num">${r.committed}</td>
      <td class="num">${r.high_watermark}</td><td class="num lag">${r.lag}</td></tr>`).join("")}</tbody></table>`
      : `<p class="muted">No committed offsets.</p>`;
    document.getElementById("members").innerHTML = d.members.length ? `<table><thead><tr><th>Member</th><th>Client</th>
      <th>Host</th><th>Assignment</th></tr></thead><tbody>${d.members.map((m) => `<tr><td>${esc(m.member_id)}</td>
      <td>${esc(m.client_id)}</td><td>${esc(m.host)}</td><td>${m.assignment.map(([t, p]) => esc(`${t}-${p}`)).join(", ")}</td>
      </tr>`).join("")}</tbody></table>` : `<p class="muted">No active members.</p>`;
    enhance("lag");
    enhance("members");
    chart.push(Date.now() / 1000, [d.total_lag]);
    clearError();
  };
  await guarded(load);
  every(3000, () => guarded(load));
}

// Reset (with a server-side preview first), delete a topic's offsets, delete the group.
function offsetTools(id, g) {
  const enc = encodeURIComponent(id);
  const form = document.getElementById("reset-form");
  const topicSel = document.getElementById("reset-topic");
  const toSel = document.getElementById("reset-to");
  const valueIn = document.getElementById("reset-value");
  const result = document.getElementById("reset-result");
  guarded(async () => {
    const [d, topics] = await Promise.all([api(`/groups/${enc}`), api("/topics")]);
    if (g !== generation) return;
    const committed = [...new Set(d.lag.map((r) => r.topic))];
    const others = topics.filter((t) => !t.internal && !committed.includes(t.name)).map((t) => t.name);
    topicSel.innerHTML = [...committed, ...others].map((t) => `<option>${esc(t)}</option>`).join("");
  });
  toSel.addEventListener("change", () => { valueIn.hidden = ["earliest", "latest"].includes(toSel.value); });
  const body = (apply) => {
    const b = { topic: topicSel.value, to: toSel.value, apply };
    if (!valueIn.hidden) {
      const v = valueIn.value.trim();
      b.value = toSel.value === "timestamp" && !/^\d+$/.test(v) ? Date.parse(v) : Number(v);
      if (v === "" || !Number.isFinite(b.value)) throw new ApiError(422, { message: `enter a value for ${toSel.value}` });
    }
    return b;
  };
  const show = (r, applied) => {
    result.innerHTML = `<table id="reset-table"><thead><tr><th>Topic</th><th class="num">Partition</th>
      <th class="num">Current</th><th></th><th class="num">New</th><th class="num">Log start</th><th class="num">High watermark</th></tr></thead>
      <tbody>${r.partitions.map((p) => `<tr data-partition="${p.partition}"><td>${esc(p.topic)}</td><td class="num">${p.partition}</td>
      <td class="num current">${p.current ?? "–"}</td><td>→</td><td class="num new">${p.new}</td>
      <td class="num">${p.log_start_offset}</td><td class="num">${p.high_watermark}</td></tr>`).join("")}</tbody></table>
      <p id="reset-status" class="muted">${applied ? "Applied: the new offsets are committed."
        : "Preview: nothing has changed yet."}</p>${applied ? "" : `<button id="reset-apply">Apply</button>`}`;
    const btn = document.getElementById("reset-apply");
    if (btn) btn.addEventListener("click", () => guarded(async () => {
      const b = { ...r.request, apply: true };
      const done = await api(`/groups/${enc}/offsets/reset`, { method: "POST", body: JSON.stringify(b) });
      show({ ...done, request: b }, true);
      clearError();
    }));
  };
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    guarded(async () => {
      result.innerHTML = "";
      const b = body(false);
      const r = await api(`/groups/${enc}/offsets/reset`, { method: "POST", body: JSON.stringify(b) });
      show({ ...r, request: b }, false);
      clearError();
    });
  });
  document.getElementById("offsets-delete").addEventListener("click", () => {
    const t = topicSel.value;
    if (!t || !confirm(`Delete the committed offsets of group ${id} on topic ${t}?`)) return;
    guarded(async () => {
      await api(`/groups/${enc}/offsets/${encodeURIComponent(t)}`, { method: "DELETE" });
      result.innerHTML = `<p id="reset-status" class="muted">Deleted the offsets of ${esc(id)} on ${esc(t)}.</p>`;
      clearError();
    });
  });
  document.getElementById("group-delete").addEventListener("click", () => {
    if (!confirm(`Delete group ${id} and all its committed offsets?`)) return;
    guarded(async () => {
      await api(`/groups/${enc}`, { method: "DELETE" });
      location.hash = "#/groups";
    });
  });
}

function fmtAge(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7200000) return `${Math.floor(ms / 60000)} min`;
  return `${(ms / 3600000).toFixed(1)} h`;
}

async function transactions() {
  const g = generation;
  view.innerHTML = `<h1>Transactions</h1><div id="txn-summary" class="cards"></div>
    <h2>Open transactions <span class="legend">(oldest first)</span></h2><div id="txns"></div>
    <h2>Partitions held back <span class="legend">(LSO lag: records read_committed consumers
    cannot read yet)</span></h2><div id="lso"></div>`;
  const load = async () => {
    const d = await api("/transactions");
    if (g !== generation) return;
    const held = d.lagging_partitions.reduce((s, r) => s + r.lso_lag, 0);
    document.getElementById("txn-summary").innerHTML = [["Open", d.open.length],
      ["Known transactional ids", d.total], ["Partitions held back", d.lagging_partitions.length],
      ["Records held back", held]].map(([l, v]) =>
      `<div class="card"><div class="label">${esc(l)}</div><div class="value">${esc(v)}</div></div>`).join("");
    const parts = (ps) => ps.map((p) => `<span class="tp">${esc(`${p.topic}-${p.partition}`)}` +
      ` <span class="lag" title="LSO lag">${p.lso_lag ?? "–"}</span></span>`).join(", ");
    document.getElementById("txns").innerHTML = d.open.length ? `<table id="txn-table"><thead><tr>
      <th>Transactional id</th><th>State</th><th class="num">Producer</th><th class="num">Age</th>
      <th class="num">Timeout</th><th>Partitions (LSO lag)</th></tr></thead><tbody>${d.open.map((t) =>
      `<tr data-txn="${esc(t.transactional_id)}"><td>${esc(t.transactional_id)}</td><td>${esc(t.state)}</td>
      <td class="num">${t.producer_id}/${t.producer_epoch}</td><td class="num age">${fmtAge(t.age_ms)}</td>
      <td class="num">${fmtMs(t.timeout_ms)}</td><td>${parts(t.partitions)}</td></tr>`).join("")}</tbody></table>`
      : `<p class="muted">No open transactions.</p>`;
    document.getElementById("lso").innerHTML = d.lagging_partitions.length ? `<table id="lso-table"><thead><tr>
      <th>Topic</th><th class="num">Partition</th><th class="num">High watermark</th>
      <th class="num">Last stable offset</th><th class="num">LSO lag</th></tr></thead><tbody>${d.lagging_partitions.map((r) =>
      `<tr data-tp="${esc(`${r.topic}-${r.partition}`)}"><td>${esc(r.topic)}</td><td class="num">${r.partition}</td>
      <td class="num">${r.high_watermark}</td><td class="num">${r.last_stable_offset}</td>
      <td class="num lag">${r.lso_lag}</td></tr>`).join("")}</tbody></table>`
      : `<p class="muted">Every partition is readable up to its high watermark.</p>`;
    enhance("txns");
    enhance("lso");
    clearError();
  };
  await guarded(load);
  every(3000, () => guarded(load));
}

// ------------------------------------------------------------------ security (ACLs, users)

// Who the console acts as, and whether the cluster lets it see ACLs and users (DESCRIBE on
// the cluster): the ACL and user pages are offered only then. The cluster decides, not us.
let me = null;
async function whoami() {
  try { me = await api("/whoami"); } catch { me = null; }
  const allowed = !!(me && me.security_visible);
  document.querySelectorAll("[data-security]").forEach((a) => { a.hidden = !allowed; });
  document.getElementById("whoami").textContent = me ? me.principal : "";
}

const ACL_TYPES = ["TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"];
const ACL_OPS = ["ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
  "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"];
const options = (xs) => xs.map((x) => `<option>${x}</option>`).join("");

async function acls() {
  const g = generation;
  view.innerHTML = `<h1>ACLs</h1>
    <div class="panel"><form id="acl-add" class="row">
      <label>Principal <input name="principal" required placeholder="User:alice"></label>
      <label>Permission <select name="permission_type">${options(["ALLOW", "DENY"])}</select></label>
      <label>Operation <select name="operation">${options(ACL_OPS)}</select></label>
      <label>Resource <select name="resource_type">${options(ACL_TYPES)}</select></label>
      <label>Name <input name="resource_name" placeholder="orders (or * for all)"></label>
      <label>Pattern <select name="pattern_type">${options(["LITERAL", "PREFIXED"])}</select></label>
      <label>Host <input name="host" value="*" style="width:110px"></label>
      <button type="submit">Add ACL</button></form></div>
    <div id="acl-enforcement"></div>
    <h2>All ACLs</h2><div id="acl-list"><p class="muted">Loading…</p></div>`;
  // Without an authorizer the cluster checks no ACL at all: say so, not just "No ACLs."
  let enforced = null;
  const load = async () => {
    const [d, authz] = await Promise.all([api("/acls"),
      api("/authorizer").catch(() => ({ enforced: null }))]);
    if (g !== generation) return;
    enforced = authz.enforced;
    document.getElementById("acl-enforcement").innerHTML = enforced === false
      ? `<div class="panel notice" id="acls-not-enforced"><b>ACLs are not enforced.</b> The cluster has no
        authorizer (<code>authorizer.class.name</code> is empty), so every client may do everything
        and the ACLs below are not checked. Set <code>authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer</code>
        (and <code>super.users</code>) on the brokers to enforce them.</div>` : "";
    const box = document.getElementById("acl-list");
    box.innerHTML = d.acls.length ? `<table id="acls-table"><thead><tr><th>Principal</th>
      <th>Permission</th><th>Operation</th><th>Resource</th><th>Name</th><th>Pattern</th>
      <th>Host</th><th></th></tr></thead><tbody>${d.acls.map((a, i) => `<tr data-acl="${esc(
        `${a.principal} ${a.permission_type} ${a.operation} ${a.resource_type}:${a.resource_name}`)}">
      <td>${esc(a.principal)}</td><td class="perm-${esc(a.permission_type)}">${esc(a.permission_type)}</td>
      <td>${esc(a.operation)}</td><td>${esc(a.resource_type)}</td><td>${esc(a.resource_name)}</td>
      <td>${esc(a.pattern_type)}</td><td>${esc(a.host)}</td>
      <td><button class="danger" data-remove="${i}">Remove</button></td></tr>`).join("")}</tbody></table>`
      : `<p class="muted" id="acls-empty">${enforced === false ? "No ACLs (and none would be checked: no authorizer)."
        : "No ACLs."}</p>`;
    enhance("acl-list");
    box.querySelectorAll("[data-remove]").forEach((b) => b.addEventListener("click", () => {
      const a = d.acls[Number(b.dataset.remove)];
      if (!confirm(`Remove ${a.permission_type} ${a.operation} on ${a.resource_type} ${a.resource_name} for ${a.principal}?`)) return;
      guarded(async () => { await api("/acls", { method: "DELETE", body: JSON.stringify(a) }); await load(); });
    }));
    clearError();
  };
  document.getElementById("acl-add").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = ev.target;
    guarded(async () => {
      await api("/acls", { method: "POST", body: JSON.stringify({
        principal: f.principal.value.trim(), permission_type: f.permission_type.value,
        operation: f.operation.value, resource_type: f.resource_type.value,
        resource_name: f.resource_type.value === "CLUSTER" ? "kafka-cluster" : f.resource_name.value.trim(),
        pattern_type: f.pattern_type.value, host: f.host.value.trim() || "*" }) });
      clearError();
      await load();
    });
  });
  await guarded(load);
}

async function users() {
  const g = generation;
  view.innerHTML = `<h1>Users</h1>
    <p class="muted">SCRAM credentials kept by the cluster (KIP-554). Passwords are never shown:
      the cluster stores salted keys only.</p>
    <div class="panel"><form id="user-add" class="row" autocomplete="off">
      <label>Name <input name="name" required placeholder="alice"></label>
      <label>Password <input name="password" type="password" required autocomplete="new-password"></label>
      <label>Mechanism <select name="mechanism">${options(["SCRAM-SHA-512", "SCRAM-SHA-256"])}</select></label>
      <label>Iterations <input name="iterations" type="number" min="4096" max="16384" value="8192" style="width:100px"></label>
      <button type="submit">Create / set password</button></form></div>
    <h2>SCRAM users</h2><div id="user-list"><p class="muted">Loading…</p></div>`;
  const load = async () => {
    const d = await api("/users");
    if (g !== generation) return;
    const box = document.getElementById("user-list");
    box.innerHTML = d.users.length ? `<table id="users-table"><thead><tr><th>User</th>
      <th>Credentials</th><th></th></tr></thead><tbody>${d.users.map((u) => `<tr data-user="${esc(u.name)}">
      <td>${esc(u.name)}</td><td>${u.credentials.map((c) => esc(`${c.mechanism} (${c.iterations} iterations)`)).join(", ")}</td>
      <td><button class="danger" data-delete-user="${esc(u.name)}">Delete</button></td></tr>`).join("")}</tbody></table>`
      : `<p class="muted">No SCRAM users.</p>`;
    enhance("user-list");
    box.querySelectorAll("[data-delete-user]").forEach((b) => b.addEventListener("click", () => {
      const name = b.dataset.deleteUser;
      if (!confirm(`Delete every SCRAM credential of ${name}?`)) return;
      guarded(async () => { await api(`/users/${encodeURIComponent(name)}`, { method: "DELETE" }); await load(); });
    }));
    clearError();
  };
  document.getElementById("user-add").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = ev.target;
    guarded(async () => {
      await api("/users", { method: "POST", body: JSON.stringify({
        name: f.name.value.trim(), password: f.password.value, mechanism: f.mechanism.value,
        iterations: Number(f.iterations.value) }) });
      f.password.value = "";
      clearError();
      await load();
    });
  });
  await guarded(load);
}

// ------------------------------------------------------------------ one broker

async function brokerPage(id) {
  const g = generation;
  view.innerHTML = `<h1>Broker ${esc(id)}</h1><p id="broker-loading" class="muted">Loading…</p>
    <div id="broker-body" hidden><div id="broker-cards" class="cards"></div>
    <h2>Log directories</h2><div id="log-dirs"></div>
    <h2>Partitions led <span class="legend" id="led-count"></span></h2><div id="led"></div>
    <h2>Partitions followed <span class="legend" id="followed-count"></span></h2><div id="followed"></div>
    <h2>Configuration <span class="legend">(non-default values first)</span></h2><div id="broker-configs"></div></div>`;
  const partTable = (rows, tid) => rows.length ? `<table id="${tid}"><thead><tr><th>Topic</th>
    <th class="num">Partition</th><th>Leader</th><th>Replicas</th><th>ISR</th><th>This broker</th></tr></thead>
    <tbody>${rows.map((r) => `<tr data-tp="${esc(`${r.topic}-${r.partition}`)}" class="${r.in_sync ? "" : "urp"}">
    <td><a href="#/topic/${encodeURIComponent(r.topic)}">${esc(r.topic)}</a></td><td class="num">${r.partition}</td>
    <td>${r.leader < 0 ? "none" : r.leader}</td><td>${r.replicas.join(", ")}</td><td>${r.isr.join(", ")}</td>
    <td>${r.in_sync ? '<span class="ok">in sync</span>' : '<span class="err">out of sync</span>'}</td></tr>`).join("")}</tbody></table>`
    : `<p class="muted">None.</p>`;
  let configsShown = false;
  const load = async () => {
    let b;
    try { b = await api(`/brokers/${encodeURIComponent(id)}`); } catch (e) {
      if (e.status === 404 && g === generation) {
        timers.forEach(clearInterval);
        timers = [];
        view.innerHTML = `<h1>Broker ${esc(id)}</h1><div class="panel" id="broker-missing"><p>Broker
          <b>${esc(id)}</b> is not in this cluster.</p><p><a href="#/">Overview</a></p></div>`;
        return;
      }
      throw e;
    }
    if (g !== generation) return;
    document.getElementById("broker-loading").hidden = true;
    document.getElementById("broker-body").hidden = false;
    const size = b.log_dirs ? b.log_dirs.reduce((n, d) => n + d.size, 0) : null;
    document.getElementById("broker-cards").innerHTML = [
      ["Status", b.online ? "online" : "offline", b.online ? "ok" : "err"],
      ["Address", b.host ? `${b.host}:${b.port}` : "–", "addr"], ["Rack", b.rack ?? "–"],
      ["Role", b.controller ? "controller" : "broker"],
      ["Leaders", b.leaders], ["Replicas", b.replicas],
      ["Out of sync", [...b.led, ...b.followed].filter((r) => !r.in_sync).length],
      ["Size on disk", size === null ? "–" : fmtBytes(size)],
      ["Load", fmtLoad(b.load)],
    ].map(([l, v, cls]) => `<div class="card" data-card="${esc(l)}"><div class="label">${esc(l)}</div>
      <div class="value ${cls || ""}">${esc(v)}</div></div>`).join("");
    document.getElementById("log-dirs").innerHTML = b.log_dirs ? `<table id="log-dirs-table"><thead><tr>
      <th>Path</th><th>Status</th><th class="num">Partitions</th><th class="num">Size</th>
      <th class="num">Usable</th><th class="num">Total</th></tr></thead><tbody>${b.log_dirs.map((d) =>
      `<tr data-log-dir="${esc(d.path)}"><td><code>${esc(d.path)}</code></td>
      <td>${d.error_code ? `<span class="err">error ${d.error_code}</span>` : '<span class="ok">ok</span>'}</td>
      <td class="num">${d.partitions.length}</td><td class="num">${fmtBytes(d.size)}</td>
      <td class="num">${d.usable_bytes < 0 ? "–" : fmtBytes(d.usable_bytes)}</td>
      <td class="num">${d.total_bytes < 0 ? "–" : fmtBytes(d.total_bytes)}</td></tr>`).join("")}</tbody></table>`
      : `<p class="muted">Not known: ${esc(b.errors.log_dirs || "")}</p>`;
    document.getElementById("led-count").textContent = `(${b.led.length})`;
    document.getElementById("followed-count").textContent = `(${b.followed.length})`;
    document.getElementById("led").innerHTML = partTable(b.led, "led-table");
    document.getElementById("followed").innerHTML = partTable(b.followed, "followed-table");
    enhance("log-dirs");
    enhance("led");
    enhance("followed");
    if (!configsShown) {
      const box = document.getElementById("broker-configs");
      if (b.configs) {
        configsShown = true;
        const cs = [...b.configs].sort((x, y) => (x.is_default - y.is_default) || x.name.localeCompare(y.name));
        box.innerHTML = `<table id="broker-configs-table"><thead><tr><th>Name</th><th>Value</th><th>Source</th></tr></thead>
          <tbody>${cs.map((c) => `<tr data-config="${esc(c.name)}" class="${c.is_default ? "" : "non-default"}">
          <td>${esc(c.name)}</td><td class="config-text">${c.sensitive ? '<span class="muted">(sensitive)</span>'
            : c.value === null ? '<span class="muted">null</span>' : esc(c.value)}</td>
          <td class="muted">${c.is_default ? "default" : esc(c.source)}</td></tr>`).join("")}</tbody></table>`;
        enhance("broker-configs");
      } else {
        box.innerHTML = `<p class="muted">Not known: ${esc(b.errors.configs || "")}</p>`;
      }
    }
    clearError();
  };
  await guarded(load);
  if (g === generation && document.getElementById("broker-body")) every(5000, () => guarded(load));
}

// ------------------------------------------------------------------ client quotas

const QUOTA_KEYS = ["producer_byte_rate", "consumer_byte_rate", "request_percentage",
  "controller_mutation_rate"];
const DEFAULT_NAME = "<default>";

function quotaEntity(e) {
  const names = { user: "user", "client-id": "client id", ip: "ip" };
  return Object.entries(e).sort().map(([t, n]) => `${names[t] || t} ${n === null ? DEFAULT_NAME : n}`)
    .join(", ");
}

function fmtQuota(key, v) {
  if (v === undefined) return "–";
  if (key.endsWith("_byte_rate")) return `${fmtBytes(v)}/s`;
  if (key === "request_percentage") return `${v} %`;
  return `${v}/s`;
}

async function quotas() {
  const g = generation;
  view.innerHTML = `<h1>Client quotas</h1>
    <p class="muted">Byte rates and request shares the brokers allow a user, a client id, or both
      (KIP-546). Leave a name empty to leave that part out; <code>${esc(DEFAULT_NAME)}</code> is the
      default for every user or client id without its own.</p>
    <div class="panel"><form id="quota-set" class="row" autocomplete="off">
      <label>User <input name="user" placeholder="alice"></label>
      <label>Client id <input name="client" placeholder="etl"></label>
      <label>Quota <select name="key">${options(QUOTA_KEYS)}</select></label>
      <label>Value <input name="value" required type="number" min="0" step="any" placeholder="1048576" style="width:140px"></label>
      <button type="submit">Set quota</button></form></div>
    <h2>Quotas</h2><div id="quota-list"><p class="muted">Loading…</p></div>`;
  const entityOf = (user, client) => {
    const e = {};
    if (user) e.user = user === DEFAULT_NAME ? null : user;
    if (client) e["client-id"] = client === DEFAULT_NAME ? null : client;
    return e;
  };
  const load = async () => {
    const d = await api("/quotas");
    if (g !== generation) return;
    const box = document.getElementById("quota-list");
    box.innerHTML = d.quotas.length ? `<table id="quotas-table"><thead><tr><th>Entity</th>${
      QUOTA_KEYS.map((k) => `<th class="num">${esc(k)}</th>`).join("")}<th></th></tr></thead>
      <tbody>${d.quotas.map((q, i) => `<tr data-quota="${esc(quotaEntity(q.entity))}"><td>${esc(quotaEntity(q.entity))}</td>${
        QUOTA_KEYS.map((k) => `<td class="num" data-key="${k}" title="${q.quotas[k] ?? ""}">${esc(fmtQuota(k, q.quotas[k]))}</td>`).join("")}
      <td><button class="danger" data-remove-quota="${i}">Remove</button></td></tr>`).join("")}</tbody></table>`
      : `<p class="muted" id="quotas-empty">No quotas: every client may use the brokers as fast as they serve.</p>`;
    enhance("quota-list");
    box.querySelectorAll("[data-remove-quota]").forEach((b) => b.addEventListener("click", () => {
      const q = d.quotas[Number(b.dataset.removeQuota)];
      if (!confirm(`Remove every quota of ${quotaEntity(q.entity)}?`)) return;
      const none = Object.fromEntries(Object.keys(q.quotas).map((k) => [k, null]));
      guarded(async () => {
        await api("/quotas", { method: "POST", body: JSON.stringify({ entity: q.entity, quotas: none }) });
        await load();
      });
    }));
    clearError();
  };
  document.getElementById("quota-set").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = ev.target;
    guarded(async () => {
      const entity = entityOf(f.user.value.trim(), f.client.value.trim());
      if (!Object.keys(entity).length) throw new ApiError(400, { message: "name a user, a client id, or both" });
      await api("/quotas", { method: "POST", body: JSON.stringify({ entity,
        quotas: { [f.key.value]: Number(f.value.value) } }) });
      f.value.value = "";
      clearError();
      await load();
    });
  });
  await guarded(load);
  every(5000, () => guarded(load));
}

const share = shareViews({ api, esc, every, guarded, enhance, clearError, view,
  generation: () => generation });
const moves = reassignViews({ api, esc, every, guarded, enhance, clearError, view,
  generation: () => generation, fmtBytes });

// ------------------------------------------------------------------ router

function route() {
  timers.forEach(clearInterval);
  timers = [];
  generation++;
  listState = new Map();
  clearError();
  const hash = location.hash.replace(/^#/, "") || "/";
  const [, page, arg] = hash.split("/");
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active",
    a.dataset.nav === ({ "": "overview", broker: "overview", topic: "topics", group: "groups", subject: "schemas",
    "share-group": "share-groups" }[page] ?? page)));
  const decoded = arg ? decodeURIComponent(arg) : "";
  if (page === "topics") return topics();
  if (page === "topic" && decoded) return topicPage(decoded);
  if (page === "groups") return groups();
  if (page === "schemas") return guarded(schemas);
  if (page === "subject" && decoded) return guarded(() => subjectPage(decoded));
  if (page === "group" && decoded) return groupPage(decoded);
  if (page === "share-groups") return share.shareGroups();
  if (page === "share-group" && decoded) return share.shareGroupPage(decoded);
  if (page === "transactions") return transactions();
  if (page === "acls") return acls();
  if (page === "users") return users();
  if (page === "quotas") return quotas();
  if (page === "reassignments") return moves.reassignments();
  if (page === "broker" && decoded) return brokerPage(decoded);
  return overview();
}

window.addEventListener("hashchange", route);
pollHealth();
setInterval(pollHealth, 3000);
whoami();
route();
