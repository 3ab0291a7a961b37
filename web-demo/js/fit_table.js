// Fit table: the smallest simulated device a trace runs on without an out-of-memory under
// each config compared (PyTorch's default, expandable segments, cachalot's policy, and the
// configs the person chose), its ratio to the peak requested bytes, the driver calls at that
// size, the calm device where the calls come near those with room, the driver calls on
// the device PyTorch's default needs, and whether the run fits each
// named card: `cachalot fit --json`'s figures, from the same search in the core
// (TraceFile.fit_json and calls_at_json, core/src/replay/fit.rs). It is computed on
// demand: the search replays the trace a dozen times or more per config, seconds on a
// million operations, so the page yields between configs to show its progress.
// Invariant: the table shows one trace's figures for one list of configs, whole; a newer
// search or a new comparison drops one under way. Every figure carries its `cachalot fit
// --json` field name in `data-field` (the calls where PyTorch's default fits:
// `where_pytorch_fits`, one of its `driver_calls`) and its exact value in `data-value`.

import { fit_cards_json as fitCardsJson } from '../pkg/cachalot_wasm.js';
import { bytes, count } from './units.js';

/** The configs searched always, as `cachalot fit` does (native/cli/src/fit_cmd.rs's ALWAYS). */
export const ALWAYS = [
  { config: 'policy:pytorch', role: 'PyTorch’s default' },
  { config: 'policy:pytorch,expandable_segments:True', role: 'expandable segments' },
  { config: '', role: 'cachalot’s policy' },
];

const HEADINGS = ['Config', 'Smallest device', '× peak requested', 'Driver calls', 'Calm device',
  'Calls where PyTorch’s default fits', 'Fits'];

/** A turn of the event loop, so that the page paints the progress line. */
const yieldToPage = () => new Promise((resolve) => setTimeout(resolve, 0));

function cell(tag, text, field, value) {
  const c = document.createElement(tag);
  c.textContent = text;
  if (field) {
    c.dataset.field = field;
    c.dataset.value = String(value);
  }
  return c;
}

export class FitTable {
  /** `ids`: the button, the progress line, the table's host and the note under it. */
  constructor({ button, status, table, note }) {
    this.button = document.getElementById(button);
    this.status = document.getElementById(status);
    this.host = document.getElementById(table);
    this.note = document.getElementById(note);
    this.cards = JSON.parse(fitCardsJson());
    this.trace = null;
    this.configs = [];
    this.searching = 0;
    this.button.disabled = true;
    this.button.addEventListener('click', () => this.compute());
  }

  /**
   * What the button searches from now on: `trace` under ALWAYS and `chosen` ({ config, role }),
   * each config string once. Clears the figures of an earlier comparison.
   */
  reset(trace, chosen) {
    this.searching += 1;
    this.trace = trace;
    const seen = new Map();
    for (const c of [...ALWAYS, ...chosen]) {
      if (seen.has(c.config)) seen.get(c.config).roles.push(c.role);
      else seen.set(c.config, { config: c.config, roles: [c.role] });
    }
    this.configs = [...seen.values()];
    this.host.replaceChildren();
    this.note.textContent = '';
    this.status.textContent = `${this.configs.length} configs on ${trace.label}: not searched yet.`;
    this.button.disabled = false;
  }

  /** Searches every config in turn and shows the table; a core error is shown in its place. */
  async compute() {
    if (!this.trace) return;
    const searching = ++this.searching;
    const { trace, configs } = this;
    this.button.disabled = true;
    this.host.replaceChildren();
    this.note.textContent = '';
    const t0 = performance.now();
    const rows = [];
    try {
      for (const [i, c] of configs.entries()) {
        this.status.textContent = `Computing ${i + 1} of ${configs.length} (${c.config || 'policy:cachalot'}) on `
          + `${trace.label}… ${((performance.now() - t0) / 1000).toFixed(1)} s`;
        await yieldToPage();
        if (searching !== this.searching) return;
        const fit = JSON.parse(trace.fit_json(c.config));
        // Two spellings of one config (`''` and `policy:cachalot`) share a row.
        const same = rows.find((r) => r.fit.config === fit.config);
        if (same) same.roles.push(...c.roles);
        else rows.push({ fit, roles: [...c.roles] });
      }
      // ALWAYS puts PyTorch's default first: each config's calls on the device it needs.
      const pytorchNeeds = rows[0].fit.capacity_bytes;
      rows[0].wherePyTorchFits = rows[0].fit.driver_calls;
      for (const [i, r] of rows.entries()) {
        if (i === 0) continue;
        this.status.textContent = `Calls of ${i + 1} of ${rows.length} on the device PyTorch’s default needs… `
          + `${((performance.now() - t0) / 1000).toFixed(1)} s`;
        await yieldToPage();
        if (searching !== this.searching) return;
        r.wherePyTorchFits = JSON.parse(trace.calls_at_json(r.fit.config, pytorchNeeds));
      }
    } catch (e) {
      if (searching !== this.searching) return;
      this.status.textContent = `Not found: ${e.message}`;
      this.button.disabled = false;
      return;
    }
    if (searching !== this.searching) return;
    const seconds = (performance.now() - t0) / 1000;
    const probes = rows.reduce((n, r) => n + r.fit.probes + 1, 0) - 1;
    this.render(rows);
    this.status.textContent = `${trace.label}: searched in ${seconds.toFixed(1)} s (${count(probes)} replays).`;
    this.button.disabled = false;
  }

