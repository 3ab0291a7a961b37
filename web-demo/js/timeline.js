// Timeline: requested, allocated and reserved bytes after every operation of a trace
// (from a wasm `ReplayRun`), drawn per pixel column as the maximum over the operations the
// column covers, with the peak of reserved memory marked and the player's position as a
// cursor. Clicking or dragging seeks. Beside a snapshot's replay, the recorded run's own
// reserved and allocated bytes (recorded_run.js) are drawn dashed and dotted.
// Invariant: the envelope is recomputed whenever the series or the canvas width change;
// drawing a frame only repaints from it (cheap enough for every animation frame).

import { bytes, count } from './units.js';

const COLORS = { reserved: '#7b4bc4', allocated: '#2f6fdb', requested: '#14a38b', peak: '#d0312d', cursor: '#1d232b', oom: '#c2185b', recorded: '#e07b00' };
const H = 170;
const PAD = { left: 64, right: 10, top: 14, bottom: 18 };

export class Timeline {
  /** Builds the timeline inside `host`; `onSeek(position)` runs on click or drag. */
  constructor(host, { onSeek = null } = {}) {
    host.innerHTML = '';
    this.canvas = document.createElement('canvas');
    this.canvas.setAttribute('role', 'img');
    this.canvas.setAttribute('aria-label', 'Timeline of requested, allocated and reserved bytes; the scrub slider below moves through it');
    const legend = document.createElement('div');
    legend.className = 'legend';
    // Each swatch stays on the line of its name.
    legend.innerHTML = [['requested', COLORS.requested], ['allocated', COLORS.allocated], ['reserved', COLORS.reserved], ['peak reserved', COLORS.peak]]
      .map(([name, colour]) => `<span class="legend-item"><i style="background:${colour}"></i>${name}</span>`).join(' ');
    // The recorded run's own bytes (recorded_run.js), shown only beside a snapshot's replay.
    this.recordedLegend = document.createElement('span');
    this.recordedLegend.className = 'legend-item recorded';
    this.recordedLegend.innerHTML = `<i style="background:${COLORS.recorded}"></i>as recorded (dashed: reserved, dotted: allocated)`;
    this.recordedLegend.hidden = true;
    legend.append(' ', this.recordedLegend);
    host.append(this.canvas, legend);
    this.ctx = this.canvas.getContext('2d');
    this.series = null;
    this.position = 0;
    this.yMax = 0;
    this.onSeek = onSeek;
    this.envelopeWidth = 0;
    const seek = (e) => {
      if (!this.series || !this.onSeek) return;
      const r = this.canvas.getBoundingClientRect();
      const f = (e.clientX - r.left - PAD.left) / (r.width - PAD.left - PAD.right);
      this.onSeek(Math.round(Math.min(1, Math.max(0, f)) * this.series.length));
    };
    this.canvas.addEventListener('pointerdown', (e) => { this.canvas.setPointerCapture(e.pointerId); seek(e); });
    this.canvas.addEventListener('pointermove', (e) => { if (e.buttons & 1) seek(e); });
    new ResizeObserver(() => this.draw()).observe(this.canvas);
  }

  /** New series: `{requested, allocated, reserved, peakOp, peakReserved, ooms}` (Float64Arrays, one value per op; `ooms`: the refused ops, marked under the plot). */
  setSeries(series, yMax = 0) {
    this.series = series ? { ...series, length: series.reserved.length } : null;
    this.yMax = yMax;
    this.envelopeWidth = 0;
    this.recorded = null;
    this.recordedLegend.hidden = true;
    this.draw();
  }

  /** The recorded run's `{reserved, allocated}` (one value per op, as the series), drawn dashed; null: none. */
  setRecorded(recorded) {
    this.recorded = recorded && recorded.reserved.length === (this.series && this.series.length) ? recorded : null;
    this.recordedPeak = this.recorded ? this.recorded.reserved.reduce((a, b) => (b > a ? b : a), 0) : 0;
    this.recordedLegend.hidden = !this.recorded;
    this.envelopeWidth = 0;
    this.draw();
  }

  /** A shared scale (compare view): the largest value either side shows. */
  setScale(yMax) {
    this.yMax = yMax;
    this.draw();
  }

  setPosition(position) {
    this.position = position;
    this.draw();
  }

  envelope(cols) {
    const r = this.recorded;
    const s = r ? { ...this.series, recordedReserved: r.reserved, recordedAllocated: r.allocated } : this.series;
    const out = { requested: new Float64Array(cols), allocated: new Float64Array(cols), reserved: new Float64Array(cols) };
    if (r) Object.assign(out, { recordedReserved: new Float64Array(cols), recordedAllocated: new Float64Array(cols) });
    const n = s.length;
    for (let c = 0; c < cols; c++) {
      const a = Math.floor((c * n) / cols);
      const b = Math.max(a + 1, Math.floor(((c + 1) * n) / cols));
      for (const k of ['requested', 'allocated', 'reserved', 'recordedReserved', 'recordedAllocated']) {
        if (!out[k]) continue;
        const v = s[k];
        let m = 0;
        for (let i = a; i < b && i < n; i++) if (v[i] > m) m = v[i];
        out[k][c] = m;
      }
    }
    return out;
  }

