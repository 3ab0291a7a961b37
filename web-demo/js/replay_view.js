// Replay view: an embedded trace or a file a person opens or drops on the page (RMM CSV,
// .csv.gz, PyTorch snapshot as pickle or JSON), replayed under one config: play, pause, step (explained), scrub, speed,
// the timeline with its peak, the map, memory_summary and empty_cache.
// Invariant: the player drives exactly the pane's allocator; changing trace or config
// replays afresh, and a change that fails (a config the core rejects, a file it cannot
// read) changes nothing: the trace list and the config form show again what is replayed.
// The map shows the trace alone, or says that an empty_cache() the trace does not make has
// been applied to it since the player last went back. A snapshot without a history (no
// events) is not replayed: its own segments are drawn above the replay, which stays.

import { ConfigForm } from './config_form.js';
import { Player } from './player.js';
import { ReplayPane } from './replay_pane.js';
import { emptyCacheTitle, showDecisions, showNote } from './explanation.js';
import { addFileOptions, embedded, fillSelect, fromFile } from './trace_source.js';
import { count } from './units.js';
import { refusal } from './refusal.js';
import { SnapshotOnly } from './snapshot_only.js';
import { acceptDrops } from './file_drop.js';
import { OomNav } from './oom_nav.js';
import { RecordedRun } from './recorded_run.js';

const $ = (id) => document.getElementById(id);

export const REPLAY_PRESETS = [
  ['PyTorch default', 'policy:pytorch'],
  ['max_split_size_mb:128', 'policy:pytorch,max_split_size_mb:128'],
  ['cachalot policy', 'policy:cachalot'],
  ['roundup ×4', 'policy:pytorch,roundup_power2_divisions:4'],
  ['expandable', 'policy:pytorch,expandable_segments:True'],
];

const NO_STEP_YET = 'Use “Step” to see one operation\'s decisions.';

export class ReplayView {
  constructor(setStatus) {
    this.setStatus = setStatus;
    this.form = new ConfigForm($('replay-config'), { presets: REPLAY_PRESETS });
    this.pane = new ReplayPane(
      { outcome: 'replay-outcome', timeline: 'replay-timeline', figures: 'replay-figures', map: 'replay-map' },
      { onSeek: (p) => this.player.seek(p) },
    );
    this.player = new Player($('replay-player'), {
      onFrame: (p, d, rewound) => this.frame(p, d, rewound),
      onError: (e) => { $('replay-error').textContent = e.message; },
      describe: (i) => (this.trace ? this.trace.describe_op(i) : ''),
    });
    this.files = new Map();
    this.trace = null;
    this.traceKey = null;
    this.statusLine = '';
    this.applying = 0;
    fillSelect($('replay-trace'));
    $('replay-trace').addEventListener('change', () => this.apply());
    $('replay-apply').addEventListener('click', () => this.apply());
    $('replay-follow').addEventListener('change', () => this.apply());
    this.snapshotOnly = new SnapshotOnly($('snapshot-only'));
    this.recorded = new RecordedRun($('recorded-run'));
    this.ooms = new OomNav($('replay-ooms'), {
      seek: (p) => this.player.seek(p), explain: () => (this.pane.alloc ? this.pane.alloc.trace_last_oom() : ''),
    });
    $('replay-file').addEventListener('change', () => this.loadFile($('replay-file').files[0]));
    acceptDrops(document.body, (file) => {
      window.cachalot.show('replay');
      this.loadFile(file);
    });
    $('replay-empty').addEventListener('click', () => this.emptyCache());
    $('replay-snapshot').addEventListener('click', () => this.download());
  }

  async traceFor(value) {
    return this.files.get(value) || embedded(value);
  }

