// Explanation: the allocator's decisions for one call, step by step, as the core words
// them (wasm `take_decisions()`), with the decision's kind beside each sentence, and the
// error message when the call failed.
// Invariant: the page adds no reasoning of its own; every sentence is the core's.

/** Renders decisions (parsed JSON) and an optional error into the list `ol`. */
export function showDecisions(ol, decisions, { title = '', error = null } = {}) {
  ol.innerHTML = '';
  if (title) {
    const li = document.createElement('li');
    li.className = 'title';
    li.style.listStyle = 'none';
    li.innerHTML = '<b></b>';
    li.querySelector('b').textContent = title;
    ol.append(li);
  }
  decisions.forEach((d, i) => {
    const li = document.createElement('li');
    li.value = i + 1;
    li.dataset.kind = d.kind;
    if (d.kind === 'out_of_memory' || d.kind === 'segment_refused') li.className = 'oom';
    const k = document.createElement('span');
    k.className = 'kind';
    k.textContent = d.kind.replace(/_/g, ' ');
    li.append(k, document.createTextNode(d.text));
    ol.append(li);
  });
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
