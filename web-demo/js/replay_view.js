// Replay view: an embedded trace or a file a person loads (RMM CSV, .csv.gz, PyTorch
// snapshot JSON), replayed under one config: play, pause, step (explained), scrub, speed,
// the timeline with its peak, the map, memory_summary and empty_cache.
// Invariant: the player drives exactly the pane's allocator; changing trace or config
// replays afresh.

import { ConfigForm } from './config_form.js';
import { Player } from './player.js';
import { ReplayPane } from './replay_pane.js';
import { showDecisions } from './explanation.js';
import { embedded, fillSelect, fromFile } from './trace_source.js';
import { count } from './units.js';

const $ = (id) => document.getElementById(id);

export const REPLAY_PRESETS = [
  ['PyTorch default', 'policy:pytorch'],
  ['max_split_size_mb:128', 'policy:pytorch,max_split_size_mb:128'],
  ['cachalot policy', 'policy:cachalot'],
  ['roundup ×4', 'policy:pytorch,roundup_power2_divisions:4'],
  ['expandable', 'policy:pytorch,expandable_segments:True'],
];

export class ReplayView {
  constructor(setStatus) {
    this.setStatus = setStatus;
    this.form = new ConfigForm($('replay-config'), { presets: REPLAY_PRESETS });
    this.pane = new ReplayPane(
      { outcome: 'replay-outcome', timeline: 'replay-timeline', figures: 'replay-figures', map: 'replay-map' },
      { onSeek: (p) => this.player.seek(p) },
    );
    this.player = new Player($('replay-player'), {
      onFrame: (p, d) => this.frame(p, d),
      onError: (e) => { $('replay-error').textContent = e.message; },
      describe: (i) => (this.trace ? this.trace.describe_op(i) : ''),
    });
    this.files = new Map();
    this.trace = null;
    fillSelect($('replay-trace'));
    $('replay-trace').addEventListener('change', () => this.apply());
    $('replay-apply').addEventListener('click', () => this.apply());
    $('replay-file').addEventListener('change', () => this.loadFile());
    $('replay-empty').addEventListener('click', () => {
      if (!this.pane.alloc) return;
      this.pane.alloc.set_explain(true);
      this.pane.alloc.empty_cache();
      showDecisions($('replay-explain'), JSON.parse(this.pane.alloc.take_decisions()), { title: 'empty_cache(): every cached segment with no allocation went back to the device.' });
      this.pane.alloc.set_explain(false);
      this.frame(this.player.position, null);
    });
    $('replay-snapshot').addEventListener('click', () => this.download());
  }

  async traceFor(value) {
    return this.files.get(value) || embedded(value);
  }

  async loadFile() {
    const file = $('replay-file').files[0];
    if (!file) return;
    $('replay-error').textContent = '';
    try {
      this.setStatus(`Reading ${file.name}…`);
      const trace = await fromFile(file);
      const key = `file:${file.name}`;
      this.files.set(key, trace);
      const select = $('replay-trace');
      if (![...select.options].some((o) => o.value === key)) select.append(new Option(`${file.name} (your file)`, key));
      select.value = key;
      await this.apply();
    } catch (e) {
      $('replay-error').textContent = e.message;
      this.setStatus('');
    }
  }

  /** Replays the selected trace under the form's config. */
  async apply() {
    $('replay-error').textContent = '';
    try {
      const trace = await this.traceFor($('replay-trace').value);
      const { config, capacity } = this.form.value();
      this.setStatus(`Replaying ${trace.name}…`);
      const alloc = this.pane.run(trace, config, capacity);
      this.trace = trace;
      $('replay-trace-info').textContent = `${trace.name}: ${trace.describe()}. Read in ${trace.parseMs.toFixed(0)} ms.`;
      this.player.load([alloc], trace.length);
      this.setStatus(`${trace.name}: ${count(trace.length)} operations under ${alloc.config_string()}.`);
    } catch (e) {
      $('replay-error').textContent = e.message;
      this.setStatus('');
    }
  }

  frame(position, decisions) {
    this.pane.frame(position);
    const a = this.pane.alloc;
    $('replay-summary').textContent = a.memory_summary(false);
    if (decisions) {
      showDecisions($('replay-explain'), decisions[0], { title: `op ${count(position - 1)}: ${this.trace.describe_op(position - 1)}` });
    }
    const oom = a.trace_last_oom();
    if (oom && decisions === null && position === this.player.length) $('replay-error').textContent = `Out of memory during the replay, ${oom}`;
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
