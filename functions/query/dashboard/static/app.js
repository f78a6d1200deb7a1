// The fleetcast dashboard: follows GET v1/watch (Server-Sent Events read
// with fetch, so that the API's error documents can be shown) and
// GET v1/labels/{key}, and renders clusters and fleets in place. Every URL
// is relative: the page works under whatever path the function is served.

const PAGE_SIZE = 100;
// The server sends a heartbeat event every 15 s: a stream silent for
// longer than this is dead, and is replaced.
const SILENCE_MS = 35000;
const RENDER_EVERY_MS = 100;
const LABELS_AFTER_MS = 1000;
const ANNOUNCE_EVERY_MS = 2000;
const DEFAULTS = { selector: "", cluster: "", namespace: "", sort: "cluster", desc: false, page: 1, label: "version" };
const SORTS = ["cluster", "namespace", "name", "ready", "lag"];

const $ = (id) => document.getElementById(id);

const state = {
  filter: readURL(),
  fleets: new Map(), // id → the API's Fleet
  clusters: new Map(), // name → the API's Cluster
  clusterNames: new Set(), // every cluster heard of, for the cluster filter
  token: "", // resume token: the id of the last event handled
  synced: false,
  conn: null, // the AbortController of the open stream
  lastHeard: 0,
  failures: 0, // connections failed in a row, for the backoff
  retryTimer: 0,
  closing: "", // why the open stream is ending, when the page or server said
  order: null, // fleet ids in display order; null when it must be sorted again
  changed: new Set(), // ids changed since the last render, flashed
  counts: { added: 0, modified: 0, removed: 0 }, // for the live region
  rendered: false, // the first page has been drawn
  renderedWhole: false, // the whole set has been drawn
  // The first page and its count from GET v1/fleets, drawn while the
  // stream sends the whole set: {items, total}, or null.
  preview: null,
};

// ---- the address: the filter lives in it -------------------------------

function readURL() {
  const q = new URLSearchParams(location.search);
  const f = { ...DEFAULTS };
  for (const k of ["selector", "cluster", "namespace", "label"]) {
    if (q.has(k)) f[k] = q.get(k);
  }
  if (SORTS.includes(q.get("sort"))) f.sort = q.get("sort");
  f.desc = q.get("desc") === "1";
  const page = Number.parseInt(q.get("page") || "1", 10);
  f.page = Number.isFinite(page) && page > 0 ? page : 1;
  return f;
}

function writeURL(push) {
  const q = new URLSearchParams();
  const f = state.filter;
  for (const k of ["selector", "cluster", "namespace", "sort", "label"]) {
    if (f[k] !== DEFAULTS[k]) q.set(k, f[k]);
  }
  if (f.desc) q.set("desc", "1");
  if (f.page !== 1) q.set("page", String(f.page));
  const url = location.pathname + (q.toString() ? "?" + q : "");
  if (push) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
}

// watchParams are the stream's: the filter, and the fleets of stale
// clusters too, shown marked rather than hidden.
function watchParams() {
  const q = new URLSearchParams();
  const f = state.filter;
  if (f.selector) q.set("selector", f.selector);
  if (f.cluster) q.set("cluster", f.cluster);
  if (f.namespace) q.set("namespace", f.namespace);
  q.set("includeStale", "true");
  return q;
}

// ---- the stream ---------------------------------------------------------

class APIError extends Error {
  constructor(status, doc) {
    super(doc?.message || `HTTP ${status}`);
    this.status = status;
    this.param = doc?.param || "";
  }
}

async function apiError(res) {
  try {
    const body = await res.json();
    return new APIError(res.status, body.error);
  } catch {
    return new APIError(res.status, null);
  }
}

// connect opens the watch; fresh forgets what is held (a new filter).
function connect(fresh) {
  if (state.conn) state.conn.abort();
  const ac = new AbortController();
  state.conn = ac;
  if (fresh) {
    state.token = "";
    state.fleets.clear();
    state.clusters.clear();
    state.synced = false;
    state.order = null;
    state.changed.clear();
    state.preview = null;
    scheduleRender();
  }
  setConn(state.synced ? "connecting" : "loading", state.synced ? "Reconnecting…" : "Loading…");
  if (!state.synced && !state.preview && previewable()) previewThenFollow(ac);
  else follow(ac);
}

