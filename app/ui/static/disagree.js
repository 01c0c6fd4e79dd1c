// The Disagreements view: where a learned verifier and the page disagree (app/ui/disagreements.py).
// Uses app.js's api, el, table, chosenRun, show and openEpisode.
"use strict";

const DISAGREE_COLUMNS = ["episode_id", "task_name", "page_success", "verifier_success", "judge_outcome", "reward",
  "anomalies", "num_steps", "policy", "version", "scorer"];

// the page's own URL for one episode's replay (a new tab works too), the token and run kept
function replayHref(id) {
  const q = new URLSearchParams();
  if (TOKEN) q.set("token", TOKEN);
  if (chosenRun()) q.set("run", chosenRun());
  q.set("episode", id);
  return "/?" + q + "#episodes";
}

function openReplay(ev, id) {
  ev.preventDefault();
  location.hash = "episodes";
  show("episodes");
  openEpisode(id);
}

function disagreeingTable(target, episodes) {
  target.replaceChildren();
  if (!episodes.length) { target.append(el("i", {}, "none")); return; }
  const t = el("table"), head = el("tr");
  DISAGREE_COLUMNS.forEach(k => head.append(el("th", {}, k)));
  t.append(head);
  episodes.forEach(e => {
    const tr = el("tr", {class: "row"});
    DISAGREE_COLUMNS.forEach(k => {
      const td = el("td");
      if (k === "episode_id") {
        const a = el("a", {href: replayHref(e.episode_id), class: "replay-link"}, e.episode_id);
        a.onclick = ev => openReplay(ev, e.episode_id);
        td.append(a);
      } else td.textContent = String(e[k]);
      tr.append(td);
    });
    tr.onclick = ev => { if (ev.target.tagName !== "A") openReplay(ev, e.episode_id); };
    t.append(tr);
  });
  target.append(t);
}

async function loadDisagreements(ev) {
  if (ev) ev.preventDefault();
  const q = new URLSearchParams(new FormData(document.getElementById("disagree-filter")));
  q.set("run", chosenRun());
  const err = document.getElementById("disagree-error"), empty = document.getElementById("disagree-empty");
  err.textContent = "";
  try {
    const d = await api("/api/disagreements?" + q);
    if (!d.verifier_used) {
      empty.textContent = "No episode of this run was decided by a verifier, so there is nothing to compare: " +
        "score with one deciding the tasks (flywheel streams --judge-url ... --judge-tasks '*', docs/verifier.md). " +
        "A judge that only adds its score (no --judge-tasks) decides nothing.";
    } else {
      empty.textContent = `${d.total.judged} episodes decided by a verifier: ${d.total.fp} false positives, ` +
        `${d.total.fn} false negatives` + (d.truncated ? " (the newest " + d.episodes.length + " listed)" : "") + ".";
    }
    table(document.getElementById("disagree-tasks"), d.verifier_used ? d.tasks.concat([d.total]) : []);
    disagreeingTable(document.getElementById("disagree-episodes"), d.episodes);
  } catch (e) { err.textContent = e.message; }
}

window.disagreementsShown = loadDisagreements;
document.getElementById("disagree-filter").onsubmit = loadDisagreements;
document.getElementById("run").addEventListener("change", () => {
  if (!document.getElementById("view-disagreements").classList.contains("hidden")) loadDisagreements();
});
if (!document.getElementById("view-disagreements").classList.contains("hidden")) loadDisagreements();  // /#disagreements
