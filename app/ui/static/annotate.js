// Annotate view: a person plays a task in a live sandbox; every action is one POST, the answer
// is the next screen. window.annotateTimes holds each action's round trip in ms (the request
// until the new screen is decoded), window.annotateOpens each session's start, for the tests,
// the benchmark and the person.
"use strict";
const SCALE = 3;  // the task area is 160 x 210: shown three times larger
const ann = {session: null, view: null, busy: false, opening: false};
window.annotateTimes = [];
window.annotateOpens = [];  // ms from Start until the first screen is shown

function annEl(id) { return document.getElementById(id); }

async function annotateTasks() {
  const sel = annEl("annotate-task");
  if (sel.options.length) return;
  try {
    const families = await api("/api/annotate/tasks");
    for (const [family, names] of Object.entries(families)) {
      const group = el("optgroup", {label: family});
      names.forEach(n => group.append(el("option", {value: n}, n)));
      sel.append(group);
    }
  } catch (e) { annEl("annotate-error").textContent = e.message; }
}
window.annotateShown = annotateTasks;

function annotateShow(view) {
  ann.view = view;
  const img = annEl("annotate-shot");
  annEl("annotate-instruction").textContent = view.instruction;
  const status = view.done
    ? `episode ${view.episode_id} ${view.status}: ${view.success ? "success" : "failure"} (reward ${(+view.reward).toFixed(3)}, ${view.step} steps, ${view.reason}); published as a demonstration`
    : `step ${view.step}`;
  annEl("annotate-status").textContent = status;
  annEl("annotate-status").dataset.done = view.done ? (view.success ? "success" : "failure") : "";
  if (view.done) ann.session = null;
  if (!view.screenshot_sha256) return Promise.resolve();
  img.classList.remove("hidden");
  img.width = view.width * SCALE; img.height = view.height * SCALE;
  img.src = "/blob/" + view.screenshot_sha256 + (TOKEN ? "?token=" + encodeURIComponent(TOKEN) : "");
  return img.decode().catch(() => {});
}

async function annotateSend(action) {
  if (!ann.session || ann.busy) return;
  ann.busy = true;
  annEl("annotate-error").textContent = "";
  const thought = annEl("annotate-thought").value;
  const t0 = performance.now();
  try {
    const path = action.type === "finished" ? "finish" : "act";
    const view = await api(`/api/annotate/sessions/${ann.session}/${path}`, {...action, thought});
    const fetched = performance.now();
    await annotateShow(view);
    window.annotateTimes.push({type: action.type, fetch_ms: fetched - t0, shown_ms: performance.now() - t0});
    annEl("annotate-thought").value = "";
    annotateTiming();
  } catch (e) {
    annEl("annotate-error").textContent = e.message;
  } finally { ann.busy = false; }
}

function annotateTiming() {
  const ms = window.annotateTimes.map(t => t.shown_ms).sort((a, b) => a - b);
  if (!ms.length) return;
  const p95 = ms[Math.min(ms.length - 1, Math.ceil(0.95 * ms.length) - 1)];
  annEl("annotate-timing").textContent = `${ms.length} actions; round trip median ${ms[Math.floor(ms.length / 2)].toFixed(0)} ms, p95 ${p95.toFixed(0)} ms`;
}

function annotatePoint(ev) {  // a pointer event on the scaled screen -> the screen's pixels
  const r = annEl("annotate-shot").getBoundingClientRect();
  return {x: (ev.clientX - r.left) * ann.view.width / r.width, y: (ev.clientY - r.top) * ann.view.height / r.height};
}

annEl("annotate-start").onsubmit = async ev => {
  ev.preventDefault();
  if (ann.opening) return;  // a double click on Start: a second session would sit unreachable until the idle timeout
  ann.opening = true;
  try { await annotateStart(); } finally { ann.opening = false; }
};

async function annotateStart() {
  const form = new FormData(annEl("annotate-start"));
  annEl("annotate-error").textContent = "";
  if (ann.session) await api(`/api/annotate/sessions/${ann.session}/close`, {}).catch(() => {});
  ann.session = null;
  const t0 = performance.now();
  try {
    const view = await api("/api/annotate/sessions", {task: form.get("task"), seed: form.get("seed"), name: form.get("name")});
    ann.session = view.done ? null : view.session;
    await annotateShow(view);
    window.annotateOpens.push(performance.now() - t0);
  } catch (e) { annEl("annotate-error").textContent = e.message; }
}
// a press and a release more than 3 screen pixels apart is a drag, not a click
let pressed = null, dragged = false;
annEl("annotate-shot").onmousedown = ev => { ev.preventDefault(); pressed = annotatePoint(ev); };
annEl("annotate-shot").onmouseup = ev => {
  const p = annotatePoint(ev);
  if (pressed && Math.hypot(p.x - pressed.x, p.y - pressed.y) > 3) {
    dragged = true;
    annotateSend({type: "drag", x1: pressed.x, y1: pressed.y, x2: p.x, y2: p.y});
  }
  pressed = null;
};
annEl("annotate-shot").onclick = ev => {
  if (dragged) { dragged = false; return; }
  annotateSend({type: annEl("annotate-click").value, ...annotatePoint(ev)});
};
annEl("annotate-shot").addEventListener("wheel", ev => {
  ev.preventDefault();
  const direction = Math.abs(ev.deltaX) > Math.abs(ev.deltaY) ? (ev.deltaX > 0 ? "right" : "left") : (ev.deltaY > 0 ? "down" : "up");
  annotateSend({type: "scroll", direction, ...annotatePoint(ev)});
}, {passive: false});
annEl("annotate-type").onclick = () => annotateSend({type: "type", text: annEl("annotate-text").value});
annEl("annotate-press").onclick = () => annotateSend({type: "hotkey", key: annEl("annotate-key").value});
annEl("annotate-finish").onclick = () => annotateSend({type: "finished"});
annEl("annotate-discard").onclick = async () => {
  if (!ann.session) return;
  await api(`/api/annotate/sessions/${ann.session}/close`, {}).catch(() => {});
  ann.session = null;
  annEl("annotate-status").textContent = "discarded: recorded as an aborted episode, never used as a demonstration";
};
// a page left mid-episode (reloaded, closed): its session is closed now (aborted), not held until the idle timeout
window.addEventListener("pagehide", () => {
  if (!ann.session) return;
  fetch(`/api/annotate/sessions/${ann.session}/close`, {method: "POST", keepalive: true, body: "{}",
    headers: {"Content-Type": "application/json", "X-Flywheel-Token": TOKEN}}).catch(() => {});
});
annotateTasks();
