// A minesweeper-like on a 10x10 board with 14 mines, played by clicks. The game opens one
// mine-free region at the start (a cell with no mine around and everything connected to it
// through such cells); after that a click reveals the one hidden cell it hits and scores a point
// (one cell per click, so a cleared board takes about 70 steps). A mine ends the game, and so does
// revealing every safe cell. The numbers say how many of the 8 neighbours are mines.
"use strict";

(function () {
  const N = 10, MINES = 14, CELL = 16;
  const NUMBER_COLORS = ["", "#0000ff", "#007b00", "#ff0000", "#00007b", "#7b0000", "#007b7b", "#000", "#7b7b7b"];

  function neighbours(k) {
    const r = Math.floor(k / N), c = k % N, out = [];
    for (let dr = -1; dr <= 1; dr++) {
      for (let dc = -1; dc <= 1; dc++) {
        const rr = r + dr, cc = c + dc;
        if ((dr || dc) && rr >= 0 && rr < N && cc >= 0 && cc < N) out.push(rr * N + cc);
      }
    }
    return out;
  }

  // the start: reveal k and, through cells with no mine around, everything connected
  function openRegion(state, k) {
    const todo = [k];
    while (todo.length) {
      const j = todo.pop();
      if (state.open[j]) continue;
      state.open[j] = true;
      if (state.counts[j] === 0) todo.push.apply(todo, neighbours(j));
    }
  }

  Flywheel.register({
    title: "Mines",
    instruction: "Click the hidden cells that hold no mine. The numbers count the mines around a cell.",
    init: function (rng) {
      const cells = [];
      for (let k = 0; k < N * N; k++) cells.push(k);
      for (let i = cells.length - 1; i > 0; i--) {  // Fisher-Yates: the first MINES cells are mines
        const j = rng.int(i + 1);
        const t = cells[i]; cells[i] = cells[j]; cells[j] = t;
      }
      const mine = new Array(N * N).fill(false);
      cells.slice(0, MINES).forEach(function (k) { mine[k] = true; });
      const counts = mine.map(function (_, k) {
        return neighbours(k).filter(function (j) { return mine[j]; }).length;
      });
      const state = {mine: mine, counts: counts, open: new Array(N * N).fill(false), hit: -1};
      const zeros = counts.map(function (c, k) { return !mine[k] && c === 0 ? k : -1; })
        .filter(function (k) { return k >= 0; });
      const safe = counts.map(function (c, k) { return mine[k] ? -1 : k; }).filter(function (k) { return k >= 0; });
      const pool = zeros.length ? zeros : safe;
      openRegion(state, pool[rng.int(pool.length)]);
      return state;
    },
    click: function (state, x, y) {
      const r = Math.floor(y / CELL), c = Math.floor(x / CELL);
      if (r < 0 || r >= N || c < 0 || c >= N) return;
      const k = r * N + c;
      if (state.open[k]) return;
      if (state.mine[k]) {
        state.hit = k;
        state.over = true;
        return;
      }
      state.open[k] = true;
      state.score += 1;
      state.over = state.open.every(function (o, j) { return o || state.mine[j]; });
    },
    draw: function (ctx, state) {
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      ctx.font = "bold 12px Arial";
      for (let k = 0; k < N * N; k++) {
        const x = (k % N) * CELL, y = Math.floor(k / N) * CELL;
        const shown = state.open[k] || (state.over && state.mine[k]);
        ctx.fillStyle = k === state.hit ? "#f00" : shown ? "#e0e0e0" : "#9a9a9a";
        ctx.fillRect(x, y, CELL, CELL);
        ctx.strokeStyle = "#666";
        ctx.strokeRect(x + 0.5, y + 0.5, CELL - 1, CELL - 1);
        if (state.over && state.mine[k]) {
          ctx.fillStyle = "#000";
          ctx.beginPath();
          ctx.arc(x + CELL / 2, y + CELL / 2, 5, 0, 2 * Math.PI);
          ctx.fill();
        } else if (state.open[k] && state.counts[k] > 0) {
          ctx.fillStyle = NUMBER_COLORS[state.counts[k]];
          ctx.fillText(String(state.counts[k]), x + CELL / 2, y + CELL / 2 + 1);
        }
      }
    },
    board: function (state) {
      // what the player sees: "#" a hidden cell, "0"-"8" an open one (mines stay hidden)
      const rows = [];
      for (let r = 0; r < N; r++) {
        let row = "";
        for (let c = 0; c < N; c++) {
          const k = r * N + c;
          row += state.open[k] ? String(state.counts[k]) : "#";
        }
        rows.push(row);
      }
      return {rows: rows, cell: CELL, mines: MINES};
    },
  });
})();