  draw() {
    const dpr = window.devicePixelRatio || 1;
    const width = this.canvas.clientWidth;
    if (!width) return;
    if (this.canvas.width !== Math.round(width * dpr)) {
      this.canvas.width = Math.round(width * dpr);
      this.canvas.height = Math.round(H * dpr);
    }
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, H);
    ctx.font = '11px system-ui, sans-serif';
    const s = this.series;
    if (!s || s.length === 0) {
      ctx.fillStyle = '#5d6773';
      ctx.fillText('No trace replayed yet.', PAD.left, H / 2);
      return;
    }
    const cols = Math.max(1, Math.floor(width - PAD.left - PAD.right));
    if (this.envelopeWidth !== cols) {
      this.env = this.envelope(cols);
      this.envelopeWidth = cols;
    }
    const yMax = Math.max(this.yMax, s.peakReserved, this.recorded ? this.recordedPeak : 0, 1) * 1.08;
    const plotH = H - PAD.top - PAD.bottom;
    const y = (v) => PAD.top + plotH * (1 - v / yMax);
    // Axis and grid.
    ctx.strokeStyle = '#e3e6ea';
    ctx.fillStyle = '#5d6773';
    ctx.lineWidth = 1;
    ctx.textBaseline = 'middle';
    for (let i = 0; i <= 4; i++) {
      const v = (yMax / 1.08) * (i / 4);
      ctx.beginPath();
      ctx.moveTo(PAD.left, Math.round(y(v)) + 0.5);
      ctx.lineTo(width - PAD.right, Math.round(y(v)) + 0.5);
      ctx.stroke();
      ctx.fillText(bytes(v), 2, y(v), PAD.left - 6);
    }
    ctx.textBaseline = 'alphabetic';
    ctx.fillText('op 0', PAD.left, H - 4);
    ctx.textAlign = 'right';
    ctx.fillText(`op ${count(s.length)}`, width - PAD.right, H - 4);
    ctx.textAlign = 'left';
    // Reserved as an area, the others as lines.
    const env = this.env;
    ctx.fillStyle = 'rgba(123, 75, 196, 0.18)';
    ctx.beginPath();
    ctx.moveTo(PAD.left, y(0));
    for (let c = 0; c < cols; c++) ctx.lineTo(PAD.left + c, y(env.reserved[c]));
    ctx.lineTo(PAD.left + cols - 1, y(0));
    ctx.fill();
    for (const k of ['reserved', 'allocated', 'requested', 'recordedReserved', 'recordedAllocated']) {
      if (!env[k]) continue;
      ctx.strokeStyle = COLORS[k] || COLORS.recorded;
      ctx.lineWidth = k === 'requested' ? 1 : 1.5;
      ctx.setLineDash({ recordedReserved: [6, 3], recordedAllocated: [2, 2] }[k] || []);
      ctx.beginPath();
      for (let c = 0; c < cols; c++) {
        const py = y(env[k][c]);
        if (c === 0) ctx.moveTo(PAD.left, py);
        else ctx.lineTo(PAD.left + c, py);
      }
      ctx.stroke();
    }
    // Peak reserved.
    // Reached once op `peakOp` has run: at position peakOp + 1, where the cursor then stands.
    const px = PAD.left + ((s.peakOp + 1) / s.length) * cols;
    ctx.strokeStyle = COLORS.peak;
    ctx.setLineDash([4, 3]);
    ctx.beginPath();
    ctx.moveTo(px, PAD.top);
    ctx.lineTo(px, H - PAD.bottom);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = COLORS.peak;
    ctx.beginPath();
    ctx.arc(px, y(s.peakReserved), 3.5, 0, 2 * Math.PI);
    ctx.fill();
    const label = `peak reserved ${bytes(s.peakReserved)} at op ${count(s.peakOp)}`;
    const tw = ctx.measureText(label).width;
    ctx.fillText(label, Math.min(px + 6, width - PAD.right - tw), PAD.top - 3 + 10);
    // Each operation refused for lack of memory: a short red tick under the plot.
    if (s.ooms && s.ooms.length) {
      ctx.fillStyle = COLORS.oom;
      let last = -1;
      for (const op of s.ooms) {
        const ox = Math.round(PAD.left + ((op + 1) / s.length) * cols);
        if (ox === last) continue;
        last = ox;
        ctx.fillRect(ox - 1, H - PAD.bottom - 8, 2, 8);
      }
    }
    // Cursor.
    const cx = PAD.left + (this.position / s.length) * cols;
    ctx.strokeStyle = COLORS.cursor;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(cx, PAD.top);
    ctx.lineTo(cx, H - PAD.bottom);
    ctx.stroke();
  }
}
