// By hand: one allocator a person drives — allocate a size (with a unit) on a stream, free a
// block by clicking it (or from the list), record_stream, hold a stream busy so that a free
// stays pending, empty_cache, a memory fraction — and after every call the allocator's own
// decisions, step by step, with any error's full message.
// Invariant: the map, figures, list and summary always show the allocator after the last
// call, whether that call succeeded or failed. A value the page refuses (a stream, a
// fraction, a config) changes nothing, and the controls show what is in effect: the config
// form the allocator's config, the fraction box the fraction the allocator applies.

import { Allocator } from '../pkg/cachalot_wasm.js';
import { ConfigForm, splitConfig } from './config_form.js';
import { MemoryMap, STATE } from './memory_map.js';
import { liveFigures } from './figures.js';
import { emptyCacheTitle, showDecisions } from './explanation.js';
import { bytes, hex, parseSize, UNITS } from './units.js';

const $ = (id) => document.getElementById(id);

export const HAND_PRESETS = [
  ['PyTorch default', 'policy:pytorch'],
  ['max_split_size_mb:128', 'policy:pytorch,max_split_size_mb:128'],
  ['roundup ×4', 'policy:pytorch,roundup_power2_divisions:4'],
  ['GC 0.6 + fraction 0.5', 'policy:pytorch,garbage_collection_threshold:0.6,per_process_memory_fraction:0.5'],
  ['expandable segments', 'policy:pytorch,expandable_segments:True'],
  ['cachalot policy (pages move)', 'policy:cachalot'],
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
      b.addEventListener('click', () => {
        const stream = this.stream('hand-stream');
        if (stream !== null) this.malloc(Number(b.dataset.size), stream);
      });
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
      if (!v) return this.fail('Pick a live allocation first.');
      const s = this.stream('hand-use-stream');
      if (s === null) return null;
      return this.act(`record_stream(${hex(Number(v))}, stream ${s})`, () => this.alloc.record_stream(Number(v), s));
    });
    $('hand-hold').addEventListener('click', () => {
      const s = this.stream('hand-busy-stream');
      if (s !== null) this.act(`stream ${s} is busy: events recorded on it stay pending`, () => this.alloc.hold_stream(s));
    });
    $('hand-finish').addEventListener('click', () => {
      const s = this.stream('hand-busy-stream');
      if (s !== null) this.act(`stream ${s} finished its work: frees waiting on it complete at the next malloc`, () => this.alloc.finish_stream(s));
    });
    $('hand-empty').addEventListener('click', () => {
      if (!this.alloc) return;
      const before = this.alloc.figures();
      this.act(() => emptyCacheTitle(before, this.alloc.figures()), () => this.alloc.empty_cache());
    });
    $('hand-set-fraction').addEventListener('click', () => this.setFraction());
    this.fraction = null;
    this.restart();
  }

  /** The stream number typed in the box `id`, or null (and the problem shown) when it is not one. */
  stream(id) {
    const text = $(id).value.trim();
    const v = Number(text);
    if (text !== '' && Number.isSafeInteger(v) && v >= 0) return v;
    const label = document.querySelector(`label[for="${id}"]`).textContent;
    this.fail(`“${label}”: ${text === '' ? 'an empty box' : `'${text}'`} is not a stream number; type a whole number, 0 or more.`);
    return null;
  }

  /** Shows the fraction in effect in its box (empty: no limit). */
  showFraction() {
    $('hand-fraction').value = this.fraction === null ? '' : String(this.fraction);
  }

  /** Applies the fraction typed in its box, or says why not and shows the one in effect again. */
  setFraction() {
    if (!this.alloc) return;
    const text = $('hand-fraction').value.trim();
    const f = Number(text);
    if (text === '' || !Number.isFinite(f) || f < 0 || f > 1) {
      const kept = this.fraction === null ? 'no fraction (no limit)' : `the fraction ${this.fraction}`;
      this.fail(`A memory fraction is a number from 0 to 1${text === '' ? '' : `, not '${text}'`}; ${kept} stays in effect.`);
      this.showFraction();
      return;
    }
    const applied = this.act(`set_per_process_memory_fraction(${f}): at most ${bytes(Math.floor(f * this.alloc.capacity))} reserved`,
      () => { this.alloc.set_memory_fraction(f); return true; });
    if (applied) this.fraction = f;
    this.showFraction();
  }

  /** Starts a fresh allocator with the form's config, or keeps the one running and says why. */
  restart() {
    let value;
    try {
      value = this.form.checked();
    } catch (e) {
      this.form.revert(e.message);
      this.render();
      return;
    }
    const a = new Allocator(value.config, value.capacity);
    a.set_explain(true);
    if (this.alloc) this.alloc.free();
    this.alloc = a;
    this.names.clear();
    this.counter = 0;
    this.form.accept(value);
    const fraction = new Map(splitConfig(a.config_string())).get('per_process_memory_fraction');
    this.fraction = fraction === undefined ? null : Number(fraction);
    this.showFraction();
    showDecisions($('hand-explain'), [], { title: `A fresh allocator: ${a.config_string()} on a ${bytes(value.capacity)} device.` });
    $('hand-error').textContent = '';
    this.render();
  }

  fail(message) {
    $('hand-error').textContent = message;
  }

  /**
   * Runs one call, then shows its decisions (and its error, if it threw). `title` names the
   * call (a function: computed after it); a call refused before any decision (a bad
   * address, a size past 2^53) gets no heading, only its error.
   */
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
    const refused = error !== null && decisions.length === 0;
    const heading = refused ? '' : typeof title === 'function' ? title() : title;
    showDecisions($('hand-explain'), decisions, { title: heading, error });
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
    const stream = this.stream('hand-stream');
    if (stream !== null) this.malloc(size, stream);
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
