// The recorded run beside its replays: what a PyTorch snapshot says the run itself did (not
// a replay of it): its figures as a row of the replay's outcome table, its reserved and
// allocated bytes as dashed lines on the replay's timeline, its active memory by tensor
// beside the replay's (tensor_timeline.js, one view window and one scale for both), the
// stack frames of an allocation, a segment or a block (frames_panel.js), and the
// snapshot's segments as a list to point at. A trace that records no allocator (RMM CSV)
// says so, and shows the replay's tensors alone.
// Invariant: everything shown comes from the TraceFile being replayed (its recorded_*
// methods, the wasm reader's), or from the snapshot without a history shown last; the
// row's cells carry `data-field` (recorded_*) so a test reads them back.

import { bytes, count, hex } from './units.js';
import { TensorTimeline } from './tensor_timeline.js';
import { FramesPanel } from './frames_panel.js';
import { decode } from './memory_map.js';

const NONE = 4294967295;
/** The most segments the list shows (the map above draws them all). */
export const LISTED_SEGMENTS = 300;
const STATE_NAMES = ['allocated', 'pending free', 'cached free'];

const el = (tag, props = {}, ...children) => {
  const e = Object.assign(document.createElement(tag), props);
  e.append(...children);
  return e;
};

/** A row cell with its JSON field, its exact value, and the shown text. */
function cell(field, value, text) {
  const td = el('td', { textContent: text });
  td.dataset.field = field;
  td.dataset.value = String(value);
  return td;
}

/** The recorded run's row, shaped to `table`'s header (whatever columns it has). */
export function recordedRow(table, f) {
  table.querySelector('tr.recorded')?.remove();
  const headers = [...table.rows[0].cells].map((th) => th.textContent.trim());
  const row = table.insertRow(1);
  row.className = 'recorded';
  for (const [i, h] of headers.entries()) {
    if (i === 0) {
      const name = el('td', {}, el('b', { textContent: 'recorded run' }), ' (the snapshot’s own history; ');
      const segs = el('span', { textContent: `${count(f.segments)} segment${f.segments === 1 ? '' : 's'} when taken` });
      segs.dataset.field = 'recorded_segments';
      segs.dataset.value = String(f.segments);
      name.append(segs, ')');
      row.append(name);
    } else if (h === 'peak allocated') row.append(cell('recorded_peak_allocated_bytes', f.peak_allocated_bytes, bytes(f.peak_allocated_bytes)));
    else if (h === 'peak reserved') row.append(cell('recorded_peak_reserved_bytes', f.peak_reserved_bytes, bytes(f.peak_reserved_bytes)));
    else if (h === 'device allocs') row.append(cell('recorded_device_allocs', f.device_allocs, count(f.device_allocs)));
    else if (h === 'OOMs') row.append(cell('recorded_ooms', f.ooms, count(f.ooms)));
    else row.append(el('td', { textContent: '—', title: 'not in a snapshot: its history records blocks, not requests' }));
  }
  return row;
}

export class RecordedRun {
  /** Builds the section in `host`; `timeline` is the replay's Timeline (for the recorded lines). */
  constructor(host) {
    this.host = host;
    host.innerHTML = '';
    const title = el('h3', { id: 'recorded-run-title', textContent: 'Your run as recorded, beside the replay' });
    this.note = el('p', { className: 'note recorded-note' });
    const pair = el('div', { className: 'tensor-pair' });
    const left = el('div', { className: 'tensor-half', id: 'tensor-recorded' });
    const right = el('div', { className: 'tensor-half', id: 'tensor-replay' });
    pair.append(left, right);
    const framesHost = el('div', { className: 'frames-panel', id: 'recorded-frames' });
    this.segmentsHost = el('details', { className: 'recorded-segments', id: 'recorded-segments' });
    host.append(title, this.note, pair, framesHost, this.segmentsHost);
    this.frames = new FramesPanel(framesHost);
    const sync = (other) => (from, to) => other.setView(from, to, true);
    this.recordedView = new TensorTimeline(left, {
      title: 'Active memory, as recorded', onPick: (b) => this.picked(b, 'as recorded'), onView: (a, b) => sync(this.replayView)(a, b),
    });
    this.replayView = new TensorTimeline(right, {
      title: 'Active memory, replayed', onPick: (b) => this.picked(b, 'in the replay'), onView: (a, b) => sync(this.recordedView)(a, b),
    });
    this.trace = null;
    this.snapshotTrace = null;
    host.hidden = true;
  }