// previewable says whether the page shown is one the API answers in a
// single small request: the first, in its own order (cluster, namespace,
// name: the dashboard's default). Any other waits for the whole set.
function previewable() {
  const f = state.filter;
  return f.sort === "cluster" && !f.desc && f.page === 1;
}

// previewThenFollow draws the first page (GET v1/fleets, a page of 100)
// and the clusters' totals (GET v1/clusters), then opens the stream,
// whose whole set replaces them: a visitor sees what they came for in two
// small answers, not after thousands of events.
async function previewThenFollow(ac) {
  const params = watchParams();
  params.set("pageSize", String(PAGE_SIZE));
  const opts = { signal: ac.signal, cache: "no-store" };
  const clusters = clustersAnswer();
  let res;
  try {
    res = await fetch("v1/fleets?" + params, opts);
  } catch {
    // Aborted (a new filter), or the network: the stream reports it.
    if (state.conn === ac) follow(ac);
    return;
  }
  if (res.status === 400) {
    // The filter is wrong, and the stream would be refused alike: say so
    // where it is typed; retrying cannot help.
    const err = await apiError(res);
    if (state.conn !== ac) return;
    state.conn = null;
    showFilterError(err);
    setConn("error", "The filter is not valid");
    return;
  }
  if (state.conn !== ac) return;
  if (res.ok) {
    try {
      const [list, cl] = await Promise.all([res.json(), clusters]);
      if (state.conn !== ac) return;
      state.preview = { items: list.items || [], total: list.totalSize || 0 };
      for (const c of cl || []) {
        if (state.filter.cluster && c.cluster !== state.filter.cluster) continue;
        state.clusters.set(c.cluster, c);
        addClusterName(c.cluster);
      }
      render();
    } catch {
      if (state.conn !== ac) return; // aborted: the new stream has its own
    }
  }
  // The stream opens once the preview is drawn, so that its thousands of
  // events do not hold the page's thread before the first render; it
  // reports whatever the preview could not show.
  follow(ac);
}

async function follow(ac) {
  const params = watchParams();
  const headers = { Accept: "text/event-stream" };
  if (state.token) headers["Last-Event-ID"] = state.token;
  let reason;
  try {
    const res = await fetch("v1/watch?" + params, { signal: ac.signal, headers, cache: "no-store" });
    if (!res.ok) {
      const err = await apiError(res);
      if (res.status === 400 && err.param === "resumeToken") {
        if (state.conn === ac) connect(true);
        return;
      }
      if (res.status === 400) {
        // The filter is wrong: say so where it is typed; retrying cannot help.
        if (state.conn !== ac) return;
        state.conn = null;
        showFilterError(err);
        setConn("error", "The filter is not valid");
        return;
      }
      throw err;
    }
    clearFilterError();
    state.lastHeard = Date.now();
    await readEvents(res.body, (ev) => {
      if (state.conn !== ac) return;
      state.lastHeard = Date.now();
      handle(ev);
    });
    reason = state.closing || "the stream ended";
  } catch (err) {
    reason = state.closing || err.message;
  }
  if (state.conn !== ac) return; // replaced meanwhile
  state.closing = "";
  state.conn = null;
  retry(reason);
}

// retry reconnects after a delay that doubles with each failure in a row
// (0.5 s to 30 s, jittered), resuming from the last event handled.
function retry(reason) {
  state.failures++;
  const delay = Math.min(30000, 500 * 2 ** Math.min(state.failures - 1, 6)) * (0.75 + Math.random() / 2);
  setConn("disconnected", `Disconnected: ${reason}. Reconnecting in ${Math.ceil(delay / 1000)} s…`);
  clearTimeout(state.retryTimer);
  state.retryTimer = setTimeout(() => {
    if (!state.conn) connect(false);
  }, delay);
}

