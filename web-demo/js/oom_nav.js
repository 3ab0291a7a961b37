// Out of memory in a replay: how many operations were refused, the first and the last named
// as such, and buttons that jump the player to each in turn (the timeline marks each with a
// tick), with the core's explanation of the one jumped to beside them.
// Invariant: the row is hidden when the replay refused nothing; "first" is always the
// refusal of lowest operation index and "last" the highest, as the outcome table's note
// and the end-of-replay line say.

import { count } from './units.js';

export class OomNav {
  /** `host`: the row's element; `seek(position)` moves the player; `explain()` the allocator's last refusal ("operation i: …"). */
  constructor(host, { seek, explain }) {
    this.host = host;
    this.seek = seek;
    this.explain = explain;
    this.ops = [];
    this.index = -1;
    host.innerHTML = '';
    this.summary = document.createElement('p');
    this.summary.className = 'oom-summary';
    const row = document.createElement('div');
    row.className = 'row';
    this.prev = this.button('◀ Previous OOM', () => this.jump(this.index - 1));
    this.next = this.button('Next OOM ▶', () => this.jump(this.index + 1));
    this.first = this.button('First OOM', () => this.jump(0));
    this.last = this.button('Last OOM', () => this.jump(this.ops.length - 1));
    row.append(this.first, this.prev, this.next, this.last);
    this.text = document.createElement('p');
    this.text.className = 'oom-text error';
    this.text.setAttribute('aria-live', 'polite');
    host.append(this.summary, row, this.text);
    this.set([]);
  }

  button(label, onClick) {
    const b = document.createElement('button');
    b.textContent = label;
    b.addEventListener('click', onClick);
    return b;
  }

  /** The refused operations of a new replay, in order. */
  set(ops) {
    this.ops = [...ops];
    this.index = -1;
    this.text.textContent = '';
    this.host.hidden = this.ops.length === 0;
    if (this.ops.length === 0) return;
    const n = this.ops.length;
    this.summary.textContent = `${count(n)} operation${n === 1 ? '' : 's'} refused for lack of memory (red ticks under `
      + `the timeline): the first at operation ${count(this.ops[0])}, the last at operation ${count(this.ops[n - 1])}.`;
    this.buttons();
  }

  buttons() {
    this.prev.disabled = this.index <= 0;
    this.next.disabled = this.index >= this.ops.length - 1;
  }

  /** Moves the player to just after refusal `k` and says why it was refused. */
  jump(k) {
    if (k < 0 || k >= this.ops.length) return;
    this.index = k;
    this.seek(this.ops[k] + 1);
    const which = k === 0 ? 'first' : k === this.ops.length - 1 ? 'last' : `number ${count(k + 1)}`;
    this.text.textContent = `Out of memory ${count(k + 1)} of ${count(this.ops.length)} (the ${which}), ${this.explain() || ''}`;
    this.text.dataset.op = String(this.ops[k]);
    this.buttons();
  }
}
