// The Run view's charts, drawn by Plotly.js (served by this server from the plotly package).
// Each chart is one div updated in place with Plotly.react: a refresh changes its data, it never
// re-creates the plot (zoom and hidden legend entries survive a refresh).
"use strict";

const CHART_LAYOUT = {width: 460, height: 260, margin: {l: 50, r: 10, t: 10, b: 40}, font: {size: 11},
                      showlegend: true, legend: {font: {size: 10}}, uirevision: "keep"};
const CHART_CONFIG = {displaylogo: false, responsive: false, modeBarButtonsToRemove: ["toImage"]};

const LINE = {type: "scatter", mode: "lines+markers"}, BAR = {type: "bar"};

// rows [{key, x, y, ...}, ...] -> one trace per distinct row[key] (one trace named y when key is null)
function traces(rows, key, x, y, base) {
  const out = {};
  if (Array.isArray(rows)) rows.forEach(r => {
    const name = key ? String(r[key]) : y;
    const t = out[name] = out[name] || {...base, name, x: [], y: []};
    t.x.push(r[x]); t.y.push(r[y]);
  });
  return Object.values(out);
}

// why a chart is empty: the panel's error, or "no data yet"
function emptyNote(rows, data) {
  if (rows && rows.error) return rows.error;
  return data.length ? "" : "no data yet";
}

function plot(id, rows, data, layout) {
  const note = emptyNote(rows, data);
  const annotations = note ? [{text: note.slice(0, 80), showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5}] : [];
  Plotly.react(id, data, {...CHART_LAYOUT, ...layout, annotations}, CHART_CONFIG);
}

const MINUTES = {title: {text: "minutes since start"}};
const LEGEND_ABOVE = {legend: {orientation: "h", x: 0, y: 1.02, yanchor: "bottom", font: {size: 10}},
                      margin: {l: 50, r: 10, t: 40, b: 40}};  // for long names (groups, policies)

// the Run view's answer (/api/run) -> every chart
function drawRunCharts(d) {
  plot("chart-success", d.success_by_task, traces(d.success_by_task, "task_name", "minute", "success_rate", LINE),
       {xaxis: MINUTES, yaxis: {title: {text: "success rate"}, range: [0, 1.05]}});
  plot("chart-steps", d.steps_per_s, traces(d.steps_per_s, null, "minute", "steps_per_s", LINE),
       {xaxis: MINUTES, yaxis: {title: {text: "steps/s"}, rangemode: "tozero"}, showlegend: false});
  const trainer = Array.isArray(d.trainer) ? d.trainer : [], idle = r => r.name === "perf/idle_fraction";
  plot("chart-losses", d.trainer, traces(trainer.filter(r => !idle(r)), "name", "minute", "value", LINE), {xaxis: MINUTES});
  plot("chart-idle", d.trainer, traces(trainer.filter(idle), null, "minute", "value", LINE),
       {xaxis: MINUTES, yaxis: {title: {text: "idle fraction"}, range: [0, 1.05]}, showlegend: false});
  plot("chart-staleness", d.staleness, traces(d.staleness, "policy", "staleness", "trajectories", BAR),
       {...LEGEND_ABOVE, xaxis: {title: {text: "staleness (policy versions)"}, dtick: 1}, yaxis: {title: {text: "trajectories"}}});
  const lag = lagRows(d.consumer_lag);
  plot("chart-lag", lag, traces(lag, "group", "lag", "topic", {...BAR, orientation: "h"}),
       {...LEGEND_ABOVE, xaxis: {title: {text: "messages behind"}, rangemode: "tozero"}, yaxis: {automargin: true}});
}

// {group: {topic: lag}} -> [{group, topic, lag}] (an error passes through)
function lagRows(lag) {
  if (!lag || lag.error) return lag;
  return Object.entries(lag).flatMap(([group, topics]) => Object.entries(topics).map(([topic, n]) => ({group, topic, lag: n})));
}
