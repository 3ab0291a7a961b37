// Frames panel: the stack frames a PyTorch snapshot recorded for what the person points at
// (an allocation band, a segment, a block), beside the recorded run's views. The lines are
// the wasm reader's (TraceFile.stack_frames: "name (filename:line)", as the snapshot lists
// them, within the reader's bounds).
// Invariant: the panel always says what it shows frames of, and says so when the snapshot
// recorded none (a history taken without stacks, an RMM CSV) or they were not kept.

const NONE = 4294967295;

export class FramesPanel {
  constructor(host) {
    host.innerHTML = '';
    this.title = document.createElement('p');
    this.title.className = 'frames-title';
    this.list = document.createElement('ol');
    this.list.className = 'frames';
    host.setAttribute('aria-live', 'polite');
    host.append(this.title, this.list);
    this.host = host;
    this.clear();
  }

  clear() {
    this.title.textContent = 'Point at an allocation, a segment or a block (or focus it with the keyboard) to see '
      + 'the stack frames that made it.';
    this.list.innerHTML = '';
    this.host.dataset.stack = '';
  }

  /** Shows `what` (a sentence) and stack `stack` of `trace` (a TraceFile, or null). */
  show(what, trace, stack) {
    this.title.textContent = what;
    this.list.innerHTML = '';
    this.host.dataset.stack = String(stack);
    const lines = trace && stack !== NONE && trace.recorded_json() !== undefined ? trace.stack_frames(stack) : [];
    if (!lines.length) {
      const li = document.createElement('li');
      li.className = 'placeholder';
      li.textContent = !trace || trace.recorded_json() === undefined
        ? 'No frames: this trace records no stacks (an RMM CSV).'
        : stack === NONE ? 'Frames not kept (past the reader’s bounds on frames).'
          : 'No frames recorded for it (a history keeps them unless _record_memory_history was called with context=None).';
      this.list.append(li);
      return;
    }
    for (const line of lines) {
      const li = document.createElement('li');
      const code = document.createElement('code');
      code.textContent = line;
      li.append(code);
      this.list.append(li);
    }
  }
}