// readEvents parses a text/event-stream body, calling each with
// {id, event, data} for every event.
async function readEvents(body, each) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replaceAll("\r\n", "\n");
    let start = 0;
    for (let end = buf.indexOf("\n\n", start); end >= 0; end = buf.indexOf("\n\n", start)) {
      const ev = { id: "", event: "message", data: "" };
      const data = [];
      for (const line of buf.slice(start, end).split("\n")) {
        if (line === "" || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "id") ev.id = value;
        else if (field === "event") ev.event = value;
        else if (field === "data") data.push(value);
      }
      ev.data = data.join("\n");
      start = end + 2;
      each(ev);
    }
    buf = buf.slice(start);
  }
}

const fleetID = (f) => `${f.cluster}/${f.namespace}/${f.name}`;

function handle(ev) {
  if (ev.id) state.token = ev.id;
  const data = ev.data ? JSON.parse(ev.data) : {};
  switch (ev.event) {
    case "cluster":
      state.clusters.set(data.cluster, data);
      addClusterName(data.cluster);
      // Staleness hides or shows fleets in the versions view too.
      if (state.synced) scheduleLabels();
      break;
    case "added":
    case "modified": {
      const id = fleetID(data);
      const had = state.fleets.has(id);
      state.fleets.set(id, data);
      if (!had || state.filter.sort === "ready" || state.filter.sort === "lag") state.order = null;
      if (state.synced) {
        state.changed.add(id);
        state.counts[had ? "modified" : "added"]++;
        scheduleLabels();
      }
      break;
    }
    case "removed":
      state.fleets.delete(fleetID(data));
      state.order = null;
      if (state.synced) {
        state.counts.removed++;
        scheduleLabels();
      }
      break;
    case "synced":
      state.synced = true;
      state.preview = null; // the whole set replaces it
      state.failures = 0;
      setConn("live", "Live");
      scheduleLabels(0);
      break;
    case "restart":
      state.preview = null;
      state.fleets.clear();
      state.clusters.clear();
      state.order = null;
      state.synced = false;
      setConn("loading", "Loading…");
      break;
    case "error":
      // The last event: the stream ends after it, and is resumed.
      state.closing = data.message || "the server ended the stream";
      break;
  }
  scheduleRender();
}

// A stream that stopped hearing heartbeats is dead though open: replace it.
setInterval(() => {
  if (state.conn && state.lastHeard && Date.now() - state.lastHeard > SILENCE_MS) {
    state.closing = "no heartbeat for 35 s";
    state.conn.abort();
  }
}, 5000);

// ---- rendering ----------------------------------------------------------

let renderQueued = false;
let lastRender = 0;

function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  setTimeout(() => {
    renderQueued = false;
    lastRender = performance.now();
    render();
  }, Math.max(0, lastRender + RENDER_EVERY_MS - performance.now()));
}

function render() {
  renderClusters();
  renderFleets();
  if ((state.synced || state.preview) && !state.rendered) {
    state.rendered = true;
    performance.mark("fleetcast:first-render");
  }
  if (state.synced && !state.renderedWhole) {
    state.renderedWhole = true;
    performance.mark("fleetcast:whole-set");
  }
  document.body.dataset.fleets = String(state.fleets.size);
  document.body.dataset.synced = String(state.synced);
}

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (k === "dataset") Object.assign(e.dataset, v);
      else if (k === "class") e.className = v;
      else e.setAttribute(k, v);
    }
  }
  for (const c of children) {
    if (c !== null && c !== undefined && c !== false) e.append(c);
  }
  return e;
}

const fmt = new Intl.NumberFormat("en");
const n = (v) => fmt.format(v || 0);
// add sums figures of several fleets or clusters, saturating at the
// largest integer a page can count exactly: one cluster reporting a number
// near int64's limit must not make another's figures meaningless.
const add = (a, b) => Math.min((a || 0) + (b || 0), Number.MAX_SAFE_INTEGER);

function chips(labels) {
  return Object.keys(labels || {})
    .sort()
    .map((k) => el("span", { class: "chip" }, `${k}=${labels[k]}`));
}

function age(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  return `${Math.floor(s / 3600)} h ago`;
}

