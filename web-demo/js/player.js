// Player: plays one trace on one or more wasm Allocators in step (the compare view drives
// two), with play / pause, single steps (explained), back, start, end, a scrub slider and
// a speed in operations per second. Every animation frame while playing advances all
// targets by the operations due and calls `onFrame` once, which redraws the views.
// Invariant: every target's trace position equals `this.position` between calls; a
// target that fails stops playback and the error is reported, never swallowed. A move
// back replays the targets from a fresh start, and `onFrame` is told so (`rewound`).
// It also counts drawn frames, for the frames-per-second figure the browser test reads.

import { count } from './units.js';

const SPEEDS = [100, 1000, 10000, 100000, 1000000];

function button(text, label) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  b.setAttribute('aria-label', label);
  b.title = label;
  return b;
}

export class Player {
  /**
   * `onFrame(position, decisions, rewound)` redraws (decisions: per target, after a single
   * step; rewound: the targets were started afresh, as after a load or a move back);
   * `onError(error)` reports a failure; `describe(position)` names the next operation.
   */
  constructor(host, { onFrame, onError, describe = () => '' }) {
    this.onFrame = onFrame;
    this.onError = onError;
    this.describe = describe;
    this.targets = [];
    this.length = 0;
    this.position = 0;
    this.playing = false;
    this.opsPerSecond = 10000;
    this.carry = 0;
    this.frames = 0;
    this.lastToEndMs = null;
    const id = host.id;
    this.startBtn = button('◀◀ Start', 'Back to the start');
    this.backBtn = button('◀', 'Back one operation');
    this.playBtn = button('▶ Play', 'Play');
    this.stepBtn = button('Step ▶', 'Step one operation, explained');
    this.endBtn = button('End ▶▶', 'Replay to the end');
    const speedLabel = document.createElement('label');
    speedLabel.htmlFor = `${id}-speed`;
    speedLabel.textContent = 'Speed';
    this.speed = document.createElement('select');
    this.speed.id = `${id}-speed`;
    for (const s of SPEEDS) {
      const o = document.createElement('option');
      o.value = String(s);
      o.textContent = `${count(s)} ops/s`;
      o.selected = s === this.opsPerSecond;
      this.speed.append(o);
    }
    const scrubLabel = document.createElement('label');
    scrubLabel.htmlFor = `${id}-scrub`;
    scrubLabel.textContent = 'Position';
    this.scrub = document.createElement('input');
    this.scrub.type = 'range';
    this.scrub.id = `${id}-scrub`;
    this.scrub.min = '0';
    this.scrub.max = '0';
    this.scrub.value = '0';
    this.where = document.createElement('div');
    this.where.className = 'where';
    this.where.setAttribute('aria-live', 'off');
    host.innerHTML = '';
    host.append(this.startBtn, this.backBtn, this.playBtn, this.stepBtn, this.endBtn, speedLabel, this.speed,
      scrubLabel, this.scrub, this.where);
    this.startBtn.addEventListener('click', () => this.seek(0));
    this.backBtn.addEventListener('click', () => this.seek(this.position - 1));
    this.playBtn.addEventListener('click', () => this.toggle());
    this.stepBtn.addEventListener('click', () => this.stepOne());
    this.endBtn.addEventListener('click', () => this.toEnd());
    this.speed.addEventListener('change', () => { this.opsPerSecond = Number(this.speed.value); });
    this.scrub.addEventListener('input', () => this.seek(Number(this.scrub.value)));
    this.enable(false);
  }

  enable(on) {
    for (const c of [this.startBtn, this.backBtn, this.playBtn, this.stepBtn, this.endBtn, this.scrub]) c.disabled = !on;
  }

  /** Drives `targets` (Allocators with the same trace loaded at its start) over `length` operations. */
  load(targets, length) {
    this.pause();
    this.targets = targets;
    this.length = length;
    this.position = 0;
    this.scrub.max = String(length);
    this.enable(targets.length > 0);
    this.frame(null, true);
  }

  frame(decisions, rewound = false) {
    this.scrub.value = String(this.position);
    this.scrub.setAttribute('aria-valuetext', `operation ${count(this.position)} of ${count(this.length)}`);
    // Operations are numbered from 0, as in the decisions' headings and the timeline's peak:
    // after N operations run, the next is op N.
    const next = this.position < this.length ? `next: op ${count(this.position)}: ${this.describe(this.position)}` : 'end of the trace';
    this.where.textContent = `${count(this.position)} / ${count(this.length)} ops run · ${next}`;
    this.onFrame(this.position, decisions, rewound);
  }

  guard(fn) {
    try {
      fn();
      return true;
    } catch (e) {
      this.pause();
      this.onError(e);
      return false;
    }
  }

  advance(n) {
    return this.guard(() => {
      for (const t of this.targets) t.step(n);
      this.position = this.targets.length ? this.targets[0].trace_position() : 0;
    });
  }

  seek(position) {
    const p = Math.max(0, Math.min(this.length, Math.round(position)));
    const rewound = p < this.position;
    if (this.guard(() => {
      for (const t of this.targets) t.seek(p);
      this.position = p;
    })) this.frame(null, rewound);
  }

  stepOne() {
    this.pause();
    if (this.position >= this.length) return;
    let decisions = [];
    this.guard(() => {
      decisions = this.targets.map((t) => {
        t.set_explain(true);
        t.step(1);
        const d = JSON.parse(t.take_decisions());
        t.set_explain(false);
        return d;
      });
      this.position = this.targets[0].trace_position();
    });
    this.frame(decisions);
  }

  /** Replays everything left and draws the final state; resolves once it has been painted. */
  async toEnd() {
    this.pause();
    const t0 = performance.now();
    if (this.advance(this.length)) this.frame(null);
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    this.lastToEndMs = performance.now() - t0;
    return this.lastToEndMs;
  }

  toggle() {
    if (this.playing) this.pause();
    else this.play();
  }

  play() {
    if (this.playing || this.targets.length === 0) return;
    if (this.position >= this.length) this.seek(0);
    this.playing = true;
    this.playBtn.textContent = '❚❚ Pause';
    this.playBtn.setAttribute('aria-label', 'Pause');
    this.last = performance.now();
    this.carry = 0;
    const tick = (now) => {
      if (!this.playing) return;
      const due = (this.opsPerSecond * Math.min(now - this.last, 250)) / 1000 + this.carry;
      this.last = now;
      const n = Math.floor(due);
      this.carry = due - n;
      if (n > 0 && this.advance(n)) {
        this.frames += 1;
        this.frame(null);
      }
      if (this.position >= this.length) this.pause();
      else if (this.playing) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }

  pause() {
    this.playing = false;
    this.playBtn.textContent = '▶ Play';
    this.playBtn.setAttribute('aria-label', 'Play');
  }
}
