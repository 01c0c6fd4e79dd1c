// The harness every Flywheel game page shares: a seeded PRNG (the only randomness a game may
// use; no Math.random, no Date), the instruction and score bar, the game-over banner, key and
// click input, an optional timer on the page's clock (the sandbox's fake clock), and the API the
// browser sandbox reads after every step:
//   flywheelGame.start(seed) -> the instruction   (a new episode, determined by the seed alone)
//   flywheelGame.state()     -> {score, over}
//   flywheelGame.board()     -> what the screen shows, as data (for the scripted players and tests)
// Every game is shown by the one page, index.html?game=<its folder>, which loads <folder>/game.js.
"use strict";

(function () {
  // FNV-1a of the seed's decimal text: any integer the task carries, exactly
  function hashSeed(seed) {
    const text = String(seed);
    let h = 0x811c9dc5;
    for (let i = 0; i < text.length; i++) {
      h ^= text.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    return h;
  }

  // mulberry32: uniform floats in [0, 1)
  function makeRng(seed) {
    let a = hashSeed(seed);
    const next = function () {
      a = (a + 0x6d2b79f5) | 0;
      let t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
    next.int = function (n) { return Math.floor(next() * n); };
    return next;
  }

  // The page's game: a script inserted before the page's load event delays that event, so the game
  // has registered by the time the sandbox's page.goto(..., wait_until="load") returns.
  function loadGame() {
    const folder = new URLSearchParams(location.search).get("game") || "";
    if (!/^[a-z0-9_]+$/.test(folder)) throw new Error("no game named: open index.html?game=<folder>");
    const script = document.createElement("script");
    script.src = folder + "/game.js";
    document.body.appendChild(script);
  }

  // spec: {title, instruction, init(rng) -> state, draw(ctx, state), board(state),
  //        key?(state, key) -> handled, click?(state, x, y), tickMs?, tick?(state)}
  // A state holds at least {score, over}; key/click/tick change it, the harness redraws.
  function register(spec) {
    const canvas = document.getElementById("board");
    const ctx = canvas.getContext("2d");
    const scoreEl = document.getElementById("score");
    document.title = spec.title;
    document.getElementById("instruction").textContent = spec.instruction;
    let state = null;
    let timer = null;

    function redraw() {
      spec.draw(ctx, state);
      scoreEl.textContent = "Score: " + state.score + (state.over ? "   Game over" : "");
      if (state.over) {
        ctx.fillStyle = "rgba(0, 0, 0, 0.45)";
        ctx.fillRect(0, 64, canvas.width, 32);
        ctx.fillStyle = "#fff";
        ctx.font = "bold 16px Arial";
        ctx.textAlign = "center";
        ctx.textBaseline = "middle";
        ctx.fillText("GAME OVER", canvas.width / 2, 80);
      }
    }

    function stopTimer() {
      if (timer !== null) { clearInterval(timer); timer = null; }
    }

    document.addEventListener("keydown", function (e) {
      if (state === null || state.over || !spec.key) return;
      if (spec.key(state, e.key)) {
        e.preventDefault();
        if (state.over) stopTimer();
        redraw();
      }
    });

    canvas.addEventListener("click", function (e) {
      if (state === null || state.over || !spec.click) return;
      const r = canvas.getBoundingClientRect();
      spec.click(state, e.clientX - r.left, e.clientY - r.top);
      if (state.over) stopTimer();
      redraw();
    });

    window.flywheelGame = {
      start: function (seed) {
        stopTimer();
        state = spec.init(makeRng(seed));
        state.score = 0;
        state.over = false;
        if (spec.tickMs) {
          timer = setInterval(function () {
            if (state.over) { stopTimer(); return; }
            spec.tick(state);
            if (state.over) stopTimer();
            redraw();
          }, spec.tickMs);
        }
        redraw();
        return spec.instruction;
      },
      state: function () {
        return state === null ? {score: 0, over: false} : {score: state.score, over: state.over};
      },
      board: function () {
        const wrap = document.getElementById("wrap").getBoundingClientRect();
        const r = canvas.getBoundingClientRect();
        // where the board is on the task area (#wrap), for players that click
        const view = {x: r.x - wrap.x, y: r.y - wrap.y, width: wrap.width, height: wrap.height};
        return Object.assign({view: view, score: state.score, over: state.over}, spec.board(state));
      },
    };
  }

  window.Flywheel = {register: register, loadGame: loadGame, makeRng: makeRng};
})();
