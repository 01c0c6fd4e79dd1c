// Snake on a 10x10 board, on the page's clock: the snake moves one cell every 100 ms of page
// time (one step of the sandbox's default step_ms), the arrow keys turn it (a turn back onto
// itself is ignored), and each apple eaten scores one point and grows it by one. Apples appear
// on free cells drawn by the seeded PRNG. Game over: the head hits a wall or the body.
"use strict";

(function () {
  const N = 10, CELL = 16;
  const DIRS = {ArrowUp: [0, -1], ArrowDown: [0, 1], ArrowLeft: [-1, 0], ArrowRight: [1, 0]};

  function placeApple(state) {
    const taken = new Set(state.snake.map(function (p) { return p[1] * N + p[0]; }));
    const free = [];
    for (let k = 0; k < N * N; k++) if (!taken.has(k)) free.push(k);
    if (free.length === 0) { state.apple = null; state.over = true; return; }
    const k = free[state.rng.int(free.length)];
    state.apple = [k % N, Math.floor(k / N)];
  }

  Flywheel.register({
    title: "Snake",
    instruction: "Steer the snake with the arrow keys to eat the red apples. Do not hit a wall or the snake.",
    tickMs: 100,
    init: function (rng) {
      const state = {snake: [[4, 5], [3, 5], [2, 5]], dir: [1, 0], next: [1, 0], rng: rng, apple: null};
      placeApple(state);
      return state;
    },
    key: function (state, key) {
      if (!(key in DIRS)) return false;
      const d = DIRS[key];
      if (d[0] !== -state.dir[0] || d[1] !== -state.dir[1]) state.next = d;
      return true;
    },
    tick: function (state) {
      state.dir = state.next;
      const head = state.snake[0];
      const to = [head[0] + state.dir[0], head[1] + state.dir[1]];
      const eats = state.apple !== null && to[0] === state.apple[0] && to[1] === state.apple[1];
      const body = eats ? state.snake : state.snake.slice(0, -1);  // the tail moves on unless it grows
      const hits = body.some(function (p) { return p[0] === to[0] && p[1] === to[1]; });
      if (to[0] < 0 || to[0] >= N || to[1] < 0 || to[1] >= N || hits) {
        state.over = true;
        return;
      }
      state.snake = [to].concat(body);
      if (eats) {
        state.score += 1;
        placeApple(state);
      }
    },
    draw: function (ctx, state) {
      ctx.fillStyle = "#1d3b1d";
      ctx.fillRect(0, 0, N * CELL, N * CELL);
      if (state.apple !== null) {
        ctx.fillStyle = "#f33";
        ctx.fillRect(state.apple[0] * CELL + 2, state.apple[1] * CELL + 2, CELL - 4, CELL - 4);
      }
      state.snake.forEach(function (p, i) {
        ctx.fillStyle = i === 0 ? "#ff0" : "#7c7";
        ctx.fillRect(p[0] * CELL + 1, p[1] * CELL + 1, CELL - 2, CELL - 2);
      });
    },
    board: function (state) {
      return {size: N, cell: CELL, snake: state.snake.map(function (p) { return p.slice(); }),
              apple: state.apple === null ? null : state.apple.slice(), dir: state.dir.slice()};
    },
  });
})();
