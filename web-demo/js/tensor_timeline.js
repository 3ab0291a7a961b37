// Active memory by tensor: every live allocation its own band over time, stacked in the
// order the allocations were made (as PyTorch's memory_viz "Active Memory Timeline" draws
// them), with the allocator's reserved bytes as a line over the stack. Zoom (wheel, + and −,
// the buttons) and pan (drag, Shift+arrows, the buttons) move through the operations;
// hovering, or the arrow keys once the canvas has focus, pick one allocation, and
// `onPick(band)` says which.
//
// Drawn per pixel column into one ImageData: a column shows the live allocations at the
// operation within it where the most bytes are live (so peaks are exact at any zoom), each
// allocation a run of pixels in its colour; allocations thinner than a pixel are drawn grey,
// together. So hundreds of thousands of bands cost one pass over the operations and, per
// column, one walk of what is live.
// Invariants: `bands` is a Float64Array of [start, end, size, stack] per allocation in
// operation order (TraceFile.bands()), `sizes` (when given) replaces each band's size (a
// replay's blocks; 0: refused); `base` bytes (held before a cut history began) lie in
// light grey under every column; the view always lies within [0, length].

import { bytes, count } from './units.js';

const H = 220;
const PAD = { left: 64, right: 8, top: 10, bottom: 18 };
const GREY = 0xffada39a; // ABGR of #9aa3ad: allocations thinner than a pixel
const HUES = [210, 145, 28, 275, 350, 95, 190, 45, 320, 0, 250, 120];
const RESERVED = '#7b4bc4';
const BASE = 0xffe3ded9; // ABGR of #d9dee3: held before the history's first event

