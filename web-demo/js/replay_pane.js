// Replay pane: one config's side of a replay — the cold pass's figures beside PyTorch's,
// the timeline of requested / allocated / reserved bytes, the live figures and the memory
// map of an allocator that the player steps through the same trace. The replay view shows
// one pane, the compare view two.
// Invariant: the figures and timeline come from one whole cold pass (wasm ReplayRun, what
// `cachalot replay --json` measures); the map from a second allocator at the player's
// position, which after the last operation has the same peaks.

import { Allocator, ReplayRun } from '../pkg/cachalot_wasm.js';
import { MemoryMap } from './memory_map.js';
import { Timeline } from './timeline.js';
import { liveFigures, outcomeTable } from './figures.js';

export class ReplayPane {
  /** `ids`: element ids of the outcome, timeline, live-figures and map hosts. */
  constructor({ outcome, timeline, figures, map }, { onSeek, caption = 'Memory map' }) {
    this.outcomeHost = document.getElementById(outcome);
    this.figuresHost = document.getElementById(figures);
    this.timeline = new Timeline(document.getElementById(timeline), { onSeek });
    this.map = new MemoryMap(document.getElementById(map), { caption });
    this.alloc = null;
    this.figures = null;
  }

  /**
   * Replays `trace` under `config` (cold pass) and loads a fresh allocator at its start, both
   * placing segments where the trace's addresses say unless `follow` is false; throws the core's Error.
   */
  run(trace, config, capacity, { follow = true } = {}) {
    const t0 = performance.now();
    const run = new ReplayRun(trace, config, capacity, follow);
    const elapsed = performance.now() - t0;
    const alloc = new Allocator(config, capacity);
    alloc.load_trace(trace, follow);
    this.figures = JSON.parse(run.figures_json());
    this.timeline.setSeries({
      requested: run.requested(), allocated: run.allocated(), reserved: run.reserved(),
      peakOp: this.figures.peak_reserved_op, peakReserved: this.figures.peak_reserved_bytes, ooms: run.oom_ops(),
    });
    this.oomOps = run.oom_ops();
    run.free();
    if (this.alloc) this.alloc.free();
    this.alloc = alloc;
    this.elapsedMs = elapsed;
    outcomeTable(this.outcomeHost, this.figures, elapsed, { embedded: trace.embedded === true, follow });
    return alloc;
  }

  /** Redraws at the player's position. */
  frame(position) {
    if (!this.alloc) return;
    this.map.update(this.alloc.memory_map());
    liveFigures(this.figuresHost, this.alloc.figures());
    this.timeline.setPosition(position);
  }
}
