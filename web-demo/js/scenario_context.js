// Scenario context: what a guided scenario's script may do — start a fresh allocator,
// allocate and free named tensors, empty_cache, set a memory fraction, read the figures,
// and replay a real trace (a whole cold pass, two passes with or without empty_cache()
// between them, or an allocator left at the trace's end for the map). Each call returns a line of output for the step list, and notes the
// allocator's decisions for it in `this.calls`, in order, until the next step begins. No
// DOM here: the view passes `show(allocator)` to draw and `loadTrace(name)` to fetch, so the
// scripts also run under Node in the tests.
// Invariant: `this.alloc` is the allocator the map shows; tensor names map to the
// addresses of live allocations only. Once disposed, a context shows nothing more and
// keeps no allocator: a step still running when its scenario was left fails instead.

import { Allocator, ReplayRun, epoch_calls_json as epochCallsJson } from '../pkg/cachalot_wasm.js';
import { bytes, count } from './units.js';
import { emptyCacheTitle } from './explanation.js';

export const MiB = 1024 ** 2;
export const GiB = 1024 ** 3;

export class ScenarioContext {
  constructor({ show = () => {}, loadTrace }) {
    this.show = show;
    this.loadTrace = loadTrace;
    this.alloc = null;
    this.names = new Map();
    this.calls = [];
    this.owned = [];
    this.disposed = false;
  }

  /** Drops every allocator this context made; later calls fail. */
  dispose() {
    for (const a of this.owned) a.free();
    this.owned = [];
    this.alloc = null;
    this.disposed = true;
  }

  /** Starts a step: the calls noted so far belong to the previous one. */
  beginStep() {
    this.calls = [];
  }

  /** Throws once the context is disposed: a step awaiting a trace stops there. */
  live() {
    if (this.disposed) throw new Error('the scenario was left while this step ran');
  }

  adopt(alloc) {
    if (this.disposed) alloc.free();
    this.live();
    this.owned.push(alloc);
    this.alloc = alloc;
    this.names = new Map();
    this.show(alloc);
    return alloc;
  }

  /** A fresh allocator (explaining its decisions) over a device of `capacity` bytes. */
  fresh(config, capacity) {
    const a = new Allocator(config, capacity);
    a.set_explain(true);
    this.adopt(a);
    return `a fresh allocator, ${a.config_string()}, on a ${bytes(capacity)} device`;
  }

  /** Notes the decisions of the call just made, under `title`, and redraws. */
  note(title) {
    this.calls.push({ title, decisions: JSON.parse(this.alloc.take_decisions()) });
    this.show(this.alloc);
  }

  /** Allocates `size` bytes as tensor `name`; throws the allocator's Error. */
  malloc(name, size, stream = 0) {
    try {
      const addr = this.alloc.malloc(size, stream);
      this.names.set(name, addr);
      return addr;
    } finally {
      this.note(`${name} = malloc(${bytes(size)}${stream ? `, stream ${stream}` : ''})`);
    }
  }

  /** Allocates, and returns the error message instead of throwing (for the out-of-memory steps). */
  tryMalloc(name, size, stream = 0) {
    try {
      this.malloc(name, size, stream);
      return null;
    } catch (e) {
      return e.message;
    }
  }

  free(name) {
    const addr = this.names.get(name);
    if (addr === undefined) throw new Error(`no live tensor named ${name}`);
    try {
      this.alloc.free_block(addr);
      this.names.delete(name);
    } finally {
      this.note(`free ${name}`);
    }
  }

  emptyCache() {
    const before = this.alloc.figures();
    try {
      this.alloc.empty_cache();
    } finally {
      this.note(emptyCacheTitle(before, this.alloc.figures()));
    }
  }

  setFraction(f) {
    this.alloc.set_memory_fraction(f);
    this.note(`set_per_process_memory_fraction(${f})`);
  }

  /** The shown allocator's statistics, in PyTorch's `DeviceStats` shape (`stats_json()`). */
  stats() {
    return JSON.parse(this.alloc.stats_json());
  }

  /** Current and peak figures of the shown allocator. */
  fig() {
    const [requested, allocated, reserved, peakRequested, peakAllocated, peakReserved, deviceAllocs, ooms, segments, kind] = this.alloc.figures();
    return { requested, allocated, reserved, peakRequested, peakAllocated, peakReserved, deviceAllocs, ooms, segments, kind };
  }

  /** "allocated X, reserved Y (cached Z), N segments, M device allocations"; under virtual
   *  memory, address ranges and mappings, in the words of the figures beside it. */
  line() {
    const f = this.fig();
    const plural = (n, one) => `${count(n)} ${one}${n === 1 ? '' : 's'}`;
    const [held, calls] = f.kind > 0 ? ['address range', 'mapping'] : ['segment', 'device allocation'];
    return `allocated ${bytes(f.allocated)}, reserved ${bytes(f.reserved)} (cached ${bytes(f.reserved - f.allocated)}), `
      + `${plural(f.segments, held)}, ${plural(f.deviceAllocs, calls)}`;
  }

  /** A whole cold pass of an embedded trace: the figures `cachalot replay --json` prints. */
  async replay(trace, config, capacity = 140 * GiB) {
    const t = await this.loadTrace(trace);
    this.live();
    const run = new ReplayRun(t, config, capacity);
    const figures = JSON.parse(run.figures_json());
    run.free();
    return figures;
  }

  /** The driver calls of two epochs (passes) of an embedded trace, keeping the cache or
   *  calling empty_cache() between them: `cold` and `warm` are what `cachalot replay --json
   *  --passes 3` reports as `device_calls_cold` and `device_calls_warm` (wasm/src/epoch_calls.rs). */
  async epochCalls(trace, config, capacity = 140 * GiB) {
    const t = await this.loadTrace(trace);
    this.live();
    return JSON.parse(epochCallsJson(t, config, capacity));
  }

  /** Replays an embedded trace on a fresh allocator up to `position` (default: its end) and shows it. */
  async replayTo(trace, config, capacity = 140 * GiB, position = Infinity) {
    const t = await this.loadTrace(trace);
    this.live();
    const a = new Allocator(config, capacity);
    a.load_trace(t);
    a.step(Math.min(position, t.length));
    this.adopt(a);
    return a;
  }
}
