// Explanation: the allocator's decisions for one call, step by step, as the core words
// them (wasm `take_decisions()`), with the decision's kind beside each sentence, and the
// error message when the call failed; or, for a step of several calls, each call under its
// own heading with its decisions, in order.
// Invariant: the page adds no reasoning of its own; every sentence is the core's. The
// headings name the call; where the core notes no decision for a call (empty_cache), the
// heading gives what the figures before and after it measured, and says so.

import { bytes, count } from './units.js';

function titleItem(text, className = 'title') {
  const li = document.createElement('li');
  li.className = className;
  li.innerHTML = '<b></b>';
  li.querySelector('b').textContent = text;
  return li;
}

function decisionItem(d, number) {
  const li = document.createElement('li');
  li.value = number;
  li.dataset.kind = d.kind;
  if (['out_of_memory', 'segment_refused', 'pages_refused'].includes(d.kind)) li.className = 'oom';
  const k = document.createElement('span');
  k.className = 'kind';
  k.textContent = d.kind.replace(/_/g, ' ');
  li.append(k, document.createTextNode(d.text));
  return li;
}

/** Renders decisions (parsed JSON) and an optional error into the list `ol`. */
export function showDecisions(ol, decisions, { title = '', error = null } = {}) {
  ol.innerHTML = '';
  if (title) ol.append(titleItem(title));
  decisions.forEach((d, i) => ol.append(decisionItem(d, i + 1)));
  if (error) {
    const li = document.createElement('li');
    li.className = 'oom';
    li.dataset.kind = 'error';
    li.textContent = `Error: ${error}`;
    ol.append(li);
  }
  if (!decisions.length && !error && !title) {
    const li = document.createElement('li');
    li.textContent = 'No decision to explain.';
    ol.append(li);
  }
}

/** Shows only a line of guidance (or a reason the list is empty) in `ol`. */
export function showNote(ol, text) {
  ol.innerHTML = '';
  const li = document.createElement('li');
  li.className = 'placeholder';
  li.textContent = text;
  ol.append(li);
}

/** Renders `calls` ([{title, decisions}], in the order they were made) under `title` into `ol`. */
export function showCalls(ol, calls, { title = '' } = {}) {
  ol.innerHTML = '';
  if (title) ol.append(titleItem(title));
  for (const call of calls) {
    ol.append(titleItem(call.title, 'call'));
    call.decisions.forEach((d, i) => ol.append(decisionItem(d, i + 1)));
  }
}

/** The heading of an empty_cache() call, from the allocator's `figures()` before and after it. */
export function emptyCacheTitle(before, after) {
  const released = before[2] - after[2];
  if (after[9] > 0) return `empty_cache(): ${bytes(released)} of pages went back to the device`;
  const segments = before[8] - after[8];
  return `empty_cache(): ${count(segments)} cached segment${segments === 1 ? '' : 's'}, ${bytes(released)}, went back to the device`;
}