function renderClusters() {
  const tbody = $("clusters").tBodies[0];
  const names = [...state.clusters.keys()].sort();
  tbody.replaceChildren(
    ...names.map((name) => {
      const c = state.clusters.get(name);
      const t = c.totals || {};
      return el(
        "tr",
        { dataset: { cluster: name, stale: String(!!c.stale) } },
        el("th", { scope: "row" }, name, " ", el("span", { class: c.stale ? "badge stale" : "badge fresh" }, c.stale ? "stale" : "live")),
        el("td", null, ...chips(c.labels)),
        el("td", { dataset: { heartbeat: c.heartbeatAt }, title: c.heartbeatAt }, age(Date.now() - Date.parse(c.heartbeatAt))),
        el("td", { class: "num", dataset: { col: "fleets" } }, n(c.fleetCount)),
        el("td", { class: "num" }, n(t.readyReplicas)),
        el("td", { class: "num" }, n(t.allocatedReplicas)),
        el("td", { class: "num" }, n(t.reservedReplicas)),
        el("td", { class: "num" }, n(t.replicas)),
      );
    }),
  );
  $("clusters-empty").hidden = names.length > 0 || !state.synced;
}

setInterval(() => {
  for (const td of document.querySelectorAll("td[data-heartbeat]")) {
    td.textContent = age(Date.now() - Date.parse(td.dataset.heartbeat));
  }
}, 1000);

const COMPARE = {
  cluster: (a, b) => cmp(a.cluster, b.cluster) || cmp(a.namespace, b.namespace) || cmp(a.name, b.name),
  namespace: (a, b) => cmp(a.namespace, b.namespace) || COMPARE.cluster(a, b),
  name: (a, b) => cmp(a.name, b.name) || COMPARE.cluster(a, b),
  ready: (a, b) => a.readyReplicas - b.readyReplicas || COMPARE.cluster(a, b),
  lag: (a, b) => a.lagMillis - b.lagMillis || COMPARE.cluster(a, b),
};

