// Scenario view: the guided scenarios — pick one, read its claim and explanation, then
// step through its script (or run it all) and watch the map, the figures and each step's
// decisions; a conclusion computed from the live figures closes it. Under the map,
// memory_summary() is shown line by line beside what each line counts.
// Invariant: steps run strictly in order, one at a time; a step that throws marks the
// scenario failed (`data-state="failed"`) and stops it, with the error shown. Selecting a
// scenario (or Restart) starts a new generation: a step still in flight from an earlier one
// (a real trace loading) is abandoned, and nothing it does reaches the page.

import { SCENARIOS } from './scenarios.js';
import { ScenarioContext } from './scenario_context.js';
import { MemoryMap } from './memory_map.js';
import { liveFigures } from './figures.js';
import { showCalls } from './explanation.js';
import { showExplainedSummary } from './summary_explained.js';
import { embedded } from './trace_source.js';

const $ = (id) => document.getElementById(id);

export class ScenarioView {
  constructor(setStatus) {
    this.setStatus = setStatus;
    this.map = new MemoryMap($('scenario-map'), { caption: 'Memory map' });
    this.busy = null;
    this.generation = 0;
    // Steps dropped because their scenario was left or restarted (the browser tests read it).
    this.abandoned = 0;
    const list = $('scenario-list');
    for (const s of SCENARIOS) {
      const li = document.createElement('li');
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = s.title;
      b.dataset.id = s.id;
      b.addEventListener('click', () => this.select(s.id));
      li.append(b);
      list.append(li);
    }
    $('scenario-next').addEventListener('click', () => this.next());
    $('scenario-all').addEventListener('click', () => this.runAll());
    $('scenario-restart').addEventListener('click', () => this.select(this.scenario.id));
    this.select(SCENARIOS[0].id);
  }

  show(alloc) {
    this.map.update(alloc.memory_map());
    liveFigures($('scenario-figures'), alloc.figures());
    const summary = alloc.memory_summary(false);
    $('scenario-summary').textContent = summary;
    showExplainedSummary($('scenario-summary-explained'), summary);
  }

  select(id) {
    if (this.ctx) this.ctx.dispose();
    this.generation += 1;
    this.busy = null;
    this.scenario = SCENARIOS.find((s) => s.id === id);
    this.ctx = new ScenarioContext({ show: (a) => this.show(a), loadTrace: embedded });
    this.done = 0;
    this.state = 'ready';
    for (const b of document.querySelectorAll('#scenario-list button')) b.setAttribute('aria-current', String(b.dataset.id === id));
    const s = this.scenario;
    $('scenario-title').textContent = s.title;
    const claim = $('scenario-claim');
    claim.innerHTML = '';
    // A claim is one quotation, or several from different articles, each with its source.
    for (const quote of [].concat(s.claim)) {
      const p = document.createElement('p');
      p.className = 'quote';
      p.innerHTML = '<span class="zh" lang="zh"></span><span class="en"></span><cite></cite>';
      p.querySelector('.zh').textContent = `“${quote.zh}”`;
      p.querySelector('.en').textContent = quote.en;
      p.querySelector('cite').textContent = quote.source;
      claim.append(p);
    }
    $('scenario-text').textContent = s.text;
    const steps = $('scenario-steps');
    steps.innerHTML = '';
    for (const step of s.steps) {
      const li = document.createElement('li');
      const c = document.createElement('code');
      c.textContent = step.caption;
      li.append(c);
      steps.append(li);
    }
    $('scenario-result').textContent = '';
    $('scenario-explain').innerHTML = '';
    this.map.update([0]);
    $('scenario-figures').innerHTML = '';
    $('scenario-summary').textContent = '';
    $('scenario-summary-explained').innerHTML = '';
    // The memory_summary() scenario is about the table: open it.
    $('scenario-summary-box').open = s.id === 'summary';
    this.setStatus(`${s.title}: ${s.steps.length} steps to run.`);
    this.mark();
  }

  mark() {
    const items = [...$('scenario-steps').children];
    items.forEach((li, i) => {
      li.classList.toggle('done', i < this.done);
      li.classList.toggle('current', i === this.done && this.state !== 'failed');
    });
    $('view-scenarios').dataset.state = this.state;
    $('scenario-next').disabled = this.state === 'finished' || this.state === 'failed';
    $('scenario-all').disabled = $('scenario-next').disabled;
  }

  /** Runs the next step; resolves when it is shown. */
  async next() {
    if (this.busy) return this.busy;
    if (this.done >= this.scenario.steps.length || this.state === 'failed') return null;
    const busy = this.runStep();
    this.busy = busy;
    try {
      await busy;
    } finally {
      if (this.busy === busy) this.busy = null;
    }
    return null;
  }

  async runStep() {
    const generation = this.generation;
    const s = this.scenario;
    const ctx = this.ctx;
    const step = s.steps[this.done];
    const li = $('scenario-steps').children[this.done];
    const out = document.createElement('span');
    out.className = 'out';
    this.state = 'running';
    this.setStatus(`${s.title}: step ${this.done + 1} of ${s.steps.length}…`);
    ctx.beginStep();
    let r;
    let error = null;
    try {
      r = await step.run(ctx);
    } catch (e) {
      error = e;
    }
    if (generation !== this.generation) {
      this.abandoned += 1;
      return;
    }
    try {
      if (error) throw error;
      const text = typeof r === 'string' ? r : r.text;
      out.textContent = text;
      if (r && r.expected === 'oom') {
        out.classList.add('bad');
        out.dataset.expected = 'oom';
      }
      this.done += 1;
      this.state = this.done === s.steps.length ? 'finished' : 'ready';
      showCalls($('scenario-explain'), ctx.calls, { title: step.caption });
      if (this.state === 'finished') $('scenario-result').textContent = s.conclude(this.ctx);
      this.setStatus(`${s.title}: ${this.done} of ${s.steps.length} steps done.`);
    } catch (e) {
      out.textContent = `Unexpected error: ${e.message}`;
      out.classList.add('bad');
      this.state = 'failed';
      this.setStatus(`${s.title}: a step failed.`);
    }
    li.append(out);
    this.mark();
  }

  /** Runs every remaining step. */
  async runAll() {
    const generation = this.generation;
    while (generation === this.generation && this.done < this.scenario.steps.length && this.state !== 'failed') await this.next();
  }
}
