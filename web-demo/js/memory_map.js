// Memory map: every segment a bar, its blocks at true proportion (or log-scaled), each
// state drawn with a colour *and* a pattern: allocated (solid, with the rounding waste
// beyond the request dotted), cached free (hatched), pending free (cross-hatched). Under
// virtual memory a bar is an address range up to its last memory: idle pages (cached pages
// wholly inside their block, which can move or go back) are hatched in green, and unmapped
// address space, where pages moved away, is left blank inside a dashed outline. A
// marker gives the pool, the label the size and stream. Hovering or moving the keyboard
// focus over a block shows its address, size, requested size and state; Enter or a click
// activates it (the by-hand view frees it). Zoom (the + and − buttons, + and - on the
// map, Ctrl and the wheel) makes rows taller and labels larger. Under the map, a segment list (segment_list.js)
// sorts the segments by address, size or free bytes and selects one in the map.
//
// Input is the wasm `memory_map()` flat array (see wasm/src/memory_map.rs). Only visible
// rows are drawn, so a map of hundreds of segments redraws within a frame.
// Invariant: `this.segments` is the last decoded map; the focus, when set, names a block
// that exists in it.

import { bytes, hex } from './units.js';
import { SegmentList } from './segment_list.js';

export const PALETTE = {
  allocated: '#2f6fdb', waste: '#9ec0f5', inactive: '#d9dde3', pending: '#f0a030', idle: '#5bb98c',
  small: '#14a38b', large: '#7b4bc4', outline: '#7d8793', focus: '#e0366f', text: '#1d232b',
};
const SEGMENT_FIELDS = 6;
const BLOCK_FIELDS = 4;
export const STATE = { ALLOCATED: 0, PENDING: 1, INACTIVE: 2, IDLE: 3, UNMAPPED: 4 };
const STATE_NAMES = [
  'allocated', 'pending free (waits for another stream)', 'cached free',
  'idle pages: cached, wholly free pages (empty_cache returns them; cachalot’s policy moves them under new requests)',
  'unmapped address space: no memory behind it',
];
const LABEL_W = 150;
const MAX_VIEW_H = 360;
const MIN_VIEW_H = 80;
/** Row heights (px) at each zoom level; level 0 fits the rows to the map (5 to 20 px). */
const ZOOM_PITCH = [0, 14, 18, 24];

/** Segment kinds (wasm/src/memory_map.rs): under virtual memory a row is one run of mapped pages. */
export const KIND = { CLASSIC: 0, EXPANDABLE: 1, PAGED: 2 };

/** The flat array as `[{address, total, stream, large, kind, blocks: [{address, size, requested, state}]}]`. */
export function decode(flat) {
  const segments = [];
  const n = flat[0] || 0;
  let i = 1;
  for (let s = 0; s < n; s++) {
    const seg = {
      address: flat[i], total: flat[i + 1], stream: flat[i + 2],
      large: flat[i + 3] === 1, kind: flat[i + 4], blocks: [],
    };
    const count = flat[i + 5];
    i += SEGMENT_FIELDS;
    for (let b = 0; b < count; b++, i += BLOCK_FIELDS) {
      seg.blocks.push({ address: flat[i], size: flat[i + 1], requested: flat[i + 2], state: flat[i + 3] });
    }
    segments.push(seg);
  }
  return segments;
}

function pattern(ctx, paint) {
  const c = document.createElement('canvas');
  c.width = 8;
  c.height = 8;
  paint(c.getContext('2d'));
  return ctx.createPattern(c, 'repeat');
}

/** Diagonal hatching on white, in `colour` and lines `width` wide. */
function hatch(colour, width) {
  return (g) => {
    g.fillStyle = '#fff';
    g.fillRect(0, 0, 8, 8);
    g.strokeStyle = colour;
    g.lineWidth = width;
    g.beginPath();
    g.moveTo(0, 8); g.lineTo(8, 0);
    g.moveTo(-2, 2); g.lineTo(2, -2);
    g.moveTo(6, 10); g.lineTo(10, 6);
    g.stroke();
  };
}