  /** Opens `file` (picked or dropped): replays it, or draws a snapshot without a history. */
  async loadFile(file) {
    const input = $('replay-file');
    if (!file) return;
    $('replay-error').textContent = '';
    let traces;
    try {
      this.setStatus(`Reading ${file.name}…`);
      traces = await fromFile(file, { noHistory: true });
    } catch (e) {
      // The file is refused: the box says no file is chosen, the replay stays as it was.
      input.value = '';
      $('replay-error').textContent = refusal(e.message, `Still replaying ${this.trace ? this.trace.label : 'nothing'}.`);
      this.setStatus(this.statusLine);
      return;
    }
    if (traces.noHistory) {
      this.snapshotOnly.show(traces.name, traces.map);
      this.recorded.showSnapshot(traces.trace, traces.name);
      this.setStatus(`${traces.name}: a snapshot without a history; its segments are drawn. Still replaying ${this.trace ? this.trace.label : 'nothing'}.`);
      return;
    }
    const select = $('replay-trace');
    select.value = addFileOptions(select, this.files, traces);
    await this.apply();
  }

  /** Puts the trace list back on the trace being replayed. */
  keepTrace() {
    if (this.traceKey !== null) $('replay-trace').value = this.traceKey;
  }

  /** Replays the selected trace under the form's config; on failure keeps the replay shown. */
  async apply() {
    const applying = ++this.applying;
    $('replay-error').textContent = '';
    let value;
    try {
      value = this.form.checked();
    } catch (e) {
      this.form.revert(e.message);
      this.keepTrace();
      return;
    }
    const key = $('replay-trace').value;
    try {
      const trace = await this.traceFor(key);
      // A later change (another trace picked while this one loaded) wins.
      if (applying !== this.applying) return;
      this.setStatus(`Replaying ${trace.label}…`);
      const alloc = this.pane.run(trace, value.config, value.capacity, { follow: $('replay-follow').checked });
      this.trace = trace;
      this.traceKey = key;
      this.snapshotOnly.hide();
      this.form.accept(value);
      $('replay-trace-info').textContent = `${trace.label}: ${trace.describe()}. Read in ${trace.parseMs.toFixed(0)} ms.`;
      showNote($('replay-explain'), NO_STEP_YET);
      this.diverged(false);
      this.player.load([alloc], trace.length);
      this.ooms.set(this.pane.oomOps);
      this.recorded.show(trace, this.pane, $('replay-outcome'));
      this.statusLine = `${trace.label}: ${count(trace.length)} operations under ${alloc.config_string()}.`;
      this.setStatus(this.statusLine);
    } catch (e) {
      if (applying !== this.applying) return;
      $('replay-error').textContent = refusal(e.message, this.trace ? `Still replaying ${this.trace.label}.` : '');
      this.keepTrace();
      if (this.form.changed()) this.form.revert('Not applied: the replay failed.');
      this.setStatus(this.statusLine);
    }
  }

  /** empty_cache() on the map's allocator: a call the trace does not make. */
  emptyCache() {
    const a = this.pane.alloc;
    if (!a) return;
    const before = a.figures();
    a.set_explain(true);
    a.empty_cache();
    showDecisions($('replay-explain'), JSON.parse(a.take_decisions()), { title: emptyCacheTitle(before, a.figures()) });
    a.set_explain(false);
    this.diverged(true);
    this.frame(this.player.position, null, false);
  }

  /** Shows or clears the note that the map has left the trace (an empty_cache() since the last rewind). */
  diverged(on) {
    $('replay-diverged').textContent = on
      ? 'The map and live figures now include an empty_cache() the trace does not make, so they no longer match the '
        + 'timeline and table above. ◀◀ Start (or any move back) replays the trace without it.'
      : '';
  }

  frame(position, decisions, rewound) {
    if (rewound) this.diverged(false);
    this.pane.frame(position);
    const a = this.pane.alloc;
    $('replay-summary').textContent = a.memory_summary(false);
    if (decisions) {
      showDecisions($('replay-explain'), decisions[0], { title: `op ${count(position - 1)}: ${this.trace.describe_op(position - 1)}` });
    }
    // At the end, the last refusal (the outcome table's note names the first).
    const oom = a.trace_last_oom();
    if (oom && decisions === null && position === this.player.length) {
      $('replay-error').textContent = `Last out of memory during the replay (of ${count(a.trace_ooms())}; the table names the first), ${oom}`;
    }
  }

  download() {
    if (!this.pane.alloc) return;
    const blob = new Blob([this.pane.alloc.snapshot_json()], { type: 'application/json' });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = `cachalot_snapshot_op${this.player.position}.json`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }
}