  /** Shows `trace`'s recorded run beside the replay `pane` has just run. */
  show(trace, pane, outcomeHost) {
    this.forgetSnapshot();
    this.trace = trace;
    this.host.hidden = false;
    const json = trace.recorded_json();
    const rec = json === undefined ? null : JSON.parse(json);
    this.figures = rec;
    const series = pane.timeline.series;
    const table = outcomeHost.querySelector('table');
    if (rec) {
      recordedRow(table, rec);
      this.recordedSeries = { reserved: trace.recorded_reserved(), allocated: trace.recorded_allocated() };
      pane.timeline.setRecorded?.(this.recordedSeries);
      const cut = rec.reserved_before_history_bytes > 0 || rec.allocated_before_history_bytes > 0
        ? ` Its history starts mid-run (PyTorch keeps the last max_entries events): ${bytes(rec.reserved_before_history_bytes)} `
          + `reserved and ${bytes(rec.allocated_before_history_bytes)} allocated before its first event are counted in.` : '';
      this.note.textContent = `The first row is what the run itself did, read from ${trace.name}'s own history `
        + `(${count(rec.events)} events; ${count(rec.segments)} segments when it was taken): its peaks, its calls for `
        + `device memory and its refusals. The dashed lines on the timeline are its reserved and allocated bytes.${cut}`;
    } else {
      pane.timeline.setRecorded?.(null);
      this.note.textContent = `${trace.name} records no allocator: an RMM CSV logs what was asked for, not what a `
        + 'caching allocator held, so there is no recorded run to show beside the replay (none is recorded). '
        + 'A PyTorch snapshot (torch.cuda.memory._dump_snapshot) has one.';
    }
    const bands = trace.bands();
    // The replay's block for each allocation: what its allocated bytes grew by (0 where it was refused).
    const sizes = new Float64Array(bands.length / 4);
    const alloc = series.allocated;
    for (let b = 0; b < sizes.length; b++) {
      const at = bands[b * 4];
      sizes[b] = Math.max(0, alloc[at] - (at > 0 ? alloc[at - 1] : 0));
    }
    const yMax = Math.max(series.peakReserved, rec ? rec.peak_reserved_bytes : 0);
    if (rec) {
      this.recordedView.setBands({
        bands, length: trace.length, reserved: this.recordedSeries.reserved, yMax, base: rec.allocated_before_history_bytes,
      });
    } else {
      this.recordedView.setBands({ bands: new Float64Array(0), length: trace.length, yMax });
      this.recordedView.info.textContent = 'none recorded (an RMM CSV)';
    }
    this.replayView.setBands({ bands, length: trace.length, sizes, reserved: series.reserved, yMax });
    this.frames.clear();
    this.listSegments(trace);
  }

  /** Shows a snapshot taken without a history (`trace` has no operations): its figures and its segments' frames. */
  showSnapshot(trace, name) {
    this.forgetSnapshot();
    this.snapshotTrace = trace;
    this.host.hidden = false;
    const rec = JSON.parse(trace.recorded_json());
    this.figures = rec;
    this.note.textContent = `${name} when taken: ${bytes(rec.reserved_at_snapshot_bytes)} reserved in `
      + `${count(rec.segments)} segments, ${bytes(rec.allocated_at_snapshot_bytes)} allocated. Without a history there `
      + 'are no peaks, no events and no tensors over time; its segments and blocks below carry the frames that made them.';
    this.note.dataset.reserved = String(rec.reserved_at_snapshot_bytes);
    this.recordedView.setBands({ bands: new Float64Array(0), length: 0 });
    this.replayView.setBands({ bands: new Float64Array(0), length: 0 });
    this.frames.clear();
    this.listSegments(trace);
  }

  forgetSnapshot() {
    if (this.snapshotTrace) this.snapshotTrace.free();
    this.snapshotTrace = null;
  }

  /** An allocation band picked in either timeline. */
  picked(b, where) {
    const trace = this.snapshotTrace || this.trace;
    if (!b) return;
    const ends = b.end === null ? 'never freed in the trace' : `freed at operation ${count(b.end)}`;
    const size = b.size > 0 ? bytes(b.size) : 'refused (out of memory)';
    this.frames.show(`Allocation made at operation ${count(b.start)} (${this.trace.describe_op(b.start)}), ${ends}; `
      + `${where}: ${size}. Seen at operation ${count(b.op)}. Its frames:`, trace, b.stack);
    this.frames.host.dataset.band = String(b.band);
  }

  /** The snapshot's segments and blocks as focusable items; pointing at one shows its frames. */
  listSegments(trace) {
    const host = this.segmentsHost;
    host.innerHTML = '';
    const map = trace.snapshot_map();
    const stacks = trace.segment_stacks();
    if (!map || !stacks.length) {
      host.hidden = true;
      return;
    }
    host.hidden = false;
    const segments = decode(map);
    const shown = Math.min(segments.length, LISTED_SEGMENTS);
    host.append(el('summary', {
      textContent: `The snapshot’s ${count(segments.length)} segments when taken, with their frames`
        + (shown < segments.length ? ` (the first ${count(shown)} by address listed)` : ''),
    }));
    const list = el('ul', { className: 'segment-frames' });
    let at = 0;
    for (let s = 0; s < shown; s++) {
      const seg = segments[s];
      const segStack = stacks[at];
      const nBlocks = stacks[at + 1];
      const blockStacks = stacks.subarray(at + 2, at + 2 + nBlocks);
      at += 2 + nBlocks;
      const li = el('li');
      const segWhat = `Segment at ${hex(seg.address)}, ${bytes(seg.total)} (${seg.large ? 'large' : 'small'} pool, stream ${seg.stream}): the frames that allocated it:`;
      li.append(this.pointable(`segment ${hex(seg.address)} · ${bytes(seg.total)}`, segWhat, trace, segStack, 'segment'));
      const blocks = el('span', { className: 'block-list' });
      seg.blocks.forEach((b, i) => {
        const what = `Block at ${hex(b.address)}, ${bytes(b.size)}, ${STATE_NAMES[b.state] || 'cached free'}, in segment ${hex(seg.address)}: its frames:`;
        blocks.append(this.pointable(`${bytes(b.size)} ${STATE_NAMES[b.state] || ''}`, what, trace, blockStacks[i] ?? NONE, 'block'));
      });
      li.append(blocks);
      list.append(li);
    }
    host.append(list);
  }

  pointable(label, what, trace, stack, kind) {
    const b = el('button', { type: 'button', className: `frames-target ${kind}`, textContent: label });
    b.dataset.stack = String(stack);
    const show = () => this.frames.show(what, trace, stack);
    b.addEventListener('mouseenter', show);
    b.addEventListener('focus', show);
    b.addEventListener('click', show);
    return b;
  }
}