  render(rows) {
    const table = document.createElement('table');
    table.className = 'fit';
    const head = table.createTHead().insertRow();
    for (const h of HEADINGS) head.append(cell('th', h));
    const body = table.createTBody();
    for (const { fit, roles, wherePyTorchFits } of rows) {
      const tr = body.insertRow();
      tr.dataset.config = fit.config;
      const name = cell('td', '');
      const code = document.createElement('code');
      // A break opportunity after each comma: a long config wraps between its settings.
      fit.config.split(',').forEach((part, i, all) => {
        code.append(i < all.length - 1 ? `${part},` : part);
        if (i < all.length - 1) code.append(document.createElement('wbr'));
      });
      name.append(code, cell('span', roles.join(', ')));
      name.lastChild.className = 'role';
      tr.append(
        name,
        cell('td', bytes(fit.capacity_bytes), 'capacity_bytes', fit.capacity_bytes),
        cell('td', fit.capacity_over_requested.toFixed(3), 'capacity_over_requested', fit.capacity_over_requested),
        cell('td', count(fit.driver_calls), 'driver_calls', fit.driver_calls),
        cell('td', `${bytes(fit.calm_capacity_bytes)}, ${count(fit.calm_driver_calls)} calls`, 'calm_capacity_bytes',
          fit.calm_capacity_bytes),
        cell('td', wherePyTorchFits === null ? 'out of memory' : count(wherePyTorchFits), 'where_pytorch_fits',
          wherePyTorchFits),
      );
      const cards = cell('td', '');
      cards.className = 'cards';
      tr.append(cards);
      // On a phone each row is a block of labelled lines (style.css): the labels are the headings.
      [...tr.cells].forEach((td, i) => { td.dataset.label = HEADINGS[i]; });
      for (const c of fit.cards) {
        const verdict = cell('span', `${c.card} ${c.fits ? 'fits' : 'no'}`, 'fits', c.fits);
        verdict.dataset.card = c.card;
        verdict.className = c.fits ? 'fits' : 'no';
        cards.append(verdict);
      }
    }
    this.host.replaceChildren(table);
    const requested = rows.length ? rows[0].fit.peak_requested_bytes : 0;
    const context = this.cards.length ? this.cards[0].total_bytes - this.cards[0].usable_bytes : 0;
    const usable = this.cards.map((c) => `${c.name} (${c.examples}): ${bytes(c.usable_bytes)} of ${bytes(c.total_bytes)}`);
    this.note.textContent = `Smallest device: the least capacity, to 2.00 MiB, on which a replay of the trace finishes `
      + `with no out-of-memory (the allocator may free its cache and retry); the device size set above does not apply. `
      + `× peak requested: it over the trace’s peak requested bytes (${bytes(requested)}). Driver calls: cuMemAlloc, `
      + `cuMemFree, cuMemCreate, cuMemMap, cuMemUnmap and cuMemRelease of the replay at that size; where PyTorch’s `
      + `default fits, those of the replay on the smallest device PyTorch’s default needs. Calm device: the least `
      + 'capacity the search finds at which the driver calls are within a tenth of those on the least device the run '
      + 'never fills (its unbounded peak) plus one per thousand operations, and the calls there: near its smallest '
      + 'device a policy may move the same pages again and again. A card’s usable '
      + `memory is the total PyTorch reports for it less ${bytes(context)} for the CUDA context: ${usable.join('; ')}. `
      + 'The same search as cachalot fit TRACE --config A --config B.';
  }
}
