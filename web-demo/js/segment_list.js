// Segment list: every segment of a memory map as a row of a table — its address, size, the
// cached free bytes in it, its pool, stream and blocks — sortable by any column, so that a
// map of hundreds of segments (gpt2_train ends with 293) can be read on any screen. A row's
// address is a button: it selects that segment in the map (scrolled to, outlined, its
// first block described).
// Invariant: while the list is open it holds one row per segment of the last map shown,
// in the chosen order; while closed it draws nothing, so playback pays nothing for it.

import { bytes, hex } from './units.js';
import { STATE } from './memory_map.js';

const COLUMNS = [
  { key: 'address', label: 'Address', value: (s) => s.address, show: (s) => hex(s.address) },
  { key: 'size', label: 'Size', value: (s) => s.total, show: (s) => bytes(s.total) },
  { key: 'free', label: 'Cached free', value: (s) => s.free, show: (s) => bytes(s.free) },
  { key: 'pool', label: 'Pool', value: (s) => (s.large ? 1 : 0), show: (s) => (s.large ? 'large' : 'small') },
  { key: 'stream', label: 'Stream', value: (s) => s.stream, show: (s) => String(s.stream) },
  { key: 'blocks', label: 'Blocks', value: (s) => s.blocks.length, show: (s) => String(s.blocks.length) },
];

/** Cached free bytes of a segment: its free blocks, pending or not, and its idle pages. */
function freeBytes(seg) {
  return seg.blocks.filter((b) => b.state === STATE.INACTIVE || b.state === STATE.IDLE || b.state === STATE.PENDING)
    .reduce((n, b) => n + b.size, 0);
}

export class SegmentList {
  /** Adds the list under `host`; `onSelect(index)` selects a segment of the map. */
  constructor(host, onSelect) {
    this.onSelect = onSelect;
    this.segments = [];
    this.sort = { key: 'address', descending: false };
    this.box = document.createElement('details');
    this.box.className = 'segment-list';
    this.title = document.createElement('summary');
    this.title.textContent = 'Segment list';
    this.wrap = document.createElement('div');
    this.wrap.className = 'segment-list-scroll';
    this.box.append(this.title, this.wrap);
    host.append(this.box);
    this.box.addEventListener('toggle', () => this.render());
  }

  /** Shows the segments of a new map (`decode`d). */
  update(segments) {
    this.segments = segments;
    this.title.textContent = `Segment list (${segments.length})`;
    if (this.box.open) this.render();
  }

  /** Sorts by `key`; the same key again reverses the order. */
  sortBy(key) {
    this.sort = { key, descending: this.sort.key === key ? !this.sort.descending : key !== 'address' };
    this.render();
    const b = this.wrap.querySelector(`th[data-key="${key}"] button`);
    if (b) b.focus();
  }

  render() {
    if (!this.box.open) return;
    const col = COLUMNS.find((c) => c.key === this.sort.key);
    const rows = this.segments.map((seg, index) => ({ ...seg, index, free: freeBytes(seg) }));
    rows.sort((a, b) => (col.value(a) - col.value(b)) * (this.sort.descending ? -1 : 1) || a.address - b.address);
    const table = document.createElement('table');
    const head = table.createTHead().insertRow();
    for (const c of COLUMNS) {
      const th = document.createElement('th');
      th.scope = 'col';
      th.dataset.key = c.key;
      const on = c.key === this.sort.key;
      th.setAttribute('aria-sort', on ? (this.sort.descending ? 'descending' : 'ascending') : 'none');
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = `${c.label}${on ? (this.sort.descending ? ' ▼' : ' ▲') : ''}`;
      b.setAttribute('aria-label', `Sort by ${c.label.toLowerCase()}`);
      b.addEventListener('click', () => this.sortBy(c.key));
      th.append(b);
      head.append(th);
    }
    const body = table.createTBody();
    for (const r of rows) {
      const tr = body.insertRow();
      tr.dataset.index = String(r.index);
      for (const c of COLUMNS) {
        const td = tr.insertCell();
        td.dataset.key = c.key;
        td.dataset.value = String(c.value(r));
        if (c.key === 'address') {
          const b = document.createElement('button');
          b.type = 'button';
          b.className = 'link';
          b.textContent = c.show(r);
          b.setAttribute('aria-label', `Show segment ${c.show(r)} in the map`);
          b.addEventListener('click', () => this.onSelect(r.index));
          td.append(b);
        } else {
          td.textContent = c.show(r);
        }
      }
    }
    this.wrap.replaceChildren(table);
  }
}
