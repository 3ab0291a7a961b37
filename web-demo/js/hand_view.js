// By hand: one allocator a person drives — allocate a size (with a unit) on a stream, free a
// block by clicking it (or from the list), record_stream, hold a stream busy so that a free
// stays pending, empty_cache, a memory fraction — and after every call the allocator's own
// decisions, step by step, with any error's full message.
// Invariant: the map, figures, list and summary always show the allocator after the last
// call, whether that call succeeded or failed.

import { Allocator } from '../pkg/cachalot_wasm.js';
import { ConfigForm } from './config_form.js';
import { MemoryMap, STATE } from './memory_map.js';
import { liveFigures } from './figures.js';
import { showDecisions } from './explanation.js';
import { bytes, hex, parseSize, UNITS } from './units.js';

const $ = (id) => document.getElementById(id);

export const HAND_PRESETS = [
  ['PyTorch default', 'policy:pytorch'],
  ['max_split_size_mb:128', 'policy:pytorch,max_split_size_mb:128'],
  ['roundup ×4', 'policy:pytorch,roundup_power2_divisions:4'],
  ['GC 0.6 + fraction 0.5', 'policy:pytorch,garbage_collection_threshold:0.6,per_process_memory_fraction:0.5'],
];

export class HandView {
  constructor() {
    this.form = new ConfigForm($('hand-config'), { config: 'policy:pytorch', capacity: UNITS.GiB, presets: HAND_PRESETS });
    this.map = new MemoryMap($('hand-map'), {
      caption: 'Memory map (click an allocated block to free it)',
      onActivate: (seg, block) => {
        if (block.state === STATE.ALLOCATED) this.free(block.address);
      },
    });
    this.names = new Map();
    this.counter = 0;
    this.alloc = null;
    $('hand-restart').addEventListener('click', () => this.restart());
    $('hand-alloc-form').addEventListener('submit', (e) => {
      e.preventDefault();
      this.mallocFromForm();
    });
    for (const b of document.querySelectorAll('#view-hand .quick button')) {
      b.addEventListener('click', () => this.malloc(Number(b.dataset.size), this.stream('hand-stream')));
    }
    $('hand-free').addEventListener('click', () => {
      const v = $('hand-live').value;
      if (v) this.free(Number(v));
      else this.fail('Pick a live allocation to free (or click one in the map).');
    });
    $('hand-live').addEventListener('keydown', (e) => {
      if (e.key === 'Delete' && $('hand-live').value) this.free(Number($('hand-live').value));
    });
    $('hand-record').addEventListener('click', () => {
      const v = $('hand-live').value;
      const s = this.stream('hand-use-stream');
      if (!v) return this.fail('Pick a live allocation first.');
      return this.act(`record_stream(${hex(Number(v))}, stream ${s})`, () => this.alloc.record_stream(Number(v), s));
    });
    $('hand-hold').addEventListener('click', () => {
      const s = this.stream('hand-busy-stream');
      this.act(`stream ${s} is busy: events recorded on it stay pending`, () => this.alloc.hold_stream(s));
    });
    $('hand-finish').addEventListener('click', () => {
      const s = this.stream('hand-busy-stream');
      this.act(`stream ${s} finished its work: frees waiting on it complete at the next malloc`, () => this.alloc.finish_stream(s));
    });
    $('hand-empty').addEventListener('click', () => this.act('empty_cache()', () => this.alloc.empty_cache()));
    $('hand-set-fraction').addEventListener('click', () => {
      const f = Number($('hand-fraction').value);
      this.act(`set_per_process_memory_fraction(${f}): at most ${bytes(Math.floor(f * this.alloc.capacity))} reserved`,
        () => this.alloc.set_memory_fraction(f));
    });
    this.restart();
  }

  stream(id) {
    const v = Number($(id).value);
    return Number.isInteger(v) && v >= 0 ? v : 0;
  }

  restart() {
    try {
      const { config, capacity } = this.form.value();
      const a = new Allocator(config, capacity);
      a.set_explain(true);
      if (this.alloc) this.alloc.free();
      this.alloc = a;
      this.names.clear();
      this.counter = 0;
      showDecisions($('hand-explain'), [], { title: `A fresh allocator: ${a.config_string()} on a ${bytes(capacity)} device.` });
      $('hand-error').textContent = '';
    } catch (e) {
      $('hand-error').textContent = e.message;
    }
    this.render();
  }

  fail(message) {
    $('hand-error').textContent = message;
  }

  /** Runs one call, then shows its decisions (and its error, if it threw). */
  act(title, fn) {
    if (!this.alloc) return null;
    let error = null;
    let result = null;
    try {
      result = fn();
    } catch (e) {
      error = e.message;
    }
    const decisions = JSON.parse(this.alloc.take_decisions());
    showDecisions($('hand-explain'), decisions, { title, error });
    $('hand-error').textContent = error || '';
    this.render();
    return result;
  }

  mallocFromForm() {
    let size;
    try {
      size = parseSize($('hand-size').value, $('hand-unit').value);
    } catch (e) {
      this.fail(e.message);
      return;
    }
    this.malloc(size, this.stream('hand-stream'));
  }

  malloc(size, stream) {
    return this.act(`malloc(${bytes(size)} = ${size} bytes, stream ${stream})`, () => {
      const addr = this.alloc.malloc(size, stream);
      this.counter += 1;
      this.names.set(addr, `#${this.counter}`);
      return addr;
    });
  }

  free(addr) {
    const name = this.names.get(addr) || '';
    this.act(`free(${name} ${hex(addr)})`, () => this.alloc.free_block(addr));
  }

  render() {
    if (!this.alloc) return;
    this.map.update(this.alloc.memory_map());
    liveFigures($('hand-figures'), this.alloc.figures());
    $('hand-summary').textContent = this.alloc.memory_summary(false);
    const list = $('hand-live');
    const keep = list.value;
    list.innerHTML = '';
    for (const seg of this.map.segments) {
      for (const b of seg.blocks) {
        if (b.state !== STATE.ALLOCATED) continue;
        const label = `${this.names.get(b.address) || '?'} ${hex(b.address)} ${bytes(b.size)} (asked ${bytes(b.requested)}) s${seg.stream}`;
        list.append(new Option(label, String(b.address)));
      }
    }
    if ([...list.options].some((o) => o.value === keep)) list.value = keep;
  }
}
