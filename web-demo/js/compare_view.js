// Compare view: one trace under two configs side by side — both cold passes' figures
// (peak reserved and reserved/requested for each, beside PyTorch's where they apply), both
// curves on one scale, both maps, played in step by one player.
// Invariant: both panes replay the same parsed trace, and the player keeps both
// allocators at the same operation.

import { ConfigForm } from './config_form.js';
import { Player } from './player.js';
import { ReplayPane } from './replay_pane.js';
import { REPLAY_PRESETS } from './replay_view.js';
import { embedded, fillSelect, fromFile } from './trace_source.js';
import { bytes, count } from './units.js';

const $ = (id) => document.getElementById(id);

export class CompareView {
  constructor(setStatus) {
    this.setStatus = setStatus;
    this.forms = [
      new ConfigForm($('compare-config-a'), { config: 'policy:pytorch', presets: REPLAY_PRESETS }),
      new ConfigForm($('compare-config-b'), { config: 'policy:pytorch,max_split_size_mb:128', presets: REPLAY_PRESETS }),
    ];
    const seek = (p) => this.player.seek(p);
    this.panes = ['a', 'b'].map((s) => new ReplayPane(
      { outcome: `compare-outcome-${s}`, timeline: `compare-timeline-${s}`, figures: `compare-figures-${s}`, map: `compare-map-${s}` },
      { onSeek: seek, caption: `Memory map ${s.toUpperCase()}` },
    ));
    this.player = new Player($('compare-player'), {
      onFrame: (p) => this.panes.forEach((pane) => pane.frame(p)),
      onError: (e) => { $('compare-error').textContent = e.message; },
      describe: (i) => (this.trace ? this.trace.describe_op(i) : ''),
    });
    this.file = null;
    fillSelect($('compare-trace'));
    $('compare-run').addEventListener('click', () => this.run());
    $('compare-file').addEventListener('change', async () => {
      const f = $('compare-file').files[0];
      if (!f) return;
      try {
        this.file = await fromFile(f);
        const key = 'file';
        const select = $('compare-trace');
        [...select.options].filter((o) => o.value === key).forEach((o) => o.remove());
        select.append(new Option(`${f.name} (your file)`, key));
        select.value = key;
        await this.run();
      } catch (e) {
        $('compare-error').textContent = e.message;
      }
    });
  }

  async run() {
    $('compare-error').textContent = '';
    try {
      const v = $('compare-trace').value;
      const trace = v === 'file' ? this.file : await embedded(v);
      const values = this.forms.map((f) => f.value());
      this.setStatus(`Comparing two configs on ${trace.name}…`);
      const allocs = this.panes.map((pane, i) => pane.run(trace, values[i].config, values[i].capacity));
      const yMax = Math.max(...this.panes.map((p) => p.figures.peak_reserved_bytes));
      this.panes.forEach((p) => p.timeline.setScale(yMax));
      this.trace = trace;
      this.player.load(allocs, trace.length);
      const [a, b] = this.panes.map((p) => p.figures);
      this.setStatus(`${trace.name}: peak reserved ${bytes(a.peak_reserved_bytes)} (A) vs ${bytes(b.peak_reserved_bytes)} (B), `
        + `${(b.peak_reserved_bytes / Math.max(1, a.peak_reserved_bytes)).toFixed(2)}× — ${count(trace.length)} operations.`);
    } catch (e) {
      $('compare-error').textContent = e.message;
      this.setStatus('');
    }
  }
}