function patterns(ctx) {
  return {
    allocated: PALETTE.allocated,
    waste: pattern(ctx, (g) => {
      g.fillStyle = PALETTE.waste;
      g.fillRect(0, 0, 8, 8);
      g.fillStyle = '#fff';
      g.fillRect(1, 1, 2, 2);
      g.fillRect(5, 5, 2, 2);
    }),
    inactive: pattern(ctx, hatch('#aab1ba', 1.5)),
    idle: pattern(ctx, hatch(PALETTE.idle, 2)),
    pending: pattern(ctx, (g) => {
      g.fillStyle = PALETTE.pending;
      g.fillRect(0, 0, 8, 8);
      g.strokeStyle = '#8a4d00';
      g.lineWidth = 1;
      g.beginPath();
      g.moveTo(0, 8); g.lineTo(8, 0);
      g.moveTo(0, 0); g.lineTo(8, 8);
      g.stroke();
    }),
  };
}

/** A block described for the tooltip. */
export function describeBlock(seg, block) {
  const state = STATE_NAMES[block.state];
  const lines = [`${hex(block.address)}  ${state}`, `size       ${bytes(block.size)} (${block.size} B)`];
  if (block.state === STATE.ALLOCATED || block.state === STATE.PENDING) {
    const waste = block.size - block.requested;
    lines.push(`requested  ${bytes(block.requested)} (${block.requested} B)`);
    lines.push(`waste      ${bytes(waste)} of rounding and unsplit remainder`);
  }
  const pool = `${seg.large ? 'large' : 'small'} pool`;
  if (seg.kind === KIND.CLASSIC) {
    lines.push(`segment    ${hex(seg.address)}, ${pool}, ${bytes(seg.total)}, stream ${seg.stream}`);
  } else {
    const mapped = seg.blocks.filter((b) => b.state !== STATE.UNMAPPED).reduce((n, b) => n + b.size, 0);
    lines.push(`range      ${hex(seg.address)}, ${pool}, ${bytes(mapped)} mapped in the ${bytes(seg.total)} drawn, stream ${seg.stream}`);
  }
  return lines.join('\n');
}

