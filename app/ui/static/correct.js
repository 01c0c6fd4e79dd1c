// Corrections in the Episodes view: the step shown in the replay is the first wrong one; a click
// on its screenshot (or a text, a key) is the right action; saved as an error-correction pair.
"use strict";
const fix = {point: null};

function fixMark(x, y) {
  const svg = document.getElementById("overlay");
  svg.querySelector("#fix-marker")?.remove();
  svg.append(el("svg:circle", {id: "fix-marker", cx: x, cy: y, r: 8, fill: "none", stroke: "#0a0", "stroke-width": 3}));
}

document.getElementById("shot").onclick = ev => {
  const img = ev.target, r = img.getBoundingClientRect(), s = replay.steps[replay.i];
  if (!s) return;
  // the image's content box: its border is not part of the screen
  fix.point = {x: (ev.clientX - r.left - img.clientLeft) * s.screen_width / img.clientWidth,
               y: (ev.clientY - r.top - img.clientTop) * s.screen_height / img.clientHeight};
  fixMark(fix.point.x, fix.point.y);
};

document.getElementById("correct-send").onclick = async () => {
  const out = document.getElementById("correct-result"), s = replay.steps[replay.i];
  if (!s) { out.textContent = "open an episode first"; return; }
  const type = document.getElementById("correct-type").value, text = document.getElementById("correct-text").value;
  const action = {type};
  if (type === "type") action.text = text;
  else if (type === "hotkey") action.key = text;
  else if (fix.point) Object.assign(action, fix.point);
  out.textContent = "saving...";
  try {
    const r = await api("/api/corrections", {episode: replay.id, tau: s.step_index, action,
      thought: document.getElementById("correct-thought").value, name: document.getElementById("correct-name").value});
    out.textContent = `saved: pair ${r.pair}`;
    out.dataset.pair = r.pair;
  } catch (e) { out.textContent = e.message; out.dataset.pair = ""; }
};
for (const id of ["prev", "next"]) document.getElementById(id).addEventListener("click", () => { fix.point = null; });
