// Flywheel UI: plain DOM + SVG, no framework, nothing fetched but this server.
"use strict";
const TOKEN = new URLSearchParams(location.search).get("token") || "";
const REFRESH_MS = 3000;
const NS = "http://www.w3.org/2000/svg";
const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

async function api(path, body) {
  const init = {headers: {"X-Flywheel-Token": TOKEN}};
  if (body !== undefined) {  // a write: JSON, same origin (the server refuses anything else)
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  if (!resp.ok) throw new Error(text.trim());
  return JSON.parse(text);
}

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(NS, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);  // textContent: stored text is never HTML
  return e;
}

function table(target, rows) {
  target.replaceChildren();
  if (rows && rows.error) { target.append(el("span", {class: "err"}, rows.error)); return; }
  if (!rows || !rows.length) { target.append(el("i", {}, "none yet")); return; }
  const t = el("table"), head = el("tr");
  Object.keys(rows[0]).forEach(k => head.append(el("th", {}, k)));
  t.append(head);
  rows.forEach(r => { const tr = el("tr"); Object.values(r).forEach(v => tr.append(el("td", {}, v))); t.append(tr); });
  target.append(t);
}

// series: {name: [[x, y], ...]}; a line chart with axes and a legend
function lineChart(svg, series, xLabel) {
  svg.replaceChildren();
  const W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), L = 40, B = 30, R = 110, T = 10;
  const pts = Object.values(series).flat();
  if (!pts.length) { svg.append(el("svg:text", {x: 20, y: 40}, "no data yet")); return; }
  const xs = pts.map(p => p[0]), ys = pts.map(p => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y0 = Math.min(0, ...ys), y1 = Math.max(...ys, y0 + 1e-9);
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R), sy = y => H - B - (y - y0) / (y1 - y0) * (H - B - T);
  svg.append(el("svg:line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#888"}));
  svg.append(el("svg:line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#888"}));
  svg.append(el("svg:text", {x: L, y: H - 8, "font-size": 11}, `${xLabel}: ${x0} … ${x1}`));
  svg.append(el("svg:text", {x: 2, y: T + 10, "font-size": 11}, y1.toPrecision(3)));
  svg.append(el("svg:text", {x: 2, y: H - B, "font-size": 11}, y0.toPrecision(3)));
  Object.entries(series).forEach(([name, data], i) => {
    const c = COLOURS[i % COLOURS.length];
    const d = data.map((p, j) => `${j ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
    svg.append(el("svg:path", {d, fill: "none", stroke: c, "stroke-width": 2}));
    data.forEach(p => svg.append(el("svg:circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: c})));
    svg.append(el("svg:text", {x: W - R + 6, y: T + 12 + 14 * i, fill: c, "font-size": 11}, name));
  });
}

function group(rows, key, x, y) {
  const out = {};
  if (!Array.isArray(rows)) return out;
  rows.forEach(r => { (out[r[key]] = out[r[key]] || []).push([+r[x], +r[y]]); });
  return out;
}

async function refreshRun() {
  try {
    const d = await api("/api/run");
    table(document.getElementById("totals"), d.totals);
    lineChart(document.getElementById("chart-success"), group(d.success_by_task, "task_name", "minute", "success_rate"), "minute");
    lineChart(document.getElementById("chart-steps"),
      {"steps/s": Array.isArray(d.steps_per_s) ? d.steps_per_s.map(r => [+r.minute, +r.steps_per_s]) : []}, "minute");
    lineChart(document.getElementById("chart-trainer"), group(d.trainer, "name", "minute", "value"), "minute");
    const lag = d.consumer_lag && !d.consumer_lag.error
      ? Object.entries(d.consumer_lag).flatMap(([g, t]) => Object.entries(t).map(([topic, n]) => ({group: g, topic, lag: n})))
      : d.consumer_lag;
    table(document.getElementById("lag"), lag);
    table(document.getElementById("staleness"), d.staleness);
    table(document.getElementById("versions"), d.policy_versions);
    table(document.getElementById("dead"), d.dead_letters);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("updated").textContent = "error: " + e.message;
  }
}

let replay = {steps: [], i: 0};

async function loadEpisodes(ev) {
  if (ev) ev.preventDefault();
  const q = new URLSearchParams(new FormData(document.getElementById("filter")));
  const err = document.getElementById("episodes-error"), t = document.getElementById("episodes");
  err.textContent = "";
  try {
    const rows = await api("/api/episodes?" + q);
    table(t, rows.map(r => ({episode: r.episode_id, task: r.task_name, policy: r.policy,
      version: r.policy_version_max, steps: r.num_steps, reward: r.outcome_reward, success: r.success})));
    t.querySelectorAll("tr").forEach((tr, i) => { if (i) { tr.className = "row"; tr.onclick = () => openEpisode(rows[i - 1].episode_id); } });
  } catch (e) { err.textContent = e.message; }
}

async function openEpisode(id) {
  const err = document.getElementById("episodes-error");
  try {
    const d = await api("/api/episodes/" + encodeURIComponent(id));
    replay = {steps: d.steps, i: 0, id};
    const pairs = document.getElementById("pairs");
    table(pairs, d.pairs.length ? d.pairs : [{reflection_pairs: "none for this episode"}]);
    showStep();
  } catch (e) { err.textContent = e.message; }
}

function showStep() {
  const s = replay.steps[replay.i];
  if (!s) return;
  document.getElementById("step-label").textContent = `${replay.id} step ${s.step_index} (${replay.i + 1}/${replay.steps.length})`;
  const img = document.getElementById("shot"), svg = document.getElementById("overlay");
  img.src = "/blob/" + s.screenshot_sha256 + (TOKEN ? "?token=" + encodeURIComponent(TOKEN) : "");
  img.width = s.screen_width; img.height = s.screen_height;
  svg.setAttribute("width", s.screen_width); svg.setAttribute("height", s.screen_height);
  svg.replaceChildren();
  const m = s.marker;
  if (m.kind === "point" || m.kind === "scroll") {
    svg.append(el("svg:circle", {id: "marker", cx: m.x, cy: m.y, r: 8, fill: "none", stroke: "red", "stroke-width": 3}));
  } else if (m.kind === "drag") {
    svg.append(el("svg:line", {id: "marker", x1: m.x1, y1: m.y1, x2: m.x2, y2: m.y2, stroke: "red", "stroke-width": 3}));
  }
  svg.append(el("svg:text", {x: 4, y: 14, fill: "red", "font-size": 12}, m.label));
  table(document.getElementById("step-info"), [
    {field: "action", value: s.action}, {field: "thought", value: s.thought}, {field: "reward", value: s.reward},
    {field: "policy", value: `${s.policy} v${s.policy_version}`},
    {field: "latency policy / env ms", value: `${(+s.latency_policy_ms).toFixed(1)} / ${(+s.latency_env_ms).toFixed(1)}`},
    {field: "error", value: s.error || ""}]);
}

function show(view) {
  for (const v of ["run", "episodes", "annotate"]) document.getElementById("view-" + v).classList.toggle("hidden", v !== view);
  if (view === "episodes") loadEpisodes();
  if (view === "annotate" && window.annotateShown) window.annotateShown();
}

document.querySelectorAll("nav a").forEach(a => a.onclick = () => { location.hash = a.dataset.view; show(a.dataset.view); });
document.getElementById("filter").onsubmit = loadEpisodes;
document.getElementById("prev").onclick = () => { replay.i = Math.max(0, replay.i - 1); showStep(); };
document.getElementById("next").onclick = () => { replay.i = Math.min(replay.steps.length - 1, replay.i + 1); showStep(); };
show(["#episodes", "#annotate"].includes(location.hash) ? location.hash.slice(1) : "run");
const episodeParam = new URLSearchParams(location.search).get("episode");
if (episodeParam) { show("episodes"); openEpisode(episodeParam); }
refreshRun();
setInterval(refreshRun, REFRESH_MS);
