// The Seaway console: one page, tabs by URL fragment, every number from /api/v1/console.
// Pages refresh every few seconds without a reload; charts are uPlot (shipped in the package).
"use strict";

const API = "/api/v1/console";
const state = { session: null, tab: "platform", cluster: null, overview: null, plots: {}, timer: null,
                action: null, actionLines: 0, following: false, followTimer: null, refreshMs: 5000,
                // Aborted on logout or a lost session, so that no request of the old session is
                // answered 401 after the page has moved on.
                requests: new AbortController() };

// ------------------------------------------------------------------ helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, options) {
  const opts = Object.assign({ headers: {} }, options || {});
  if (opts.body !== undefined) {
    opts.method = opts.method || "POST";
    opts.headers["Content-Type"] = "application/json";
    opts.headers["X-Seaway-Console"] = "1";
    opts.body = JSON.stringify(opts.body);
  }
  opts.signal = state.requests.signal;
  const res = await fetch(API + path, opts);
  let body = null;
  try { body = await res.json(); } catch (e) { body = { error: res.statusText }; }
  if (res.status === 401 && path !== "/login") { showLogin(); throw new Error(body.error); }
  if (!res.ok) { const err = new Error(body.error || res.statusText); err.status = res.status; throw err; }
  return body;
}

const UNITS = ["", "K", "M", "G", "T", "P"];
function fmtBytes(v) {
  if (v === null || v === undefined) return "–";
  let i = 0; let x = Math.abs(v);
  while (x >= 1024 && i < UNITS.length - 1) { x /= 1024; i++; }
  return (v < 0 ? "-" : "") + (x >= 100 || i === 0 ? x.toFixed(0) : x.toFixed(1)) + " " + UNITS[i] + "B";
}
function fmtNum(v, digits) {
  if (v === null || v === undefined) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  if (a === 0 || a >= 100) return v.toFixed(0);
  return v.toFixed(digits === undefined ? (a < 1 ? 3 : 1) : digits);
}
function fmtSeconds(v) {
  if (v === null || v === undefined) return "–";
  if (v === 0) return "0 s";
  if (v < 1) return (v * 1000).toFixed(v < 0.01 ? 2 : 0) + " ms";
  if (v < 120) return v.toFixed(1) + " s";
  if (v < 7200) return (v / 60).toFixed(1) + " min";
  return (v / 3600).toFixed(1) + " h";
}
function fmtUnit(unit, v) {
  if (v === null || v === undefined) return "–";
  if (unit === "B") return fmtBytes(v);
  if (unit === "B/s") return fmtBytes(v) + "/s";
  if (unit === "s") return fmtSeconds(v);
  if (unit === "/s") return fmtNum(v) + "/s";
  return fmtNum(v, 0);
}
function fmtTime(t) { return t ? new Date(t * 1000).toLocaleString() : "–"; }
function ago(t) {
  if (!t) return "–";
  const s = Date.now() / 1000 - t;
  return s < 90 ? `${s.toFixed(0)} s ago` : s < 5400 ? `${(s / 60).toFixed(0)} min ago` : `${(s / 3600).toFixed(1)} h ago`;
}
const WORDS = { ok: "OK", warn: "DEGRADED", bad: "PROBLEM" };
function badge(health) { return h("span", { class: `badge ${health}` }, WORDS[health] || health); }
function dot(health) { return h("span", { class: `dot ${health}` }); }
function banner(text) {
  const el = document.getElementById("banner");
  el.hidden = !text; el.textContent = text || "";
}
function table(headers, rows) {
  return h("table", {}, h("thead", {}, h("tr", {}, headers.map(([label, cls]) => h("th", { class: cls }, label)))),
           h("tbody", {}, rows));
}

// ------------------------------------------------------------------ session and tabs

