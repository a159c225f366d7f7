// GET /dashboard's page: HTML, styles and script in one string, nothing fetched but
// /dashboard/data. The charts are hand-written SVG (docs/server.md says why: smaller than any
// charts library, no licence to carry, nothing to vendor). With --api-key the page is opened as
// /dashboard?key=KEY and sends the key as a Bearer header on every poll.
#include "server/dashboard.h"

namespace mlaserve {
namespace {

constexpr std::string_view kPage = R"page(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>mlaserve dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<style>
body { font: 13px system-ui, sans-serif; margin: 12px 18px; background: #fafafa; color: #222; }
h1 { font-size: 17px; margin: 0 0 4px; } #status { color: #666; margin-bottom: 10px; }
#status.bad { color: #b00; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(380px, 1fr)); gap: 12px; }
.card { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 8px 10px; }
.card h2 { font-size: 13px; margin: 0 0 2px; font-weight: 600; }
.now { font-size: 12px; color: #444; min-height: 16px; } .now b { font-size: 14px; }
svg { width: 100%; height: 130px; display: block; }
.axis { stroke: #ccc; stroke-width: 1; } .lbl { fill: #888; font-size: 10px; }
table { border-collapse: collapse; width: 100%; font-size: 12px; }
th, td { text-align: left; padding: 2px 8px 2px 0; border-bottom: 1px solid #eee; }
.hidden { display: none; }
</style></head><body>
<h1>mlaserve <span id="model"></span></h1>
<div id="status">connecting...</div>
<div class="grid" id="charts"></div>
<div class="card hidden" id="summary-card" style="margin-bottom:12px"><h2>Batch run</h2><div class="now" id="summary"></div></div>
<div class="card hidden" id="requests-card" style="margin-top:12px"><h2>Requests in flight (<span id="now-requests">0</span>; oldest first, no text)</h2>
<table><thead><tr><th>id</th><th>age</th><th>prompt tokens</th><th>tokens so far</th><th>state</th></tr></thead>
<tbody id="requests"></tbody></table></div>
<div class="card hidden" id="provenance-card" style="margin-top:12px"><h2>Output tokens of the records done this run, by KV format and by server</h2>
<table><tbody id="provenance"></tbody></table></div>
<script>
"use strict";
const POLL_MS = 1000, KEEP = 600;  // one point a second, the last 10 minutes
const key = new URLSearchParams(location.search).get("key");
const colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
// A latency percentile in ms; none while no request finished in the window.
const lat = (d, field) => d.latency.requests > 0 ? 1000 * d.latency[field] : null;
// Each chart: its series (name, function of (previous data, data, seconds between) -> value).
// The server's charts, and a batch run's (mlaserve batch --dashboard-port: "kind": "batch").
const serverCharts = [
  {id: "tps", title: "Tokens per second", series: [
    ["output", (a, b, dt) => (b.generation_tokens_total - a.generation_tokens_total) / dt],
    ["input", (a, b, dt) => (b.prompt_tokens_total - a.prompt_tokens_total) / dt]]},
  {id: "reqs", title: "Requests", series: [
    ["running", (a, b) => b.num_running_reqs], ["queued", (a, b) => b.num_queue_reqs]]},
  {id: "kv", title: "KV cache tokens", series: [
    ["used", (a, b) => b.num_used_tokens], ["capacity", (a, b) => b.max_total_num_tokens]]},
  {id: "hit", title: "Prefix cache hit rate (%)", series: [
    ["this second", (a, b) => { const p = b.prompt_tokens_total - a.prompt_tokens_total;
                                return p > 0 ? 100 * (b.cached_tokens_total - a.cached_tokens_total) / p : null; }],
    ["since start", (a, b) => 100 * b.cache_hit_rate]]},
  {id: "retract", title: "Retractions and aborts per minute", series: [
    ["retracted", (a, b, dt) => 60 * (b.num_retracted_requests_total - a.num_retracted_requests_total) / dt],
    ["aborted", (a, b, dt) => 60 * (b.num_aborted_requests_total - a.num_aborted_requests_total) / dt]]},
  {id: "ttft", title: "Time to first token, last 5 min (ms)", series: [
    ["p50", (a, b) => lat(b, "ttft_p50_s")], ["p99", (a, b) => lat(b, "ttft_p99_s")]]},
  {id: "tpot", title: "Time per output token, last 5 min (ms)", series: [
    ["p50", (a, b) => lat(b, "tpot_p50_s")], ["p99", (a, b) => lat(b, "tpot_p99_s")]]},
  {id: "spec", title: "Speculative accept length (tokens per verify step)", only: d => d.speculative_algorithm,
   series: [["accept length", (a, b) => b.spec_accept_length]]},
  {id: "tp", title: "Tensor parallel: received per rank (MB/s); rank 0 in collectives (%)", only: d => d.tp,
   series: []},  // one per rank, made from the first data (makeCharts)
];
const batchCharts = [
  {id: "records", title: "Records", series: [
    ["done", (a, b) => b.done], ["failed", (a, b) => b.failed], ["left", (a, b) => b.left], ["running", (a, b) => b.running]]},
  {id: "rate", title: "Records per minute", series: [
    ["done", (a, b, dt) => 60 * (b.done_this_run - a.done_this_run) / dt],
    ["failed", (a, b, dt) => 60 * (b.failed_this_run - a.failed_this_run) / dt]]},
  {id: "tokens", title: "Output tokens per second", series: [["output", (a, b, dt) => (b.new_tokens - a.new_tokens) / dt]]},
  {id: "outage", title: "Outages: no server answering (s)", series: [
    ["this outage", (a, b) => b.down_for_s], ["all outages", (a, b) => b.outage_s]]},
];
let charts = null;
const points = [];  // {t, values: {chartId: [v per series]}}
let prev = null;
const state = {polls: 0, errors: 0, last: null, latest: {}};
window.dashboardState = state;

function el(tag, attrs, text) {
  const e = document.createElementNS(tag === "svg" || attrs.svg ? "http://www.w3.org/2000/svg" : "http://www.w3.org/1999/xhtml", tag);
  for (const [k, v] of Object.entries(attrs)) if (k !== "svg") e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(v) {
  if (v === null || v === undefined || !isFinite(v)) return "-";
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return a >= 1000 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
}
function makeCharts(d) {
  const kind = d.kind;
  charts = kind === "batch" ? batchCharts : serverCharts;
  const tp = charts.find(c => c.id === "tp");
  if (tp && d.tp) {
    tp.series = d.tp.bytes_received_total_by_rank.map((_, r) => ["rank " + r,
      (a, b, dt) => (b.tp.bytes_received_total_by_rank[r] - a.tp.bytes_received_total_by_rank[r]) / dt / 1e6]);
    tp.series.push(["rank 0 waiting %", (a, b, dt) => 100 * (b.tp.rank0_collective_seconds_total - a.tp.rank0_collective_seconds_total) / dt]);
  }
  for (const c of charts) {
    const card = el("div", {class: "card", id: "card-" + c.id});
    card.append(el("h2", {}, c.title), el("div", {class: "now", id: "now-" + c.id}), el("svg", {id: "svg-" + c.id, viewBox: "0 0 400 130", preserveAspectRatio: "none"}));
    document.getElementById("charts").append(card);
  }
  document.getElementById(kind === "batch" ? "summary-card" : "requests-card").classList.remove("hidden");
  if (kind === "batch") document.getElementById("provenance-card").classList.remove("hidden");
}
function hms(s) {
  if (s === null || s === undefined) return "-";
  s = Math.round(s);
  return Math.floor(s / 3600) + ":" + String(Math.floor(s / 60) % 60).padStart(2, "0") + ":" + String(s % 60).padStart(2, "0");
}
function draw(c) {
  const svg = document.getElementById("svg-" + c.id);
  svg.replaceChildren();
  const W = 400, H = 130, L = 34, B = 14, T = 4;
  const pts = points.filter(p => p.values[c.id]);
  let max = 0;
  for (const p of pts) for (const v of p.values[c.id]) if (v !== null && isFinite(v)) max = Math.max(max, v);
  max = max > 0 ? max * 1.1 : 1;
  const t0 = pts.length ? pts[0].t : 0, t1 = pts.length ? Math.max(pts[pts.length - 1].t, t0 + 1) : 1;
  const x = t => L + (W - L - 2) * (t - t0) / (t1 - t0), y = v => T + (H - T - B) * (1 - v / max);
  svg.append(el("line", {svg: 1, class: "axis", x1: L, y1: H - B, x2: W, y2: H - B}),
             el("line", {svg: 1, class: "axis", x1: L, y1: T, x2: L, y2: H - B}),
             el("text", {svg: 1, class: "lbl", x: 2, y: T + 9}, fmt(max)),
             el("text", {svg: 1, class: "lbl", x: 2, y: H - B}, "0"),
             el("text", {svg: 1, class: "lbl", x: L, y: H - 2}, pts.length ? Math.round(t1 - t0) + " s" : ""));
  c.series.forEach((s, i) => {
    let d = "";
    for (const p of pts) {
      const v = p.values[c.id][i];
      if (v === null || !isFinite(v)) continue;
      d += (d ? "L" : "M") + x(p.t).toFixed(1) + "," + y(v).toFixed(1);
    }
    if (d) svg.append(el("path", {svg: 1, d, fill: "none", stroke: colors[i % colors.length], "stroke-width": 1.5,
                                  "stroke-dasharray": s[0] === "capacity" ? "4 3" : "none"}));
  });
}
function updateBatch(d) {
  document.getElementById("model").textContent = "batch";
  const parts = [["done", d.done + " / " + d.total], ["failed", d.failed], ["left", d.left], ["running", d.running],
                 ["ETA", d.down_for_s > 0 ? "paused: no server" : hms(d.eta_s)],
                 ["outages", d.outages + " (" + d.outage_s.toFixed(1) + " s lost)"],
                 ["interrupted", d.interruptions + " (" + d.continued + " continued, " + d.restarted + " restarted)"]];
  const summary = document.getElementById("summary");
  summary.replaceChildren();
  for (const [k, v] of parts) { const span = el("span", {style: "margin-right:16px", "data-field": k}); span.append(k + " ", el("b", {}, String(v))); summary.append(span, " "); }
  const body = document.getElementById("provenance");
  body.replaceChildren();
  for (const [title, mix] of [["KV format", d.tokens_by_kv_format], ["server", d.tokens_by_server]]) {
    for (const [k, v] of Object.entries(mix)) {
      const tr = el("tr", {});
      tr.append(el("td", {}, title), el("td", {}, k), el("td", {}, String(v) + " tokens"));
      body.append(tr);
    }
  }
}
function update(d) {
  if (!charts) makeCharts(d);
  if (prev && d.uptime_s < prev.uptime_s) { points.length = 0; prev = null; }  // a restarted server: its counters start again
  if (d.kind === "batch") updateBatch(d);
  else document.getElementById("model").textContent = d.model + " - KV " + d.kv_cache_dtype;
  const t = d.uptime_s, point = {t, values: {}};
  for (const c of charts) {
    const card = document.getElementById("card-" + c.id);
    const shown = !c.only || c.only(d);
    card.classList.toggle("hidden", !shown);
    if (!shown || !prev) continue;
    const dt = Math.max(d.uptime_s - prev.uptime_s, 1e-3);
    const values = c.series.map(s => { const v = s[1](prev, d, dt); return v === null || !isFinite(v) ? null : v; });
    point.values[c.id] = values;
    state.latest[c.id] = Object.fromEntries(c.series.map((s, i) => [s[0], values[i]]));
    const now = document.getElementById("now-" + c.id);
    now.replaceChildren();
    c.series.forEach((s, i) => {
      const span = el("span", {style: "color:" + colors[i % colors.length] + ";margin-right:14px", "data-series": s[0]});
      span.append(s[0] + " ", el("b", {}, fmt(values[i])));
      now.append(span);
    });
  }
  if (prev) { points.push(point); if (points.length > KEEP) points.shift(); }
  for (const c of charts) if (!c.only || c.only(d)) draw(c);
  prev = d;
  if (d.kind === "batch") return;
  document.getElementById("now-requests").textContent = d.requests.total;
  const body = document.getElementById("requests");
  body.replaceChildren();
  for (const r of d.requests.rows) {
    const tr = el("tr", {});
    for (const v of [r.rid, r.age_s.toFixed(1) + " s", r.prompt_tokens, r.completion_tokens, r.state]) tr.append(el("td", {}, String(v)));
    body.append(tr);
  }
}
async function poll() {
  const status = document.getElementById("status");
  try {
    const r = await fetch("/dashboard/data", {headers: key ? {Authorization: "Bearer " + key} : {}, cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status + ": " + (await r.text()).slice(0, 200));
    const d = await r.json();
    state.polls++; state.last = d;
    update(d);
    status.className = "";
    status.textContent = "updated " + new Date().toLocaleTimeString() + " - " +
        (d.kind === "batch" ? d.done + " of " + d.total + " records done"
                            : d.num_running_reqs + " running, " + d.num_queue_reqs + " queued, " + d.num_requests_total + " finished");
  } catch (e) {
    state.errors++;
    status.className = "bad";
    status.textContent = "no data: " + e.message;
  }
  setTimeout(poll, POLL_MS);
}
poll();
</script></body></html>
)page";

}  // namespace

std::string_view DashboardPage() { return kPage; }

}  // namespace mlaserve
