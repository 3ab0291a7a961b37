// A PyTorch snapshot taken without a recorded history (`torch.cuda.memory._snapshot()` or
// `_dump_snapshot` with no `_record_memory_history()` before it, or the page's own
// "Download snapshot"): it holds segments but no allocation events, so there is nothing to
// replay. The page draws its segments as they were when it was taken, and says the two
// lines that record a history next time.
// Invariant: the section is shown only while it holds such a snapshot; loading a trace that
// replays hides it again.

import { MemoryMap } from './memory_map.js';
import { count } from './units.js';

export const RECORD_LINES = [
  'torch.cuda.memory._record_memory_history(max_entries=100000)',
  'torch.cuda.memory._dump_snapshot("run.pickle")',
];

export class SnapshotOnly {
  constructor(host) {
    this.host = host;
    host.innerHTML = '';
    const h = document.createElement('h3');
    h.id = 'snapshot-only-title';
    this.text = document.createElement('p');
    this.text.className = 'note';
    const how = document.createElement('p');
    how.textContent = 'To replay a run, record its history: before the work,';
    const first = document.createElement('pre');
    first.className = 'record-line';
    first.textContent = RECORD_LINES[0];
    const then = document.createElement('p');
    then.textContent = 'and after it,';
    const second = document.createElement('pre');
    second.className = 'record-line';
    second.textContent = RECORD_LINES[1];
    const mapHost = document.createElement('div');
    mapHost.className = 'map-host';
    mapHost.id = 'snapshot-only-map';
    host.append(h, this.text, how, first, then, second, mapHost);
    this.title = h;
    this.map = new MemoryMap(mapHost, { caption: 'Segments in the snapshot' });
    this.hide();
  }

  /** Shows `trace`'s own segments (its `snapshot_map()`), named `name`. */
  show(name, flat) {
    const segments = flat[0] || 0;
    this.title.textContent = `${name}: a snapshot without a history`;
    this.text.textContent = `${name} holds ${count(segments)} segment${segments === 1 ? '' : 's'} but no allocation `
      + 'events, so there is nothing to replay: it was taken without a recorded history. Below, its segments as '
      + 'they were when it was taken.';
    this.host.hidden = false;
    this.map.update(flat);
  }

  hide() {
    this.host.hidden = true;
  }
}