function showLogin() {
  document.querySelectorAll("section.tab").forEach(s => { s.hidden = true; });
  document.getElementById("login").hidden = false;
  document.getElementById("tabs").hidden = true;
  state.session = null;
  clearTimeout(state.timer);
  clearTimeout(state.followTimer);
  state.requests.abort();
  state.requests = new AbortController();
}

async function login(ev) {
  ev.preventDefault();
  const form = ev.target;
  const out = document.getElementById("login-error");
  out.textContent = "";
  try {
    await api("/login", { body: { user: form.user.value, password: form.password.value } });
    form.password.value = "";
    document.getElementById("login").hidden = true;
    await start();
  } catch (e) { out.textContent = e.message; }
}

async function logout() {
  showLogin();      // first: nothing of this session is still asking once it has ended
  await api("/logout", { body: {} }).catch(() => {});
}

function showSession() {
  const s = state.session;
  const el = document.getElementById("whoami");
  el.replaceChildren();
  el.append(s.security ? `${s.user}${s.may_act ? " (may act)" : " (read only)"}` : "security off");
  if (s.security) el.append(h("button", { onclick: logout, id: "logout" }, "Log out"));
}

function route() {
  const [tab, arg] = (location.hash.replace(/^#/, "") || "platform").split("/");
  state.tab = ["platform", "cluster", "replication", "dr", "drills", "growth", "alerts"].includes(tab) ? tab : "platform";
  if (state.tab === "cluster" && arg) state.cluster = decodeURIComponent(arg);
  document.querySelectorAll("section.tab").forEach(s => { s.hidden = s.id !== state.tab; });
  document.querySelectorAll("#tabs a").forEach(a => a.classList.toggle("active", a.dataset.tab === state.tab));
  refresh();
}

async function refresh() {
  clearTimeout(state.timer);
  try {
    state.overview = await api("/overview");
    banner(state.overview.error ? `The console cannot read the platform's metrics: ${state.overview.error}` : "");
    const n = state.overview.alerts.firing;
    document.getElementById("alert-count").textContent = n ? String(n) : "";
    await RENDER[state.tab]();
    document.getElementById("footer").textContent =
      `Updated ${new Date(state.overview.at * 1000).toLocaleTimeString()} · ` +
      (state.overview.mode === "prometheus" ? "charts and alerts from Prometheus" :
       "charts and alerts from the console's own scrapes (the last hour)") + ` · refreshes every ${state.refreshMs / 1000} s`;
  } catch (e) {
    if (e.name === "AbortError") return;
    if (e.status !== undefined || !(e instanceof TypeError)) banner(e.message);
    else banner("The console does not answer: is dr serve running?");
  }
  if (state.session) state.timer = setTimeout(refresh, state.refreshMs);
}

// ------------------------------------------------------------------ platform

function renderPlatform() {
  const el = document.getElementById("platform");
  const o = state.overview;
  const content = [];
  const p = o.platform;
  const worst = p.health;
  content.push(h("div", { class: "card", id: "platform-summary" }, h("h2", {}, "Platform ", badge(worst)),
    h("div", { class: "facts" },
      h("div", {}, h("span", {}, "regions"), p.regions.length),
      h("div", {}, h("span", {}, "clusters"), p.regions.reduce((n, r) => n + r.clusters.length, 0)),
      h("div", {}, h("span", {}, "alerts firing"), o.alerts.firing),
      h("div", {}, h("span", {}, "pending"), o.alerts.pending))));
  const regions = [];
  for (const region of p.regions) {
    const pair = o.pairs.find(x => x.active_region === region.name);
    regions.push(h("div", { class: "region", "data-region": region.name },
      h("h2", {}, `Region ${region.name}`, badge(region.health), pair ? h("span", { class: "muted" }, `active for ${pair.pair}`) : null),
      region.problems.length ? h("ul", { class: "problems" }, region.problems.map(w => h("li", { class: "bad" }, w))) : null,
      h("div", { class: "clusters" }, region.clusters.map(renderCluster))));
  }
  content.push(h("div", { class: "regions" }, regions));
  if (o.links.length) content.push(h("div", { class: "card" }, h("h2", {}, "Replication between regions"), linksTable(o.links)));
  if (o.pairs.length) content.push(h("div", { class: "card" }, h("h2", {}, "DR pairs"), pairsTable(o.pairs)));
  el.replaceChildren(...content);
}

function renderCluster(c) {
  const part = c.partitions;
  const ctl = c.controller;
  return h("div", { class: `card cluster ${c.health}`, "data-cluster": c.name, "data-health": c.health },
    h("h2", {}, h("a", { href: `#cluster/${encodeURIComponent(c.name)}` }, c.name), badge(c.health)),
    c.problems.length ? h("ul", { class: "problems" }, c.problems.map(w => h("li", { class: c.health }, w)))
                      : h("p", { class: "muted" }, "No problem seen."),
    h("div", { class: "facts" },
      h("div", {}, h("span", {}, "active controller"), ctl ? `node ${ctl.leader} (★), epoch ${ctl.epoch}` : "none"),
      h("div", {}, h("span", {}, "quorum lag"), c.quorum_lag === null ? "–" : `${c.quorum_lag} records`),
      h("div", {}, h("span", {}, "brokers"), c.brokers.active === null ? "–" : `${c.brokers.active} unfenced, ${c.brokers.fenced} fenced`),
      h("div", {}, h("span", {}, "offline"), part.offline),
      h("div", {}, h("span", {}, "under-replicated"), part.under_replicated),
      h("div", {}, h("span", {}, "under min ISR"), part.under_min_isr),
      h("div", {}, h("span", {}, "at min ISR"), part.at_min_isr)),
    table([["node"], ["rack"], ["status"], ["leaders", "num"], ["replicas", "num"], ["metadata lag", "num"],
           ["disk used", "num"], ["disk free", "num"]],
      c.nodes.map(n => h("tr", { class: n.health === "ok" ? "" : n.health, "data-node": n.node_id || n.instance, "data-health": n.health },
        h("td", { title: `${n.instance}, roles ${n.roles || "unknown"}` }, dot(n.health),
          n.node_id ? `node ${n.node_id}` : n.instance, n.active_controller ? " ★" : "",
          n.roles && n.roles !== "broker,controller" ? h("span", { class: "muted" }, ` (${n.roles.replace(",", ", ")})`) : null),
        h("td", {}, n.rack || "–"),
        h("td", { class: "status" }, n.up ? (n.problems.length ? n.problems.join("; ") : "up") : "DOWN"),
        h("td", { class: "num" }, fmtNum(n.leaders, 0)), h("td", { class: "num" }, fmtNum(n.replicas, 0)),
        h("td", { class: "num" }, n.metadata_lag === null ? "–" : n.metadata_lag),
        h("td", { class: "num" }, fmtBytes(n.disk_used)), h("td", { class: "num" }, fmtBytes(n.disk_free))))));
}

function linksTable(links) {
  return table([["link"], ["health"], ["lag", "num"], ["lag (s)", "num"], ["RPO target", "num"], ["throughput", "num"],
                ["checkpoint age", "num"], ["errors", "num"], ["why"]],
    links.map(l => h("tr", { class: l.health === "ok" ? "" : l.health, "data-link": l.link },
      h("td", {}, dot(l.health), l.link), h("td", {}, badge(l.health)),
      h("td", { class: "num" }, l.lag_records === null ? "–" : `${fmtNum(l.lag_records, 0)} records`),
      h("td", { class: "num" }, fmtSeconds(l.lag_seconds)), h("td", { class: "num" }, fmtSeconds(l.rpo_target_s)),
      h("td", { class: "num" }, fmtUnit("B/s", l.bytes_per_s)), h("td", { class: "num" }, fmtSeconds(l.checkpoint_age_s)),
      h("td", { class: "num" }, l.errors_per_s === null ? "–" : `${fmtNum(l.errors_per_s, 2)}/s`),
      h("td", {}, l.problems.join("; ") || "within target"))));
}

function pairsTable(pairs) {
  return table([["pair"], ["active region"], ["ready to fail over"], ["RPO at risk", "num"]],
    pairs.map(p => h("tr", { class: p.health === "ok" ? "" : p.health },
      h("td", {}, dot(p.health), p.pair), h("td", {}, p.active_region || `none: ${p.why_none}`),
      h("td", {}, p.ready ? "yes" : "no (see DR)"),
      h("td", { class: "num" }, `${p.rpo_records} records, ${fmtSeconds(p.rpo_seconds)}`))));
}

// ------------------------------------------------------------------ charts

const COLORS = ["#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#0a3069", "#57606a", "#fb8500",
                "#2da44e", "#6639ba", "#e16f24"];

async function renderCharts(page, containerId, query) {
  const data = await api(`/charts/${page}${query || ""}`);
  const container = document.getElementById(containerId);
  const seen = new Set();
  for (const chart of data.charts) {
    const key = `${page}:${chart.id}`;
    seen.add(key);
    let box = container.querySelector(`[data-chart="${chart.id}"]`);
    if (!box) {
      box = h("div", { class: "card chart", "data-chart": chart.id }, h("h3", {}, chart.title),
              h("div", { class: "note" }, chart.note || "\u00a0"), h("div", { class: "plot" }));
      container.append(box);
    }
    drawChart(key, box, data.t, chart);
  }
  return data;
}

const MAX_SERIES = 8;

function peak(s) { return s.values.reduce((m, v) => (v !== null && v > m ? v : m), 0); }

function drawChart(key, box, times, chart) {
  const plotEl = box.querySelector(".plot");
  // The busiest few: a chart of twenty lines says nothing (the rest are named below it).
  const ranked = chart.series.slice().sort((a, b) => peak(b) - peak(a));
  const series = ranked.slice(0, MAX_SERIES);
  const hidden = ranked.slice(MAX_SERIES).map(s => s.name);
  let more = box.querySelector(".more");
  if (!more) { more = h("div", { class: "note more" }); box.append(more); }
  more.textContent = hidden.length ? `Not drawn (quieter): ${hidden.join(", ")}` : "";
  const columns = series.map(s => s.values);
  // Few samples (a platform just started) are drawn as dots too: a line needs two neighbours.
  const lines = series.map((s, i) => ({ label: s.name, stroke: COLORS[i % COLORS.length], width: 1.5,
                                        fill: null, value: (u, v) => fmtUnit(chart.unit, v), spanGaps: false,
                                        points: { show: s.values.filter(v => v !== null).length < 40, size: 5,
                                                  fill: COLORS[i % COLORS.length] } }));
  for (const t of chart.thresholds || []) {
    columns.push(times.map(() => t.value));
    lines.push({ label: t.name, stroke: "#cf222e", dash: [6, 4], width: 1, value: (u, v) => fmtUnit(chart.unit, v) });
  }
  box.dataset.series = String(series.length);
  box.dataset.points = String(series.reduce((n, s) => n + s.values.filter(v => v !== null).length, 0));
  const signature = lines.map(l => l.label).join("|");
  const old = state.plots[key];
  if (!series.length) {
    if (old) { old.plot.destroy(); delete state.plots[key]; }
    plotEl.replaceChildren(h("div", { class: "empty" }, "no data in the last hour"));
    return;
  }
  const data = [times, ...columns];
  if (old && old.signature === signature && old.el === plotEl) { old.plot.setData(data); return; }
  if (old) old.plot.destroy();
  plotEl.replaceChildren();
  const width = Math.max(320, plotEl.clientWidth || box.clientWidth - 28);
  const opts = {
    width, height: 220, series: [{}, ...lines], legend: { live: true },
    scales: { x: { time: true }, y: { range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1] } },
    axes: [{}, { size: 70, values: (u, vals) => vals.map(v => fmtUnit(chart.unit, v)) }],
    cursor: { drag: { x: true, y: false } },
  };
  state.plots[key] = { plot: new uPlot(opts, data, plotEl), signature, el: plotEl };
}

async function renderClusterPage() {
  const clusters = state.overview.platform.regions.flatMap(r => r.clusters.map(c => c.name));
  if (!state.cluster || !clusters.includes(state.cluster)) state.cluster = clusters[0] || null;
  const picker = document.getElementById("cluster-picker");
  picker.replaceChildren(...clusters.map(name => h("button", {
    class: name === state.cluster ? "active" : "", onclick: () => { location.hash = `cluster/${encodeURIComponent(name)}`; },
  }, name)));
  if (!state.cluster) return;
  const container = document.getElementById("cluster-charts");
  if (container.dataset.cluster !== state.cluster) {
    for (const key of Object.keys(state.plots)) if (key.startsWith("cluster:")) { state.plots[key].plot.destroy(); delete state.plots[key]; }
    container.replaceChildren();
    container.dataset.cluster = state.cluster;
  }
  await renderCharts("cluster", "cluster-charts", `?cluster=${encodeURIComponent(state.cluster)}`);
}

async function renderReplication() {
  const links = document.getElementById("links");
  links.replaceChildren(h("div", { class: "card" }, h("h2", {}, "Links"),
    state.overview.links.length ? linksTable(state.overview.links) : h("p", { class: "muted" }, "No mirror link reports."),
    state.overview.pairs.length ? [h("h3", {}, "RPO at risk now (what an unplanned failover would lose)"), pairsTable(state.overview.pairs)] : null));
  await renderCharts("replication", "replication-charts");
}

async function renderGrowth() {
  const data = await renderCharts("growth", "growth-charts");
  const rows = (data.capacity || []).map(r => h("tr", { class: r.days_until_full !== null && r.days_until_full < 7 ? "bad" : "" },
    h("td", {}, r.node), h("td", { class: "num" }, fmtBytes(r.used_bytes)),
    h("td", { class: "num" }, r.growth_bytes_per_day === null ? "–" : fmtBytes(r.growth_bytes_per_day) + "/day"),
    h("td", { class: "num" }, fmtBytes(r.free_bytes)), h("td", { class: "num" }, fmtBytes(r.total_bytes)),
    h("td", { class: "num" }, r.days_until_full !== null ? `${fmtNum(r.days_until_full, 1)} days`
      : r.trend_s < 600 ? `after 10 min of history (${(r.trend_s / 60).toFixed(0)} so far)`
      : r.growth_bytes_per_day > 0 ? "–" : "not growing")));
  document.getElementById("capacity").replaceChildren(h("div", { class: "card" }, h("h2", {}, "Disk by broker"),
    h("p", { class: "muted" }, "Growth is the trend over the last hour; days until full divide the free space by it."),
    table([["broker"], ["used", "num"], ["growth", "num"], ["free", "num"], ["file system", "num"], ["full in", "num"]], rows)));
}

// ------------------------------------------------------------------ DR

async function renderDr() {
  const el = document.getElementById("dr");
  const dr = await api("/dr");
  const mayAct = Boolean(state.session && state.session.may_act);
  const cards = dr.pairs.map(p => {
    const regions = Object.values(p.clusters).map(c => c.region);
    const checks = table([["check"], ["result"], ["detail"]], (p.checks || []).map(c =>
      h("tr", { class: c.ok ? "" : (c.blocking ? "bad" : "warn") }, h("td", {}, dot(c.ok ? "ok" : c.blocking ? "bad" : "warn"), c.name),
        h("td", {}, c.ok ? "ok" : c.blocking ? "FAILS" : "warning"), h("td", {}, c.detail))));
    const buttons = regions.map(region => {
      const active = region === p.active_region;
      return [
        active ? h("button", { class: "primary", disabled: !mayAct, "data-act": `failover:${region}`,
                               onclick: () => planAction("failover", region, false) }, `Fail over ${region}`) : null,
        active ? h("button", { disabled: !mayAct, "data-act": `drill:${region}`, onclick: () => planAction("drill", region, false) },
                   `Drill ${region}`) : null,
        !active && p.active_region && p.last_failover && p.last_failover.state === "done" &&
          p.clusters[p.last_failover.source] && p.clusters[p.last_failover.source].region === region ? h("button", { disabled: !mayAct, "data-act": `failback:${region}`,
                                                  onclick: () => planAction("failback", region, false) }, `Fail back to ${region}`) : null,
        active ? h("button", { class: "danger", disabled: !mayAct, "data-act": `force:${region}`,
                               onclick: () => planAction("failover", region, true) }, `Unplanned failover of ${region}`) : null,
      ];
    });
    return h("div", { class: "card", "data-pair": p.pair, "data-ready": String(!!p.ready),
                      "data-active-region": p.active_region || "" },
      h("h2", {}, `Pair ${p.pair}`, badge(p.ready ? "ok" : p.active_region ? "warn" : "bad")),
      h("div", { class: "facts" },
        h("div", {}, h("span", {}, "active region"), p.active_region || "none"),
        h("div", {}, h("span", {}, "ready"), p.ready ? "yes" : "no"),
        h("div", {}, h("span", {}, "RPO at risk"), `${p.rpo_at_risk.records} records, ${fmtSeconds(p.rpo_at_risk.seconds)}`),
        h("div", {}, h("span", {}, "checkpoint age"), fmtSeconds(p.checkpoints.age_seconds)),
        ...Object.entries(p.clusters).map(([name, c]) => h("div", {}, h("span", {}, name),
          `${c.region}, epoch ${c.epoch}, ${c.reachable ? "reachable" : "UNREACHABLE: " + (c.error || "")}`))),
      h("h3", {}, "Readiness"), checks,
      h("div", { class: "actions" }, buttons.flat(),
        mayAct ? null : h("span", { class: "muted", id: "no-rights" }, "You may look but not act: failovers need a super user or a DR operator.")));
  });
  const plan = h("div", { id: "plan-box" });
  const progress = h("div", { id: "action-box" });
  const history = table([["#"], ["pair"], ["kind"], ["state"], ["from → to"], ["started"], ["RTO writes", "num"], ["RPO", "num"]],
    (dr.history.failovers || []).slice(0, 15).map(f => h("tr", { class: f.state === "failed" ? "bad" : "" },
      h("td", {}, f.id), h("td", {}, f.pair), h("td", {}, f.kind), h("td", {}, f.state), h("td", {}, `${f.source} → ${f.target}`),
      h("td", {}, fmtTime(f.started_at)), h("td", { class: "num" }, fmtSeconds(f.rto_writes_s)),
      h("td", { class: "num" }, f.rpo_records === null ? "–" : `${f.rpo_records} records`))));
  const audit = table([["time"], ["user"], ["from"], ["what"], ["outcome"]], (dr.audit || []).map(a =>
    h("tr", {}, h("td", {}, fmtTime(a.time)), h("td", {}, a.user), h("td", {}, a.remote), h("td", {}, a.what), h("td", {}, a.outcome))));
  const keepPlan = document.getElementById("plan-box");
  const keepAction = document.getElementById("action-box");
  el.replaceChildren(...cards, keepPlan || plan, keepAction || progress,
    h("div", { class: "card" }, h("h2", {}, "Failovers"), history),
    h("div", { class: "card" }, h("h2", {}, "Audit log"), h("p", { class: "muted" }, "Every login and action from the console."), audit));
  if (state.action && state.action.state === "running") await followAction();
}

async function planAction(kind, region, force) {
  const box = document.getElementById("plan-box");
  box.replaceChildren(h("div", { class: "card" }, h("h2", {}, `Planning ${kind} of ${region}…`)));
  try {
    const plan = await api("/plan", { body: { action: kind, region, force } });
    const input = h("input", { id: "confirm", placeholder: region, autocomplete: "off" });
    const go = h("button", { class: force ? "danger" : "primary", id: "start-action", disabled: true }, `Start ${kind}`);
    input.addEventListener("input", () => { go.disabled = input.value !== region || !plan.ready; });
    go.addEventListener("click", () => startAction(kind, region, force, input.value));
    box.replaceChildren(h("div", { class: "card", id: "plan" }, h("h2", {}, `Plan: ${force ? "unplanned " : ""}${kind} of ${region}`),
      h("pre", { id: "plan-text" }, plan.plan),
      plan.ready ? h("div", { class: "actions" }, h("label", {}, `Type ${region} to confirm: `, input), go,
                     h("button", { onclick: () => box.replaceChildren() }, "Cancel"))
                 : h("p", { class: "error" }, "Not ready: the checks above that fail must pass first.")));
  } catch (e) {
    box.replaceChildren(h("div", { class: "card" }, h("p", { class: "error", id: "plan-error" }, e.message)));
  }
}

async function startAction(kind, region, force, confirm) {
  try {
    state.action = await api("/actions", { body: { action: kind, region, force, confirm } });
    state.actionLines = 0;
    document.getElementById("plan-box").replaceChildren();
    await followAction();
  } catch (e) {
    document.getElementById("plan-box").append(h("p", { class: "error", id: "action-error" }, e.message));
  }
}

// One follower at a time: the DR tab redraws every refresh and asks to follow a running action,
// and two followers would each append the same lines.
async function followAction() {
  clearTimeout(state.followTimer);
  const a = state.action;
  if (!a || state.following) return;
  state.following = true;
  try { await followOnce(a); } finally { state.following = false; }
  if (state.action.state === "running" && state.session) state.followTimer = setTimeout(followAction, 1000);
}

async function followOnce(a) {
  const box = document.getElementById("action-box");
  let pre = document.getElementById("action-lines");
  if (!pre || box.dataset.action !== String(a.id)) {
    pre = h("pre", { id: "action-lines" });
    box.dataset.action = String(a.id);
    box.replaceChildren(h("div", { class: "card" }, h("h2", { id: "action-title" }), pre));
  }
  const update = await api(`/actions/${a.id}?since=${state.actionLines}`);
  if (!state.action || state.action.id !== a.id) return;     // another action started meanwhile
  state.action = update;
  state.actionLines += update.lines.length;
  if (update.lines.length) pre.append(update.lines.join("\n") + "\n");
  pre.scrollTop = pre.scrollHeight;
  const title = document.getElementById("action-title");
  title.replaceChildren(`${update.kind} of ${update.region} by ${update.user}: `,
    badge(update.state === "done" ? "ok" : update.state === "failed" ? "bad" : "warn"), " ",
    h("span", { id: "action-state" }, update.state));
}

// ------------------------------------------------------------------ drills and alerts

async function renderDrills() {
  const el = document.getElementById("drills");
  const dr = await api("/dr");
  const report = h("div", { id: "drill-report" });
  const rows = (dr.history.drills || []).map(d => h("tr", { class: d.state === "passed" ? "" : d.state === "failed" ? "bad" : "warn" },
    h("td", {}, h("a", { href: "#drills", "data-drill": d.id, onclick: (ev) => { ev.preventDefault(); showDrill(d.id); } }, `#${d.id}`)),
    h("td", {}, d.pair), h("td", {}, d.region), h("td", {}, d.mode || "canary"), h("td", {}, fmtTime(d.started_at)),
    h("td", {}, dot(d.state === "passed" ? "ok" : d.state === "failed" ? "bad" : "warn"), d.state),
    h("td", { class: "num" }, d.rpo_records === null ? "–" : d.rpo_records), h("td", { class: "num" }, fmtSeconds(d.rto_writes_s)),
    h("td", { class: "num" }, fmtSeconds(d.rto_reads_s))));
  el.replaceChildren(h("div", { class: "card" }, h("h2", {}, "Drills"),
    h("p", { class: "muted" }, dr.next_drill ? `Next scheduled drill: ${fmtTime(Date.parse(dr.next_drill) / 1000)}` :
      "No drill is scheduled (dr.drill_schedule in the topology). Start one from the DR tab."),
    rows.length ? table([["drill"], ["pair"], ["region"], ["mode"], ["started"], ["outcome"], ["RPO (records)", "num"],
                         ["RTO writes", "num"], ["RTO reads", "num"]], rows) : h("p", { class: "muted" }, "No drill yet.")),
    document.getElementById("drill-report") || report);
}

async function showDrill(id) {
  const box = document.getElementById("drill-report");
  try {
    const r = await api(`/drills/${id}`);
    box.replaceChildren(h("div", { class: "card" }, h("h2", {}, `Drill #${id} report`),
      h("pre", { id: "drill-markdown" }, r.markdown || JSON.stringify(r.report, null, 2))));
  } catch (e) { box.replaceChildren(h("p", { class: "error" }, e.message)); }
}

async function renderAlerts() {
  const el = document.getElementById("alerts");
  const data = await api("/alerts");
  const rows = data.alerts.map(a => h("tr", { class: a.state === "firing" ? (a.severity === "critical" ? "bad" : "warn") : "", "data-alert": a.name },
    h("td", {}, dot(a.state === "firing" ? (a.severity === "critical" ? "bad" : "warn") : "ok"), a.name), h("td", {}, a.state),
    h("td", {}, a.severity), h("td", {}, a.since ? `${fmtTime(a.since)} (${ago(a.since)})` : "–"),
    h("td", {}, Object.entries(a.labels).map(([k, v]) => `${k}=${v}`).join(", ")), h("td", { style: "white-space: normal" }, a.summary)));
  el.replaceChildren(h("div", { class: "card" }, h("h2", {}, "Alerts"),
    h("p", { class: "muted" }, data.evaluated_by === "prometheus" ? "Evaluated by Prometheus from the shipped rules."
      : `Evaluated by the console from the shipped rules (${data.rules} rules), every scrape.`),
    rows.length ? table([["alert"], ["state"], ["severity"], ["since"], ["labels"], ["summary"]], rows)
                : h("p", { id: "no-alerts" }, dot("ok"), "Nothing fires."),
    data.rule_errors.length ? [h("h3", {}, "Rules not evaluated"), h("ul", {}, data.rule_errors.map(r => h("li", { class: "error" }, `${r.rule}: ${r.error}`)))] : null));
}

const RENDER = { platform: async () => renderPlatform(), cluster: renderClusterPage, replication: renderReplication,
                 dr: renderDr, drills: renderDrills, growth: renderGrowth, alerts: renderAlerts };

// ------------------------------------------------------------------ start

async function start() {
  try {
    state.session = await api("/session");
  } catch (e) {
    if (e.status !== undefined) banner(e.message);
    return;
  }
  if (state.session.login_required) { showLogin(); return; }
  // Twice per scrape: what the console learnt shows within half an interval.
  state.refreshMs = Math.max(1000, (state.session.interval_s || 5) * 500);
  document.getElementById("tabs").hidden = false;
  showSession();
  route();
}

document.getElementById("login-form").addEventListener("submit", login);
window.addEventListener("hashchange", route);
window.addEventListener("resize", () => { for (const k of Object.keys(state.plots)) { state.plots[k].plot.destroy(); delete state.plots[k]; } });
start();
