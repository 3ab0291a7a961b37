// Figures: the tables of numbers beside the maps. `outcomeTable` shows a whole cold pass
// (the figures `cachalot replay --json` prints, field for field, each with its exact byte
// count) beside PyTorch's measured figures where they apply; `liveFigures` shows the
// allocator's current and peak bytes on every frame.
// Invariant: every byte figure is shown both rounded and exact, and carries its JSON
// field name in `data-field` so a test can read it back. PyTorch's row appears only where
// it is comparable (see reference.js), and its ratio is of PyTorch's own figures.

import { bytes, count } from './units.js';
import { REFERENCE_CAPACITY, reference, referenceRatio } from './reference.js';

/** "15,067,417,288 B" with a break opportunity after each comma, so a narrow column wraps it. */
function exactBytes(value) {
  const span = document.createElement('span');
  span.className = 'exact';
  const groups = count(value).split(',');
  groups.forEach((g, i) => {
    span.append(i < groups.length - 1 ? `${g},` : `${g} B`);
    if (i < groups.length - 1) span.append(document.createElement('wbr'));
  });
  return span;
}

function cell(value, field, exact = true) {
  const td = document.createElement('td');
  td.dataset.field = field;
  td.dataset.value = String(value);
  td.textContent = typeof value === 'number' && exact ? bytes(value) : String(value);
  if (typeof value === 'number' && exact) td.append(exactBytes(value));
  return td;
}

/**
 * Where the pass put its segments: how many of the placements the trace gives (a snapshot's
 * `segment_alloc` entries, or its pointers') it followed, where it gave them up, or that
 * following was off (`follow` false), as `cachalot replay`'s *placements* line says it.
 */
function placementsNote(f, follow) {
  const p = document.createElement('p');
  p.className = 'note placements';
  p.dataset.field = 'segment_placements_followed';
  p.dataset.value = String(f.segment_placements_followed ?? 0);
  if (!follow) {
    p.textContent = 'Segments placed by the simulated device’s own rule: following the trace’s addresses is off, '
      + 'so best fit may break ties between equal free blocks otherwise than the run did.';
  } else if (f.segment_placements_recorded > 0) {
    const source = f.segment_placements_inferred ? 'as the trace’s pointers say' : 'as the snapshot recorded them';
    p.textContent = `${count(f.segment_placements_followed)} of the ${count(f.segment_placements_recorded)} segments `
      + `placed where the run’s were, ${source}`;
    const gaveUp = f.segment_placements_abandoned;
    if (gaveUp) p.textContent += `; given up at operation ${count(gaveUp.operation)}: ${gaveUp.why}`;
    p.textContent += '.';
  } else {
    return null;
  }
  return p;
}

/**
 * Renders a ReplayRun's figures (parsed `figures_json`) into `host`; `embedded`: the trace is
 * one of the page's own, so PyTorch's figures for it may apply; `follow`: the pass followed
 * the trace's addresses (see placementsNote).
 */
export function outcomeTable(host, f, elapsedMs = null, { embedded = false, follow = true } = {}) {
  const measured = embedded ? reference(f.trace, f.config) : null;
  const ref = measured && f.capacity_bytes === REFERENCE_CAPACITY ? measured : null;
  host.innerHTML = '';
  const table = document.createElement('table');
  table.className = 'outcome';
  table.dataset.config = f.config;
  const head = table.insertRow();
  for (const h of ['', 'peak requested', 'peak allocated', 'peak reserved', 'reserved / requested', 'device allocs', 'OOMs']) {
    const th = document.createElement('th');
    th.textContent = h;
    head.append(th);
  }
  const row = table.insertRow();
  row.className = 'cachalot';
  const name = document.createElement('td');
  name.innerHTML = `<b>cachalot</b> <code></code>`;
  name.querySelector('code').textContent = f.config.replace(/,/g, ',\u200b');
  row.append(name, cell(f.peak_requested_bytes, 'peak_requested_bytes'), cell(f.peak_allocated_bytes, 'peak_allocated_bytes'),
    cell(f.peak_reserved_bytes, 'peak_reserved_bytes'), cell(f.reserved_over_requested.toFixed(3), 'reserved_over_requested', false),
    cell(f.device_allocs, 'device_allocs', false), cell(f.ooms, 'ooms', false));
  if (ref) {
    const r = table.insertRow();
    r.className = 'pytorch';
    const n = document.createElement('td');
    n.innerHTML = `<b>PyTorch 2.11</b> on an H200 <code></code>`;
    n.querySelector('code').textContent = ref.conf.replace(/,/g, ',\u200b');
    r.append(n, cell(ref.peak_requested, 'pytorch_peak_requested'), cell(ref.peak_allocated, 'pytorch_peak_allocated'),
      cell(ref.peak_reserved, 'pytorch_peak_reserved'),
      cell(referenceRatio(ref).toFixed(3), 'pytorch_reserved_over_requested', false),
      cell(ref.num_device_alloc, 'pytorch_device_allocs', false), cell('—', 'pytorch_ooms', false));
  }
  host.append(table);
  const note = document.createElement('p');
  note.className = 'note';
  const timing = elapsedMs === null ? '' : ` Replayed in ${elapsedMs.toFixed(0)} ms in this browser.`;
  note.textContent = `${count(f.ops)} operations on a simulated device of ${bytes(f.capacity_bytes)}.${timing}`
    + (f.first_oom ? ` First out of memory (of ${count(f.ooms)}): ${f.first_oom}` : '');
  host.append(note);
  const placements = placementsNote(f, follow);
  if (placements) host.append(placements);
  if (measured && !ref) {
    const apart = document.createElement('p');
    apart.className = 'note reference-apart';
    apart.textContent = `PyTorch 2.11’s figures for this trace and config were measured on an H200 `
      + `(${bytes(REFERENCE_CAPACITY)}); they are not shown beside a ${bytes(f.capacity_bytes)} device, `
      + `where they would not be comparable.`;
    host.append(apart);
  }
}

/** Renders an Allocator's `figures()` (current and peak bytes) into `host`. */
export function liveFigures(host, fig) {
  const [req, alloc, resv, , , peakResv, devAllocs, ooms, segs, kind] = fig;
  // Under virtual memory (kind 1 or 2) segments are address ranges (reserved, whether or not
  // they still hold memory) and device allocations are mappings of spans of pages, some of
  // them moved rather than new.
  const vm = kind > 0;
  const items = [
    ['requested', req, 'live_requested'], ['allocated', alloc, 'live_allocated'], ['reserved', resv, 'live_reserved'],
    ['cached (reserved − allocated)', resv - alloc, 'live_cached'], ['peak reserved', peakResv, 'live_peak_reserved'],
  ];
  host.innerHTML = '';
  const div = document.createElement('div');
  div.className = 'live';
  for (const [label, v, field] of items) {
    const s = document.createElement('span');
    s.dataset.field = field;
    s.dataset.value = String(v);
    s.innerHTML = `${label} <b></b>`;
    s.querySelector('b').textContent = bytes(v);
    div.append(s);
  }
  const counts = [
    [vm ? 'address ranges' : 'segments', segs, 'live_segments'],
    [vm ? 'mappings' : 'device allocs', devAllocs, 'live_device_allocs'], ['OOMs', ooms, 'live_ooms'],
  ];
  for (const [label, v, field] of counts) {
    const s = document.createElement('span');
    s.dataset.field = field;
    s.dataset.value = String(v);
    s.innerHTML = `${label} <b></b>`;
    s.querySelector('b').textContent = count(v);
    div.append(s);
  }
  host.append(div);
}