function cmp(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

function sortedIDs() {
  if (!state.order) {
    const by = COMPARE[state.filter.sort];
    const sign = state.filter.desc ? -1 : 1;
    const fleets = [...state.fleets.values()].sort((a, b) => sign * by(a, b));
    state.order = fleets.map(fleetID);
  }
  return state.order;
}

const rows = new Map(); // id → {tr, fleet}: the rows of the page shown

function renderFleets() {
  if (!state.synced) {
    // The initial set is still arriving: count it, and sort it once, when
    // it is whole, rather than again at every render while it comes. The
    // first page, when the API answered it, is shown meanwhile.
    const p = state.preview;
    if (!p) {
      $("summary").textContent = `Loading… ${n(state.fleets.size)} fleets so far.`;
      return;
    }
    drawRows(p.items.map((f) => [fleetID(f), f]));
    $("summary").textContent = `${n(p.total)} fleets matching; loading them all for the sums and the other pages… ${n(state.fleets.size)} so far.`;
    $("page-info").textContent = p.total
      ? `Fleets 1–${n(p.items.length)} of ${n(p.total)}, page 1 of ${n(Math.max(1, Math.ceil(p.total / PAGE_SIZE)))}`
      : "No fleet matches.";
    $("prev").disabled = true;
    $("next").disabled = true;
    return;
  }
  const ids = sortedIDs();
  const pages = Math.max(1, Math.ceil(ids.length / PAGE_SIZE));
  const page = Math.min(state.filter.page, pages);
  const from = (page - 1) * PAGE_SIZE;
  const shown = ids.slice(from, from + PAGE_SIZE);
  drawRows(shown.map((id) => [id, state.fleets.get(id)]));

  for (const th of $("fleets").tHead.rows[0].cells) {
    const key = th.dataset.sort;
    if (!key) continue;
    if (key === state.filter.sort) th.setAttribute("aria-sort", state.filter.desc ? "descending" : "ascending");
    else th.removeAttribute("aria-sort");
  }
  let ready = 0;
  let stale = 0;
  for (const f of state.fleets.values()) {
    if (f.stale) stale++;
    else ready = add(ready, f.readyReplicas);
  }
  $("summary").textContent =
    `${n(ids.length)} fleets matching, ${n(ready)} ready replicas in those of live clusters` +
    (stale ? `; ${n(stale)} in stale clusters.` : ".");
  $("page-info").textContent = ids.length
    ? `Fleets ${n(from + 1)}–${n(from + shown.length)} of ${n(ids.length)}, page ${n(page)} of ${n(pages)}`
    : "No fleet matches.";
  $("prev").disabled = page <= 1;
  $("next").disabled = page >= pages;
}

// drawRows shows [id, fleet] pairs as the table's rows, reusing the row of
// a fleet already shown and flashing those changed since the last render.
function drawRows(entries) {
  const keep = new Set(entries.map(([id]) => id));
  for (const id of rows.keys()) {
    if (!keep.has(id)) rows.delete(id);
  }
  const trs = entries.map(([id, f]) => {
    let r = rows.get(id);
    if (!r) {
      r = { tr: el("tr", { dataset: { id } }), fleet: null };
      rows.set(id, r);
    }
    if (r.fleet !== f) {
      fillRow(r.tr, f);
      if (r.fleet && state.changed.has(id)) {
        r.tr.classList.remove("changed");
        void r.tr.offsetWidth; // restart the highlight
        r.tr.classList.add("changed");
      }
      r.fleet = f;
    }
    return r.tr;
  });
  state.changed.clear();
  $("fleets").tBodies[0].replaceChildren(...trs);
}

function capacities(m) {
  return Object.keys(m || {})
    .sort()
    .map((k) => el("div", { class: "chip", title: `${m[k].count} of ${m[k].capacity} used` }, `${k}: ${n(m[k].available)} free of ${n(m[k].capacity)}`));
}

// rollout describes a fleet's rollout: complete, rolling (what the current
// set runs of the desired replicas, what the old sets still run), or a
// dash while it is unknown (no set seen yet, or an older publisher).
function rollout(f) {
  const r = f.rollout;
  if (!r) return [el("span", { class: "muted", title: "no GameServerSet seen yet, or a publisher older than rollouts" }, "—")];
  if (r.complete) return [el("span", { class: "badge fresh", title: r.sets.map((s) => s.name).join(", ") }, "complete")];
  let running = 0;
  let old = 0;
  let current = "";
  for (const s of r.sets) {
    if (s.current) {
      running = add(add(s.readyReplicas, s.reservedReplicas), s.allocatedReplicas);
      current = s.name;
    } else old = add(old, s.replicas);
  }
  return [
    el("span", { class: "badge rolling", title: current ? `current set ${current}` : "no set runs the fleet's template yet" }, "rolling"),
    ` ${n(running)} of ${n(f.replicas)} new · ${n(old)} old`,
  ];
}

// autoscalers lists a fleet's FleetAutoscalers: policy, desired against
// current replicas, and whether it is limited or unable to scale.
function autoscalers(f) {
  const as = f.autoscalers || [];
  if (!as.length) return [el("span", { class: "muted" }, "—")];
  const out = as.map((a) => {
    const p = a.policy;
    const policy = [p.type, p.bufferSize, p.key].filter(Boolean).join(" ");
    const title = [`${a.name}`, p.webhookHost && `calls ${p.webhookHost}`, a.lastScaleTime && `last scaled ${a.lastScaleTime}`].filter(Boolean).join(" · ");
    const chip = el("div", { class: "chip", title }, `${policy}: ${n(a.desiredReplicas)} desired of ${n(a.currentReplicas)}`);
    if (a.scalingLimited) chip.append(" ", el("span", { class: "badge degraded" }, "limited"));
    if (!a.ableToScale) chip.append(" ", el("span", { class: "badge stale" }, "unable"));
    return chip;
  });
  if (as.length > 1) out.unshift(el("span", { class: "badge degraded", title: "several FleetAutoscalers target this fleet and fight over it" }, `${as.length} autoscalers`));
  return out;
}

function fillRow(tr, f) {
  const total = Math.max(f.replicas, add(add(f.readyReplicas, f.allocatedReplicas), f.reservedReplicas), 1);
  const bar = el("div", { class: "bar", "aria-hidden": "true" });
  for (const [cls, v] of [["ready", f.readyReplicas], ["allocated", f.allocatedReplicas], ["reserved", f.reservedReplicas]]) {
    const s = el("span", { class: cls });
    s.style.width = `${(100 * v) / total}%`;
    bar.append(s);
  }
  const marks = [];
  if (f.stale) marks.push(el("span", { class: "badge stale", title: "its cluster sent no heartbeat for too long" }, "stale"));
  if (f.degraded) marks.push(el("span", { class: "badge degraded", title: f.degraded }, "degraded"));
  tr.replaceChildren(
    el("td", { dataset: { col: "cluster" } }, f.cluster),
    el("td", { dataset: { col: "namespace" } }, f.namespace),
    el("th", { scope: "row", dataset: { col: "name" } }, f.name),
    el("td", { dataset: { col: "labels" } }, ...chips(f.labels)),
    el(
      "td",
      { dataset: { col: "replicas" } },
      el(
        "div",
        { class: "replicas-text" },
        el("span", { dataset: { col: "ready" } }, n(f.readyReplicas)),
        " ready · ",
        el("span", { dataset: { col: "allocated" } }, n(f.allocatedReplicas)),
        " allocated · ",
        el("span", { dataset: { col: "reserved" } }, n(f.reservedReplicas)),
        ` reserved of ${n(f.replicas)}`,
      ),
      bar,
    ),
    el("td", { dataset: { col: "counters" } }, ...capacities(f.counters)),
    el("td", { dataset: { col: "lists" } }, ...capacities(f.lists)),
    el("td", { dataset: { col: "rollout" } }, ...rollout(f)),
    el("td", { dataset: { col: "autoscalers" } }, ...autoscalers(f)),
    el("td", { class: "num", dataset: { col: "lag" } }, `${n(f.lagMillis)} ms`),
    el("td", { dataset: { col: "state" } }, ...(marks.length ? marks : ["ok"])),
  );
}

// ---- announcements for screen readers -----------------------------------

setInterval(() => {
  const c = state.counts;
  const parts = [];
  if (c.added) parts.push(`${c.added} added`);
  if (c.modified) parts.push(`${c.modified} changed`);
  if (c.removed) parts.push(`${c.removed} removed`);
  if (!parts.length) return;
  state.counts = { added: 0, modified: 0, removed: 0 };
  $("announce").textContent = `Fleets: ${parts.join(", ")}.`;
}, ANNOUNCE_EVERY_MS);

// ---- the connection's state ----------------------------------------------

function setConn(kind, text) {
  const p = $("conn");
  p.dataset.state = kind;
  p.textContent = text;
}

function showFilterError(err) {
  const field = { selector: "selector", cluster: "cluster", namespace: "namespace" }[err.param] || "selector";
  for (const id of ["selector", "cluster", "namespace"]) {
    if (id === field) $(id).setAttribute("aria-invalid", "true");
    else $(id).removeAttribute("aria-invalid");
  }
  const p = $("selector-error");
  p.textContent = err.message;
  p.hidden = false;
  state.fleets.clear();
  state.order = null;
  scheduleRender();
}

function clearFilterError() {
  for (const id of ["selector", "cluster", "namespace"]) $(id).removeAttribute("aria-invalid");
  $("selector-error").hidden = true;
  $("selector-error").textContent = "";
}

// ---- the cluster filter's choices -----------------------------------------

function addClusterName(name) {
  if (state.clusterNames.has(name)) return;
  state.clusterNames.add(name);
  const select = $("cluster");
  const names = [...state.clusterNames].sort();
  const before = names[names.indexOf(name) + 1];
  const option = el("option", { value: name }, name);
  const next = before && [...select.options].find((o) => o.value === before);
  select.insertBefore(option, next || null);
}

async function loadClusterNames() {
  // On failure, none: the stream names them too, and reports its own.
  for (const c of (await clustersAnswer()) || []) addClusterName(c.cluster);
}

let clustersInFlight = null;

// clustersAnswer resolves to GET v1/clusters' items, or null when it
// fails; the callers while one request is under way share it.
function clustersAnswer() {
  clustersInFlight ??= fetch("v1/clusters", { cache: "no-store" })
    .then((r) => (r.ok ? r.json() : null))
    .then((body) => body?.items || null)
    .catch(() => null)
    .finally(() => {
      clustersInFlight = null;
    });
  return clustersInFlight;
}

// ---- which versions run where ---------------------------------------------

const labels = { timer: 0, running: false, again: false, etag: "", key: "" };

function scheduleLabels(delay = LABELS_AFTER_MS) {
  if (labels.timer) return;
  labels.timer = setTimeout(() => {
    labels.timer = 0;
    loadLabels();
  }, delay);
}

async function loadLabels() {
  if (labels.running) {
    labels.again = true;
    return;
  }
  const key = state.filter.label;
  $("label").value = key;
  if (!key) {
    $("versions").tBodies[0].replaceChildren();
    return;
  }
  labels.running = true;
  try {
    if (labels.key !== key) labels.etag = "";
    const headers = labels.etag ? { "If-None-Match": labels.etag } : {};
    const res = await fetch("v1/labels/" + encodeURIComponent(key), { headers, cache: "no-store" });
    if (res.status === 304) return;
    const error = $("label-error");
    if (res.status === 400) {
      const err = await apiError(res);
      error.textContent = err.message;
      error.hidden = false;
      $("label").setAttribute("aria-invalid", "true");
      return;
    }
    if (!res.ok) return; // the connection's state says why; fetched again once the stream is back
    error.hidden = true;
    $("label").removeAttribute("aria-invalid");
    labels.key = key;
    labels.etag = res.headers.get("ETag") || "";
    renderVersions(await res.json());
  } catch {
    // A failed fetch is tried again at the next change.
  } finally {
    labels.running = false;
    if (labels.again) {
      labels.again = false;
      scheduleLabels();
    }
  }
}

function renderVersions(answer) {
  const tbody = $("versions").tBodies[0];
  tbody.replaceChildren(
    ...answer.values.map((v) =>
      el(
        "tr",
        { dataset: { value: v.value } },
        el("th", { scope: "row" }, v.value),
        el("td", { class: "num", dataset: { col: "fleets" } }, n(v.fleets)),
        el("td", { class: "num", dataset: { col: "ready" } }, n(v.readyReplicas)),
        el("td", { class: "num" }, n(v.allocatedReplicas)),
        el("td", null, ...v.clusters.map((c) => el("span", { class: "chip" }, c))),
      ),
    ),
  );
  $("versions-empty").hidden = answer.values.length > 0;
}

// ---- controls ---------------------------------------------------------------

function showFilter() {
  $("selector").value = state.filter.selector;
  $("namespace").value = state.filter.namespace;
  if (state.filter.cluster) addClusterName(state.filter.cluster);
  $("cluster").value = state.filter.cluster;
  $("label").value = state.filter.label;
}

$("filter").addEventListener("submit", (e) => {
  e.preventDefault();
  state.filter.selector = $("selector").value.trim();
  state.filter.cluster = $("cluster").value;
  state.filter.namespace = $("namespace").value.trim();
  state.filter.page = 1;
  writeURL(true);
  connect(true);
});

$("fleets").tHead.addEventListener("click", (e) => {
  const th = e.target.closest("th[data-sort]");
  if (!th) return;
  const key = th.dataset.sort;
  state.filter.desc = state.filter.sort === key ? !state.filter.desc : false;
  state.filter.sort = key;
  state.filter.page = 1;
  state.order = null;
  writeURL(false);
  scheduleRender();
});

for (const [id, step] of [["prev", -1], ["next", 1]]) {
  $(id).addEventListener("click", () => {
    state.filter.page = Math.max(1, state.filter.page + step);
    writeURL(false);
    scheduleRender();
  });
}

$("versions-form").addEventListener("submit", (e) => {
  e.preventDefault();
  state.filter.label = $("label").value.trim();
  writeURL(true);
  loadLabels();
});

window.addEventListener("popstate", () => {
  const was = watchParams().toString();
  state.filter = readURL();
  showFilter();
  if (watchParams().toString() !== was) connect(true);
  else scheduleRender();
  loadLabels();
});

showFilter();
loadClusterNames();
connect(true);
