// Flywheel UI: plain DOM, Plotly.js charts (charts.js), no framework, nothing fetched but this server.
"use strict";
const TOKEN = new URLSearchParams(location.search).get("token") || "";
const REFRESH_MS = 3000;
const NS = "http://www.w3.org/2000/svg";

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

// the run chosen in the nav bar ("" for every run): the Run view and the episode list show its rows
function chosenRun() { return document.getElementById("run").value; }
let wantedRun = new URLSearchParams(location.search).get("run") || "";  // /?run=<run>: chosen once it has rows

// the runs the server knows, newest first; the list is rebuilt only when a run appears (an open
// dropdown is left alone), keeping the choice
async function refreshRuns() {
  const select = document.getElementById("run"), runs = await api("/api/runs");
  const names = runs.map(r => r.run);
  if (names.join("\n") === [...select.options].slice(1).map(o => o.value).join("\n")) return;
  const chosen = select.value || wantedRun;
  if (names.includes(wantedRun)) wantedRun = "";
  select.replaceChildren(el("option", {value: ""}, "all runs"), ...runs.map(r =>
    el("option", {value: r.run}, `${r.run} (from ${new Date(r.first_ms).toLocaleString()})`)));
  select.value = names.includes(chosen) ? chosen : "";
}

async function refreshRun() {
  try {
    await refreshRuns().catch(() => {});  // no list yet (no sink): the panels below say why
    const d = await api("/api/run?" + new URLSearchParams({run: chosenRun()}));
    table(document.getElementById("totals"), d.totals);
    drawRunCharts(d);
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
  q.set("run", chosenRun());
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
  for (const v of ["run", "episodes", "annotate", "disagreements"]) document.getElementById("view-" + v).classList.toggle("hidden", v !== view);
  if (view === "episodes") loadEpisodes();
  if (view === "annotate" && window.annotateShown) window.annotateShown();
  if (view === "disagreements" && window.disagreementsShown) window.disagreementsShown();
}

document.querySelectorAll("nav a").forEach(a => a.onclick = () => { location.hash = a.dataset.view; show(a.dataset.view); });
document.getElementById("filter").onsubmit = loadEpisodes;
document.getElementById("run").onchange = () => { wantedRun = ""; refreshRun(); if (!document.getElementById("view-episodes").classList.contains("hidden")) loadEpisodes(); };
document.getElementById("prev").onclick = () => { replay.i = Math.max(0, replay.i - 1); showStep(); };
document.getElementById("next").onclick = () => { replay.i = Math.min(replay.steps.length - 1, replay.i + 1); showStep(); };
show(["#episodes", "#annotate", "#disagreements"].includes(location.hash) ? location.hash.slice(1) : "run");
const episodeParam = new URLSearchParams(location.search).get("episode");
if (episodeParam) { show("episodes"); openEpisode(episodeParam); }
refreshRun();
setInterval(refreshRun, REFRESH_MS);