/** An opaque colour for band `i` as ABGR (the byte order of ImageData on little-endian machines). */
function colour(i) {
  const h = HUES[i % HUES.length] / 360;
  const l = 0.48 + 0.12 * ((i * 7) % 3) / 2;
  const s = 0.62;
  const f = (n) => {
    const k = (n + h * 12) % 12;
    const a = s * Math.min(l, 1 - l);
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return (0xff << 24 | f(4) << 16 | f(8) << 8 | f(0)) >>> 0;
}

export class TensorTimeline {
  /** Builds the timeline in `host`; `onPick(band | null)`, `onView(from, to)` when the view moves. */
  constructor(host, { title, onPick = null, onView = null }) {
    host.innerHTML = '';
    const bar = document.createElement('div');
    bar.className = 'tensor-bar';
    const h = document.createElement('strong');
    h.textContent = title;
    this.info = document.createElement('span');
    this.info.className = 'tensor-info';
    bar.append(h, ' ', this.info);
    const tools = document.createElement('div');
    tools.className = 'tensor-tools';
    for (const [label, act] of [['Zoom in', () => this.zoom(0.5)], ['Zoom out', () => this.zoom(2)],
      ['◀ Pan', () => this.pan(-0.25)], ['Pan ▶', () => this.pan(0.25)], ['Whole run', () => this.setView(0, this.length)]]) {
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = label;
      b.addEventListener('click', act);
      tools.append(b);
    }
    this.canvas = document.createElement('canvas');
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute('role', 'img');
    this.canvas.setAttribute('aria-label', `${title}: each live allocation a band over time. Arrow keys pick a time and an `
      + 'allocation (its frames are shown beside), End goes to the last time, + and − zoom, Shift with the arrows pans, Home shows the whole run');
    host.append(bar, tools, this.canvas);
    this.ctx = this.canvas.getContext('2d');
    this.onPick = onPick;
    this.onView = onView;
    this.bands = null;
    this.length = 0;
    this.from = 0;
    this.to = 0;
    this.picked = null;
    this.cursor = null; // { col, band } chosen from the keyboard
    this.canvas.addEventListener('wheel', (e) => {
      if (!this.bands) return;
      e.preventDefault();
      this.zoom(e.deltaY > 0 ? 1.25 : 0.8, this.opAt(e.offsetX));
    }, { passive: false });
    let drag = null;
    this.canvas.addEventListener('pointerdown', (e) => { drag = { x: e.clientX, from: this.from, to: this.to }; });
    window.addEventListener('pointerup', () => { drag = null; });
    this.canvas.addEventListener('pointermove', (e) => {
      if (drag && (e.buttons & 1)) {
        const per = (drag.to - drag.from) / this.cols();
        const shift = Math.round((drag.x - e.clientX) * per);
        this.setView(drag.from + shift, drag.to + shift);
        return;
      }
      this.hover(e.offsetX, e.offsetY);
    });
    this.canvas.addEventListener('keydown', (e) => this.key(e));
    new ResizeObserver(() => this.draw()).observe(this.canvas);
  }

  /**
   * New bands: `{ bands, length, sizes, reserved, yMax }`: `reserved` (one value per
   * operation) is drawn as a line; `yMax` shares a scale with another timeline.
   */
  setBands({ bands, length, sizes = null, reserved = null, yMax = 0, base = 0 }) {
    this.bands = bands;
    this.base = base;
    this.length = length;
    this.sizes = sizes;
    this.reserved = reserved;
    const n = bands.length / 4;
    // The operation each allocation ends at, and the live bytes after every operation.
    this.endAt = new Int32Array(length + 1).fill(-1);
    const delta = new Float64Array(length + 1);
    for (let b = 0; b < n; b++) {
      const end = bands[b * 4 + 1];
      if (end < length) this.endAt[end] = b;
      const size = this.size(b);
      delta[bands[b * 4]] += size;
      delta[end] -= size;
    }
    this.live = new Float64Array(length);
    let total = base;
    let peak = base;
    for (let i = 0; i < length; i++) {
      total += delta[i];
      this.live[i] = total;
      if (total > peak) peak = total;
      if (reserved && reserved[i] > peak) peak = reserved[i];
    }
    this.peak = peak;
    this.yMax = yMax;
    this.picked = null;
    this.cursor = null;
    this.from = 0;
    this.to = length;
    this.info.textContent = `${count(n)} allocations over ${count(length)} operations; at most ${bytes(peak)}`;
    this.draw();
  }

  size(b) {
    return this.sizes ? this.sizes[b] : this.bands[b * 4 + 2];
  }

  cols() {
    return Math.max(1, Math.floor(this.canvas.clientWidth - PAD.left - PAD.right));
  }

  opAt(x) {
    const f = Math.min(1, Math.max(0, (x - PAD.left) / this.cols()));
    return Math.floor(this.from + f * (this.to - this.from));
  }

  setView(from, to, quiet = false) {
    if (!this.bands) return;
    const span = Math.max(1, Math.min(this.length, Math.round(to - from)));
    let a = Math.round(from);
    a = Math.max(0, Math.min(this.length - span, a));
    this.from = a;
    this.to = a + span;
    this.draw();
    if (!quiet && this.onView) this.onView(this.from, this.to);
  }

  zoom(factor, at = (this.from + this.to) / 2) {
    const span = (this.to - this.from) * factor;
    const f = (at - this.from) / Math.max(1, this.to - this.from);
    this.setView(at - f * span, at - f * span + span);
  }

  pan(fraction) {
    const shift = (this.to - this.from) * fraction;
    this.setView(this.from + shift, this.to + shift);
  }

  /** For each column, the operation within it where the most bytes are live. */
  instants(cols) {
    const out = new Int32Array(cols);
    const span = this.to - this.from;
    for (let c = 0; c < cols; c++) {
      const a = this.from + Math.floor((c * span) / cols);
      const b = Math.max(a + 1, this.from + Math.floor(((c + 1) * span) / cols));
      let best = a;
      for (let i = a; i < b && i < this.length; i++) if (this.live[i] > this.live[best]) best = i;
      out[c] = Math.min(best, this.length - 1);
    }
    return out;
  }

  /**
   * Sweeps the operations once, calling `visit(col, liveBands)` with the allocations live
   * after each column's instant, in the order they were made.
   */
  sweep(instants, visit) {
    const { bands } = this;
    const n = bands.length / 4;
    let live = [];
    let gone = 0;
    let next = 0;
    const removed = new Uint8Array(n);
    let t = 0;
    for (let c = 0; c < instants.length; c++) {
      const until = instants[c];
      for (; t <= until; t++) {
        while (next < n && bands[next * 4] === t) live.push(next++);
        const e = this.endAt[t];
        if (e >= 0) { removed[e] = 1; gone++; }
      }
      if (gone > 64 && gone * 2 > live.length) {
        live = live.filter((b) => !removed[b]);
        gone = 0;
      }
      visit(c, live, removed);
    }
  }

  draw() {
    const width = this.canvas.clientWidth;
    if (!width) return;
    if (this.canvas.width !== width) {
      this.canvas.width = width;
      this.canvas.height = H;
    }
    const ctx = this.ctx;
    ctx.clearRect(0, 0, width, H);
    ctx.font = '11px system-ui, sans-serif';
    if (!this.bands || this.length === 0) {
      ctx.fillStyle = '#5d6773';
      ctx.fillText('Nothing to draw yet.', PAD.left, H / 2);
      return;
    }
    const cols = this.cols();
    const plotH = H - PAD.top - PAD.bottom;
    const yMax = Math.max(this.yMax, this.peak, 1) * 1.05;
    const perPx = yMax / plotH;
    const image = ctx.createImageData(cols, plotH);
    const px = new Uint32Array(image.data.buffer);
    const instants = this.instants(cols);
    this.lastInstants = instants;
    const baseRows = Math.min(plotH, Math.floor(this.base / perPx));
    this.sweep(instants, (c, live, removed) => {
      for (let r = 0; r < baseRows; r++) px[(plotH - 1 - r) * cols + c] = BASE;
      let y = this.base;
      for (const b of live) {
        if (removed[b]) continue;
        const s = this.size(b);
        if (s <= 0) continue;
        const y0 = y / perPx;
        y += s;
        const y1 = y / perPx;
        const thin = y1 - y0 < 1;
        const rgba = b === (this.picked && this.picked.band) ? 0xff2d2dd0 : (thin ? GREY : colour(b));
        const r0 = Math.floor(y0);
        const r1 = Math.min(plotH, Math.max(r0 + 1, Math.floor(y1)));
        for (let r = r0; r < r1; r++) px[(plotH - 1 - r) * cols + c] = rgba;
        if (r0 >= plotH) break;
      }
    });
    ctx.putImageData(image, PAD.left, PAD.top);
    // Reserved bytes, as the allocator held them, over the stack.
    if (this.reserved) {
      ctx.strokeStyle = RESERVED;
      ctx.lineWidth = 1.5;
      ctx.beginPath();
      for (let c = 0; c < cols; c++) {
        const yy = PAD.top + plotH * (1 - this.reserved[instants[c]] / yMax);
        if (c === 0) ctx.moveTo(PAD.left, yy); else ctx.lineTo(PAD.left + c, yy);
      }
      ctx.stroke();
    }
    ctx.fillStyle = '#5d6773';
    ctx.textBaseline = 'middle';
    for (let i = 0; i <= 4; i++) {
      const v = (yMax / 1.05) * (i / 4);
      ctx.fillText(bytes(v), 2, PAD.top + plotH * (1 - v / yMax), PAD.left - 6);
    }
    ctx.textBaseline = 'alphabetic';
    ctx.fillText(`op ${count(this.from)}`, PAD.left, H - 4);
    ctx.textAlign = 'right';
    ctx.fillText(`op ${count(this.to)}`, width - PAD.right, H - 4);
    ctx.textAlign = 'left';
    if (this.cursor) {
      ctx.strokeStyle = '#1d232b';
      ctx.beginPath();
      ctx.moveTo(PAD.left + this.cursor.col + 0.5, PAD.top);
      ctx.lineTo(PAD.left + this.cursor.col + 0.5, PAD.top + plotH);
      ctx.stroke();
    }
  }

  /** The allocations live at column `col`'s instant, bottom first, with their byte offsets. */
  stackAt(col) {
    const instants = this.lastInstants || this.instants(this.cols());
    const c = Math.max(0, Math.min(instants.length - 1, col));
    let out = [];
    this.sweep(instants.subarray(0, c + 1), (i, live, removed) => {
      if (i !== c) return;
      let y = this.base;
      out = [];
      for (const b of live) {
        if (removed[b] || this.size(b) <= 0) continue;
        out.push({ band: b, y0: y, y1: y + this.size(b) });
        y += this.size(b);
      }
    });
    return { op: instants[c], stack: out };
  }

  /** The band under (x, y) in CSS pixels, picked. */
  hover(x, y) {
    if (!this.bands) return;
    const col = Math.floor(x - PAD.left);
    if (col < 0 || col >= this.cols()) return;
    const plotH = H - PAD.top - PAD.bottom;
    const yMax = Math.max(this.yMax, this.peak, 1) * 1.05;
    const at = ((PAD.top + plotH - y) / plotH) * yMax;
    const { op, stack } = this.stackAt(col);
    const hit = stack.find((s) => at >= s.y0 && at < s.y1);
    this.pick(hit ? hit.band : null, op);
  }

  pick(band, op) {
    const same = this.picked && this.picked.band === band;
    this.picked = band === null ? null : { band, op };
    if (!same) this.draw();
    if (this.onPick) this.onPick(this.picked ? this.describe(band, op) : null);
  }

  /** A band in words, for the frames panel. */
  describe(band, op) {
    const b = this.bands;
    const end = b[band * 4 + 1];
    return {
      band, op, start: b[band * 4], end: end >= this.length ? null : end,
      size: this.size(band), recordedSize: b[band * 4 + 2], stack: b[band * 4 + 3],
    };
  }

  key(e) {
    if (!this.bands) return;
    const cols = this.cols();
    if (!this.cursor) this.cursor = { col: Math.floor(cols / 2), index: 0 };
    const k = e.key;
    if (k === '+' || k === '=') this.zoom(0.5);
    else if (k === '-') this.zoom(2);
    else if (k === 'Home') this.setView(0, this.length);
    else if (k === 'End') this.cursor.col = cols - 1;
    else if (e.shiftKey && (k === 'ArrowLeft' || k === 'ArrowRight')) this.pan(k === 'ArrowLeft' ? -0.25 : 0.25);
    else if (k === 'ArrowLeft' || k === 'ArrowRight') {
      this.cursor.col = Math.max(0, Math.min(cols - 1, this.cursor.col + (k === 'ArrowLeft' ? -1 : 1) * Math.max(1, Math.round(cols / 50))));
    } else if (k === 'ArrowUp' || k === 'ArrowDown') this.cursor.index += k === 'ArrowUp' ? 1 : -1;
    else return;
    e.preventDefault();
    const { op, stack } = this.stackAt(this.cursor.col);
    if (!stack.length) {
      this.pick(null, op);
      this.draw();
      return;
    }
    // Up and down walk the stack from the largest allocation at first focus.
    if (this.cursor.index === 0 && !this.cursor.started) {
      let best = 0;
      stack.forEach((s, i) => { if (s.y1 - s.y0 > stack[best].y1 - stack[best].y0) best = i; });
      this.cursor.index = best;
      this.cursor.started = true;
    }
    this.cursor.index = Math.max(0, Math.min(stack.length - 1, this.cursor.index));
    this.pick(stack[this.cursor.index].band, op);
    this.draw();
  }
}
