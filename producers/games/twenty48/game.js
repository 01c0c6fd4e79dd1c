// 2048 on a 4x4 board: arrow keys slide every tile; two equal tiles that meet merge into one,
// and the merged value is added to the score. After a move that changed the board a 2 (9 in 10)
// or a 4 appears on an empty cell drawn by the seeded PRNG. Game over: no move changes the board.
"use strict";

(function () {
  const N = 4, CELL = 40, GAP = 2;
  const DIRS = {ArrowLeft: [0, 1], ArrowRight: [0, -1], ArrowUp: [1, 0], ArrowDown: [1, -1]};
  const COLORS = ["#cdc1b4", "#eee4da", "#ede0c8", "#f2b179", "#f59563", "#f67c5f", "#f65e3b",
                  "#edcf72", "#edcc61", "#edc850", "#edc53f", "#edc22e", "#3c3a32"];

  // the cell indices of each line, in the order tiles slide towards (its first is the far end)
  function lines(axis, reverse) {
    const out = [];
    for (let i = 0; i < N; i++) {
      const line = [];
      for (let j = 0; j < N; j++) line.push(axis === 0 ? i * N + j : j * N + i);
      out.push(reverse ? line.reverse() : line);
    }
    return out;
  }

  function slideLine(values) {
    const tiles = values.filter(function (v) { return v !== 0; });
    const out = [];
    let gained = 0;
    for (let i = 0; i < tiles.length; i++) {
      if (i + 1 < tiles.length && tiles[i] === tiles[i + 1]) {
        out.push(tiles[i] * 2);
        gained += tiles[i] * 2;
        i++;
      } else {
        out.push(tiles[i]);
      }
    }
    while (out.length < N) out.push(0);
    return {values: out, gained: gained};
  }

  function move(grid, axis, reverse) {
    const next = grid.slice();
    let gained = 0;
    for (const line of lines(axis, reverse === -1)) {
      const r = slideLine(line.map(function (k) { return grid[k]; }));
      line.forEach(function (k, i) { next[k] = r.values[i]; });
      gained += r.gained;
    }
    const moved = next.some(function (v, k) { return v !== grid[k]; });
    return {grid: next, gained: gained, moved: moved};
  }

  function canMove(grid) {
    return Object.keys(DIRS).some(function (key) { return move(grid, DIRS[key][0], DIRS[key][1]).moved; });
  }

  function spawn(state) {
    const empty = [];
    state.grid.forEach(function (v, k) { if (v === 0) empty.push(k); });
    if (empty.length === 0) return;
    const k = empty[state.rng.int(empty.length)];
    state.grid[k] = state.rng() < 0.9 ? 2 : 4;
  }

  Flywheel.register({
    title: "2048",
    instruction: "Slide the tiles with the arrow keys. Equal tiles merge and add to your score.",
    init: function (rng) {
      const state = {grid: new Array(N * N).fill(0), rng: rng};
      spawn(state);
      spawn(state);
      return state;
    },
    key: function (state, key) {
      if (!(key in DIRS)) return false;
      const r = move(state.grid, DIRS[key][0], DIRS[key][1]);
      if (r.moved) {
        state.grid = r.grid;
        state.score += r.gained;
        spawn(state);
        state.over = !canMove(state.grid);
      }
      return true;
    },
    draw: function (ctx, state) {
      ctx.fillStyle = "#bbada0";
      ctx.fillRect(0, 0, N * CELL, N * CELL);
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      state.grid.forEach(function (v, k) {
        const x = (k % N) * CELL + GAP, y = Math.floor(k / N) * CELL + GAP;
        const level = v === 0 ? 0 : Math.min(Math.log2(v), COLORS.length - 1);
        ctx.fillStyle = COLORS[level];
        ctx.fillRect(x, y, CELL - 2 * GAP, CELL - 2 * GAP);
        if (v !== 0) {
          ctx.fillStyle = v <= 4 ? "#776e65" : "#f9f6f2";
          ctx.font = "bold " + (v < 100 ? 18 : v < 1000 ? 15 : 11) + "px Arial";
          ctx.fillText(String(v), x + CELL / 2 - GAP, y + CELL / 2 - GAP);
        }
      });
    },
    board: function (state) {
      const rows = [];
      for (let i = 0; i < N; i++) rows.push(state.grid.slice(i * N, i * N + N));
      return {grid: rows};
    },
  });
})();
