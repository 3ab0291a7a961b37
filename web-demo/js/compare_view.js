// Compare view: one trace under two configs side by side — both cold passes' figures
// (peak reserved and reserved/requested for each, beside PyTorch's where they apply), both
// curves on one scale, both maps, played in step by one player, and after a single step
// each side's decisions for that operation; on demand, the smallest device the trace fits on
// under both configs and the three `cachalot fit` always searches (fit_table.js).
// Invariant: both panes replay the same parsed trace, and the player keeps both
// allocators at the same operation. A comparison is applied whole or not at all: if
// either config is rejected (or the trace cannot be read), both sides keep what they show,
// and the trace list and both forms show it again.

import { ConfigForm } from './config_form.js';
import { FitTable } from './fit_table.js';
import { Player } from './player.js';
import { ReplayPane } from './replay_pane.js';
import { REPLAY_PRESETS } from './replay_view.js';
import { showDecisions, showNote } from './explanation.js';
import { addFileOptions, embedded, fillSelect, fromFile } from './trace_source.js';
import { bytes, count } from './units.js';
import { refusal } from './refusal.js';

const $ = (id) => document.getElementById(id);
const SIDES = ['a', 'b'];
const NO_STEP_YET = 'Use “Step” to see each side\'s decisions for one operation.';

export class CompareView {
  constructor(setStatus) {
    this.setStatus = setStatus;
    this.forms = [
      new ConfigForm($('compare-config-a'), { config: 'policy:pytorch', presets: REPLAY_PRESETS }),
      new ConfigForm($('compare-config-b'), { config: 'policy:pytorch,max_split_size_mb:128', presets: REPLAY_PRESETS }),
    ];
    const seek = (p) => this.player.seek(p);
    this.panes = SIDES.map((s) => new ReplayPane(
      { outcome: `compare-outcome-${s}`, timeline: `compare-timeline-${s}`, figures: `compare-figures-${s}`, map: `compare-map-${s}` },
      { onSeek: seek, caption: `Memory map ${s.toUpperCase()}` },
    ));
    this.player = new Player($('compare-player'), {
      onFrame: (p, decisions) => this.frame(p, decisions),
      onError: (e) => { $('compare-error').textContent = e.message; },
      describe: (i) => (this.trace ? this.trace.describe_op(i) : ''),
    });
    this.fit = new FitTable({ button: 'compare-fit-run', status: 'compare-fit-status', table: 'compare-fit-table', note: 'compare-fit-note' });
    this.files = new Map();
    this.trace = null;
    this.traceKey = null;
    this.statusLine = '';
    this.running = 0;
    fillSelect($('compare-trace'));
    $('compare-run').addEventListener('click', () => this.run());
    $('compare-file').addEventListener('change', () => this.loadFile());
  }

  async loadFile() {
    const input = $('compare-file');
    const f = input.files[0];
    if (!f) return;
    $('compare-error').textContent = '';
    let traces;
    try {
      traces = await fromFile(f);
    } catch (e) {
      input.value = '';
      $('compare-error').textContent = refusal(e.message, `Still comparing on ${this.trace ? this.trace.label : 'no trace'}.`);
      return;
    }
    const select = $('compare-trace');
    select.value = addFileOptions(select, this.files, traces);
    await this.run();
  }

  frame(position, decisions) {
    this.panes.forEach((pane) => pane.frame(position));
    // One scale for both maps, as for both timelines: a bar of the same bytes is as long in each.
    const widest = Math.max(...this.panes.map((pane) => pane.map.ownMax || 0));
    this.panes.forEach((pane) => pane.map.shareScale(widest));
    if (!decisions) return;
    SIDES.forEach((s, i) => showDecisions($(`compare-explain-${s}`), decisions[i],
      { title: `op ${count(position - 1)}: ${this.trace.describe_op(position - 1)}` }));
  }

  /** Both forms back to the configs in effect, each saying why. */
  revert(rejected) {
    this.forms.forEach((form, i) => {
      if (rejected[i]) form.revert(rejected[i]);
      else if (form.changed()) form.revert(`Not applied: config ${SIDES[rejected.findIndex(Boolean)].toUpperCase()} was rejected.`);
    });
  }

  async run() {
    const running = ++this.running;
    $('compare-error').textContent = '';
    const values = [];
    const rejected = this.forms.map((form, i) => {
      try {
        values[i] = form.checked();
        return null;
      } catch (e) {
        return e.message;
      }
    });
    if (rejected.some(Boolean)) {
      this.revert(rejected);
      if (this.traceKey !== null) $('compare-trace').value = this.traceKey;
      $('compare-error').textContent = 'Nothing changed: a config was rejected (the reason is below it).';
      return;
    }
    const key = $('compare-trace').value;
    try {
      const trace = this.files.get(key) || await embedded(key);
      if (running !== this.running) return;
      this.setStatus(`Comparing two configs on ${trace.label}…`);
      const allocs = this.panes.map((pane, i) => pane.run(trace, values[i].config, values[i].capacity));
      const yMax = Math.max(...this.panes.map((p) => p.figures.peak_reserved_bytes));
      this.panes.forEach((p) => p.timeline.setScale(yMax));
      this.trace = trace;
      this.traceKey = key;
      this.forms.forEach((form, i) => form.accept(values[i]));
      SIDES.forEach((s) => showNote($(`compare-explain-${s}`), NO_STEP_YET));
      this.player.load(allocs, trace.length);
      this.fit.reset(trace, values.map((v, i) => ({ config: v.config, role: `config ${SIDES[i].toUpperCase()}` })));
      const [a, b] = this.panes.map((p) => p.figures);
      this.statusLine = `${trace.label}: peak reserved ${bytes(a.peak_reserved_bytes)} (A) vs ${bytes(b.peak_reserved_bytes)} (B), `
        + `${(b.peak_reserved_bytes / Math.max(1, a.peak_reserved_bytes)).toFixed(2)}× — ${count(trace.length)} operations.`;
      this.setStatus(this.statusLine);
    } catch (e) {
      if (running !== this.running) return;
      $('compare-error').textContent = refusal(e.message, this.trace ? `Still comparing on ${this.trace.label}.` : '');
      if (this.traceKey !== null) $('compare-trace').value = this.traceKey;
      this.setStatus(this.statusLine);
    }
  }
}
