// The page's entry point: loads the wasm module (the real allocator), PyTorch's reference
// figures, builds the four views and the tabs between them, and exposes the views as
// `window.cachalot` for the browser tests.
// Invariant: no view is built before the wasm module is ready; a failure to load is shown
// in the status line, not swallowed.

import init from '../pkg/cachalot_wasm.js';
import { loadReference } from './reference.js';
import { HandView } from './hand_view.js';
import { ReplayView } from './replay_view.js';
import { CompareView } from './compare_view.js';
import { ScenarioView } from './scenario_view.js';
import { explainBeside } from './summary_explained.js';

const status = document.getElementById('status');
const setStatus = (text) => { status.textContent = text; };

function tabs(onShow) {
  const list = [...document.querySelectorAll('nav [role="tab"]')];
  const show = (tab) => {
    for (const t of list) {
      const on = t === tab;
      t.setAttribute('aria-selected', String(on));
      t.tabIndex = on ? 0 : -1;
      document.getElementById(t.getAttribute('aria-controls')).hidden = !on;
    }
    history.replaceState(null, '', `#${tab.id.replace('tab-', '')}`);
    onShow(tab.id.replace('tab-', ''));
  };
  list.forEach((t, i) => {
    t.addEventListener('click', () => show(t));
    t.addEventListener('keydown', (e) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
      if (!step) return;
      const next = list[(i + step + list.length) % list.length];
      next.focus();
      show(next);
    });
  });
  const start = list.find((t) => t.id === `tab-${location.hash.slice(1)}`) || list[0];
  show(start);
  return (name) => show(document.getElementById(`tab-${name}`));
}

async function main() {
  try {
    await init();
    await loadReference();
  } catch (e) {
    setStatus(`Could not load the allocator (wasm): ${e.message}. Build it with \`make demo\`.`);
    return;
  }
  const views = {
    scenarios: new ScenarioView(setStatus),
    hand: new HandView(),
    replay: new ReplayView(setStatus),
    compare: new CompareView(setStatus),
  };
  for (const id of ['hand-summary', 'replay-summary']) explainBeside(document.getElementById(id));
  const shown = new Set();
  const show = tabs((name) => {
    if (name === 'hand') views.hand.render();
    if (name === 'replay' && !shown.has(name)) views.replay.apply();
    if (name === 'compare' && !shown.has(name)) views.compare.run();
    shown.add(name);
  });
  window.cachalot = { ...views, show, ready: true };
  setStatus('Ready: the real allocator, compiled to WebAssembly, over a simulated device.');
  document.body.dataset.ready = 'true';
}

main();