export class MemoryMap {
  /** Builds the map inside `host`; `onActivate(seg, block)` runs on click or Enter. */
  constructor(host, { onActivate = null, caption = 'Memory map' } = {}) {
    this.host = host;
    this.onActivate = onActivate;
    this.segments = [];
    this.log = false;
    this.focus = null;
    host.innerHTML = '';
    const bar = document.createElement('div');
    bar.className = 'map-bar';
    const title = document.createElement('strong');
    title.textContent = caption;
    this.info = document.createElement('span');
    this.info.className = 'note';
    const logId = `${host.id}-log`;
    const logBox = document.createElement('input');
    logBox.type = 'checkbox';
    logBox.id = logId;
    const logLabel = document.createElement('label');
    logLabel.htmlFor = logId;
    logLabel.textContent = 'log scale';
    logBox.addEventListener('change', () => { this.log = logBox.checked; this.draw(); });
    this.logBox = logBox;
    // Zoom: taller rows and larger labels, for maps of hundreds of segments (a row is 9 px
    // there, its label 7 px); + and - on the map, or Ctrl and the wheel, do the same.
    this.zoom = 0;
    const zoomButton = (text, label, by) => {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'zoom';
      b.textContent = text;
      b.setAttribute('aria-label', label);
      b.title = label;
      b.addEventListener('click', () => this.zoomBy(by));
      return b;
    };
    this.zoomOut = zoomButton('−', 'Zoom out: shorter rows', -1);
    this.zoomIn = zoomButton('+', 'Zoom in: taller rows, larger labels', 1);
    this.zoomOut.disabled = true;
    bar.append(title, this.info, logBox, logLabel, this.zoomOut, this.zoomIn);
    this.scroll = document.createElement('div');
    this.scroll.className = 'map-scroll';
    this.canvas = document.createElement('canvas');
    this.canvas.tabIndex = 0;
    this.canvas.setAttribute('role', 'img');
    this.canvas.setAttribute('aria-label', `${caption}: arrow keys move between blocks, Enter activates one`);
    this.spacer = document.createElement('div');
    this.scroll.append(this.canvas, this.spacer);
    this.tip = document.createElement('div');
    this.tip.className = 'map-tip';
    this.tip.hidden = true;
    this.tip.setAttribute('role', 'tooltip');
    host.append(bar, this.scroll, this.tip);
    this.list = new SegmentList(host, (s) => this.selectSegment(s));
    this.ctx = this.canvas.getContext('2d');
    this.fills = patterns(this.ctx);
    this.scroll.addEventListener('scroll', () => this.draw());
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => { if (!this.focus) this.tip.hidden = true; });
    this.canvas.addEventListener('click', (e) => this.click(e));
    this.canvas.addEventListener('keydown', (e) => this.key(e));
    this.canvas.addEventListener('wheel', (e) => {
      if (!e.ctrlKey) return;
      e.preventDefault();
      this.zoomBy(e.deltaY < 0 ? 1 : -1);
    }, { passive: false });
    this.canvas.addEventListener('blur', () => { this.tip.hidden = true; });
    new ResizeObserver(() => this.draw()).observe(this.scroll);
  }

  /** Shows a new state (the wasm `memory_map()` array). */
  update(flat) {
    this.segments = decode(flat);
    this.ownMax = this.segments.reduce((m, seg) => Math.max(m, seg.total), 1);
    this.maxTotal = Math.max(this.ownMax, this.sharedMax || 0);
    if (this.focus && !this.blockAt(this.focus.seg, this.focus.block)) this.focus = null;
    const blocks = this.segments.reduce((n, s) => n + s.blocks.length, 0);
    const n = this.segments.length;
    // Under virtual memory a row is an address range up to its last memory, not a device
    // allocation: the caption names what the figures count.
    const rows = this.segments.some((s) => s.kind !== KIND.CLASSIC)
      ? `${n} address range${n === 1 ? '' : 's'} holding memory` : `${n} segment${n === 1 ? '' : 's'}`;
    this.info.textContent = `${rows}, ${blocks} block${blocks === 1 ? '' : 's'}`;
    this.list.update(this.segments);
    this.draw();
  }

  /** Selects segment `s` (its first block), scrolls the map to it and describes the block. */
  selectSegment(s) {
    if (!this.segments[s]) return;
    this.focus = { seg: s, block: 0 };
    this.canvas.focus({ preventScroll: true });
    this.canvas.scrollIntoView({ block: 'nearest' });
    this.key({ key: 'Focus', preventDefault() {} });
  }

  /** Draws bars against `bytes` at least (two maps shown side by side share one scale); null: each map its own. */
  shareScale(bytes) {
    this.sharedMax = bytes;
    const max = Math.max(this.ownMax || 1, bytes || 0);
    if (max === this.maxTotal) return;
    this.maxTotal = max;
    this.draw();
  }

  pitch() {
    const n = this.segments.length;
    const fit = n > 600 ? 5 : n > 200 ? 9 : n > 60 ? 13 : 20;
    return Math.max(fit, ZOOM_PITCH[this.zoom]);
  }

  /** The label's font size in px at the current zoom (no label below a 9 px row). */
  labelPx() {
    const pitch = this.pitch();
    return pitch >= 9 ? Math.min(12, pitch - 2) : 0;
  }

  /** Zooms in (`by` > 0) or out, keeping the focused segment, or the top row, in view. */
  zoomBy(by) {
    const zoom = Math.max(0, Math.min(ZOOM_PITCH.length - 1, this.zoom + by));
    if (zoom === this.zoom) return;
    const row = this.focus ? this.focus.seg : Math.floor(this.scroll.scrollTop / this.pitch());
    this.zoom = zoom;
    this.zoomOut.disabled = zoom === 0;
    this.zoomIn.disabled = zoom === ZOOM_PITCH.length - 1;
    this.draw();
    this.scroll.scrollTop = row * this.pitch();
    this.draw();
  }

  blockAt(s, b) {
    const seg = this.segments[s];
    return seg && seg.blocks[b] ? { seg, block: seg.blocks[b] } : null;
  }

  /** x offset and width of each block of `seg`, and the bar length. */
  geometry(seg, barW) {
    const maxTotal = this.maxTotal || 1;
    let len;
    let weights;
    if (this.log) {
      const unit = 1 << 20;
      len = Math.max(8, barW * Math.log2(seg.total / unit + 1) / Math.log2(maxTotal / unit + 1));
      weights = seg.blocks.map((b) => Math.log2(b.size / 512 + 1));
    } else {
      len = Math.max(3, barW * seg.total / maxTotal);
      weights = seg.blocks.map((b) => b.size);
    }
    const sum = weights.reduce((a, w) => a + w, 0) || 1;
    const xs = [];
    let x = 0;
    for (const w of weights) {
      xs.push([x, (len * w) / sum]);
      x += (len * w) / sum;
    }
    return { len, xs };
  }

  draw() {
    const dpr = window.devicePixelRatio || 1;
    const width = this.scroll.clientWidth;
    if (!width) return;
    const pitch = this.pitch();
    const total = this.segments.length * pitch + 8;
    const VIEW_H = Math.max(MIN_VIEW_H, Math.min(MAX_VIEW_H, total));
    this.viewH = VIEW_H;
    this.spacer.style.height = `${Math.max(0, total - VIEW_H)}px`;
    if (this.canvas.width !== Math.round(width * dpr) || this.canvas.height !== Math.round(VIEW_H * dpr)) {
      this.canvas.width = Math.round(width * dpr);
      this.canvas.height = Math.round(VIEW_H * dpr);
      this.canvas.style.height = `${VIEW_H}px`;
    }
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, VIEW_H);
    const top = this.scroll.scrollTop;
    const barW = width - LABEL_W - 10;
    const h = Math.max(3, pitch - (pitch > 10 ? 5 : 2));
    ctx.font = `${this.labelPx() || 7}px ui-monospace, monospace`;
    ctx.textBaseline = 'middle';
    if (this.segments.length === 0) {
      ctx.fillStyle = PALETTE.outline;
      ctx.font = '13px system-ui, sans-serif';
      ctx.fillText('No segments: the allocator holds no device memory.', 12, 24);
      return;
    }
    const first = Math.max(0, Math.floor((top - 4) / pitch));
    const last = Math.min(this.segments.length, Math.ceil((top + VIEW_H) / pitch));
    for (let s = first; s < last; s++) {
      const seg = this.segments[s];
      const y = 4 + s * pitch - top;
      const { len, xs } = this.geometry(seg, barW);
      ctx.fillStyle = seg.large ? PALETTE.large : PALETTE.small;
      ctx.fillRect(LABEL_W - 10, y, 5, h);
      if (pitch >= 9) {
        ctx.fillStyle = PALETTE.text;
        const kind = seg.kind === KIND.PAGED ? ' paged' : seg.kind === KIND.EXPANDABLE ? ' exp' : '';
        const label = `${seg.large ? 'L' : 'S'} ${bytes(seg.total)} s${seg.stream}${kind}`;
        ctx.fillText(label, 4, y + h / 2, LABEL_W - 16);
      }
      seg.blocks.forEach((b, i) => {
        const [bx, bw] = xs[i];
        const x = LABEL_W + bx;
        if (b.state === STATE.ALLOCATED) {
          const used = b.size > 0 ? (bw * b.requested) / b.size : bw;
          ctx.fillStyle = this.fills.allocated;
          ctx.fillRect(x, y, used, h);
          ctx.fillStyle = this.fills.waste;
          ctx.fillRect(x + used, y, bw - used, h);
        } else if (b.state === STATE.UNMAPPED) {
          ctx.fillStyle = '#fff';
          ctx.fillRect(x, y, bw, h);
          ctx.strokeStyle = PALETTE.outline;
          ctx.setLineDash([3, 3]);
          ctx.strokeRect(x + 0.5, y + 0.5, Math.max(bw - 1, 0), h - 1);
          ctx.setLineDash([]);
        } else {
          ctx.fillStyle = b.state === STATE.PENDING ? this.fills.pending
            : b.state === STATE.IDLE ? this.fills.idle : this.fills.inactive;
          ctx.fillRect(x, y, bw, h);
        }
        if (i > 0 && bw >= 2) {
          ctx.fillStyle = '#fff';
          ctx.fillRect(x, y, 1, h);
        }
      });
      ctx.strokeStyle = PALETTE.outline;
      ctx.lineWidth = 1;
      ctx.strokeRect(LABEL_W + 0.5, y + 0.5, len - 1, h - 1);
      if (this.focus && this.focus.seg === s) {
        const [bx, bw] = xs[this.focus.block];
        ctx.strokeStyle = PALETTE.focus;
        ctx.lineWidth = 2;
        ctx.strokeRect(LABEL_W + bx - 1, y - 2, Math.max(bw, 2) + 2, h + 4);
      }
    }
  }

  /** The segment and block under a point of the canvas, if any. */
  hit(clientX, clientY) {
    const r = this.canvas.getBoundingClientRect();
    const x = clientX - r.left - LABEL_W;
    const y = clientY - r.top + this.scroll.scrollTop - 4;
    const pitch = this.pitch();
    const s = Math.floor(y / pitch);
    const seg = this.segments[s];
    if (!seg || y - s * pitch > pitch - 2 || x < 0) return null;
    const { xs } = this.geometry(seg, this.scroll.clientWidth - LABEL_W - 10);
    const b = xs.findIndex(([bx, bw]) => x >= bx && x < bx + Math.max(bw, 1));
    return b < 0 ? null : { s, b };
  }

  showTip(s, b, px, py) {
    const found = this.blockAt(s, b);
    if (!found) {
      this.tip.hidden = true;
      return;
    }
    this.tip.textContent = describeBlock(found.seg, found.block);
    this.tip.hidden = false;
    const hostW = this.host.clientWidth;
    const left = Math.min(px + 14, hostW - this.tip.offsetWidth - 4);
    this.tip.style.left = `${Math.max(4, left)}px`;
    this.tip.style.top = `${py + 16}px`;
  }

  hover(e) {
    const hit = this.hit(e.clientX, e.clientY);
    if (!hit) {
      this.tip.hidden = true;
      return;
    }
    const hr = this.host.getBoundingClientRect();
    this.showTip(hit.s, hit.b, e.clientX - hr.left, e.clientY - hr.top);
  }

  click(e) {
    const hit = this.hit(e.clientX, e.clientY);
    if (!hit) return;
    this.focus = { seg: hit.s, block: hit.b };
    this.activate();
  }

  activate() {
    const found = this.focus && this.blockAt(this.focus.seg, this.focus.block);
    if (found && this.onActivate) this.onActivate(found.seg, found.block);
    this.draw();
  }

  key(e) {
    if (this.segments.length === 0) return;
    let { seg, block } = this.focus || { seg: 0, block: 0 };
    const blocks = (s) => this.segments[s].blocks.length;
    switch (e.key) {
      case 'ArrowRight':
        if (this.focus && block + 1 < blocks(seg)) block += 1;
        else if (this.focus && seg + 1 < this.segments.length) { seg += 1; block = 0; }
        break;
      case 'ArrowLeft':
        if (block > 0) block -= 1;
        else if (seg > 0) { seg -= 1; block = blocks(seg) - 1; }
        break;
      case 'ArrowDown': seg = Math.min(this.segments.length - 1, seg + (this.focus ? 1 : 0)); block = Math.min(block, blocks(seg) - 1); break;
      case 'ArrowUp': seg = Math.max(0, seg - 1); block = Math.min(block, blocks(seg) - 1); break;
      case 'Home': seg = 0; block = 0; break;
      case 'End': seg = this.segments.length - 1; block = blocks(seg) - 1; break;
      case 'Enter': case ' ': case 'Delete':
        e.preventDefault();
        if (this.focus) this.activate();
        return;
      case 'Escape': this.focus = null; this.tip.hidden = true; this.draw(); return;
      case 'Focus': break;
      case '+': case '=': e.preventDefault(); this.zoomBy(1); return;
      case '-': case '_': e.preventDefault(); this.zoomBy(-1); return;
      default: return;
    }
    e.preventDefault();
    this.focus = { seg, block };
    const pitch = this.pitch();
    const y = 4 + seg * pitch;
    if (y < this.scroll.scrollTop) this.scroll.scrollTop = y - 4;
    else if (y + pitch > this.scroll.scrollTop + this.viewH) this.scroll.scrollTop = y + pitch - this.viewH + 4;
    this.draw();
    const { xs } = this.geometry(this.segments[seg], this.scroll.clientWidth - LABEL_W - 10);
    const barTop = this.scroll.offsetTop;
    this.showTip(seg, block, LABEL_W + xs[block][0], barTop + y - this.scroll.scrollTop + pitch);
  }
}
