// Config form: the allocator knobs the articles talk about — policy, max_split_size_mb,
// roundup_power2_divisions, garbage_collection_threshold, per_process_memory_fraction,
// expandable_segments — and the simulated device's capacity, written into one config
// string in PYTORCH_CUDA_ALLOC_CONF syntax that a person may also edit by hand. It also
// remembers the config in effect (the last one its view applied), so that a rejected one
// is reported below the form and the form shows the one in effect again.
// Invariant: the string is what the allocator gets; the knobs only write it (the core
// parses and validates it, and its error message is what the page shows), and they show
// what will run: a key the string leaves out shows the core's default.

import { Allocator } from '../pkg/cachalot_wasm.js';
import { UNITS, bytes, parseSize } from './units.js';
import { clause, refusal } from './refusal.js';

let forms = 0;
let corePolicy = null;

/** The policy the core runs when a config names none, as the core itself writes it back. */
function defaultPolicy() {
  if (corePolicy === null) {
    const a = new Allocator('', UNITS.MiB);
    corePolicy = new Map(splitConfig(a.config_string())).get('policy');
    a.free();
  }
  return corePolicy;
}

/** Writes `text` into `el` with a line-break opportunity after each underscore, never inside a word. */
function breakAtUnderscores(el, text) {
  const parts = text.split('_');
  parts.forEach((part, i) => {
    el.append(i < parts.length - 1 ? `${part}_` : part);
    if (i < parts.length - 1) el.append(document.createElement('wbr'));
  });
}

/** Splits `k:v,k:[a:b,c:d]` into [key, value] pairs, brackets kept whole (display only). */
export function splitConfig(text) {
  const pairs = [];
  let depth = 0;
  let start = 0;
  const parts = [];
  for (let i = 0; i <= text.length; i++) {
    const c = text[i];
    if (c === '[') depth += 1;
    if (c === ']') depth -= 1;
    if ((c === ',' && depth === 0) || i === text.length) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  for (const p of parts) {
    const k = p.indexOf(':');
    if (k > 0) pairs.push([p.slice(0, k).trim(), p.slice(k + 1).trim()]);
  }
  return pairs;
}

const KNOBS = [
  { key: 'policy', label: 'policy', kind: 'select', options: ['pytorch', 'cachalot'] },
  { key: 'max_split_size_mb', label: 'max_split_size_mb', kind: 'number', min: 20, placeholder: 'unlimited' },
  { key: 'roundup_power2_divisions', label: 'roundup_power2_divisions', kind: 'text', placeholder: 'off (e.g. 4)' },
  { key: 'garbage_collection_threshold', label: 'garbage_collection_threshold', kind: 'number', min: 0, max: 1, step: 0.1, placeholder: 'off' },
  { key: 'per_process_memory_fraction', label: 'memory fraction', kind: 'number', min: 0, max: 1, step: 0.05, placeholder: 'none' },
  { key: 'expandable_segments', label: 'expandable_segments', kind: 'checkbox' },
];

export class ConfigForm {
  /** `presets`: [[label, config string], ...] shown as buttons. */
  constructor(host, { config = 'policy:pytorch', capacity = 140 * UNITS.GiB, presets = [] } = {}) {
    forms += 1;
    const id = `cfg${forms}`;
    host.innerHTML = '';
    host.classList.add('cfg');
    const knobs = document.createElement('div');
    knobs.className = 'knobs';
    this.inputs = {};
    for (const k of KNOBS) {
      const wrap = document.createElement('div');
      const label = document.createElement('label');
      label.htmlFor = `${id}-${k.key}`;
      breakAtUnderscores(label, k.label);
      let input;
      if (k.kind === 'select') {
        input = document.createElement('select');
        for (const o of k.options) input.append(new Option(o, o));
      } else {
        input = document.createElement('input');
        input.type = k.kind;
        for (const a of ['min', 'max', 'step', 'placeholder']) if (k[a] !== undefined) input.setAttribute(a, k[a]);
      }
      input.id = `${id}-${k.key}`;
      input.addEventListener(k.kind === 'text' || k.kind === 'number' ? 'input' : 'change', () => this.writeString());
      this.inputs[k.key] = input;
      if (k.kind === 'checkbox') {
        wrap.className = 'check';
        wrap.append(input, label);
      }
      else wrap.append(label, input);
      knobs.append(wrap);
    }
    const capWrap = document.createElement('div');
    capWrap.className = 'pair-in';
    const capLabel = document.createElement('label');
    capLabel.htmlFor = `${id}-capacity`;
    capLabel.textContent = 'Device capacity';
    this.capacity = document.createElement('input');
    this.capacity.type = 'text';
    this.capacity.inputMode = 'decimal';
    this.capacity.id = `${id}-capacity`;
    this.capacity.size = 6;
    const unitLabel = document.createElement('label');
    unitLabel.htmlFor = `${id}-capacity-unit`;
    unitLabel.className = 'sr-only';
    unitLabel.textContent = 'Capacity unit';
    this.unit = document.createElement('select');
    this.unit.id = `${id}-capacity-unit`;
    for (const u of ['MiB', 'GiB']) this.unit.append(new Option(u, u));
    capWrap.append(capLabel, this.capacity, unitLabel, this.unit);
    const strLabel = document.createElement('label');
    strLabel.htmlFor = `${id}-string`;
    strLabel.textContent = 'Config string (PYTORCH_CUDA_ALLOC_CONF syntax, editable)';
    this.string = document.createElement('input');
    this.string.type = 'text';
    this.string.className = 'conf';
    this.string.id = `${id}-string`;
    this.string.spellcheck = false;
    this.string.addEventListener('change', () => this.readString());
    host.append(knobs, capWrap, strLabel, this.string);
    if (presets.length) {
      const row = document.createElement('div');
      row.className = 'presets';
      row.setAttribute('aria-label', 'Preset configs');
      for (const [label, conf] of presets) {
        const b = document.createElement('button');
        b.type = 'button';
        b.textContent = label;
        b.title = conf;
        b.addEventListener('click', () => this.set(conf));
        row.append(b);
      }
      host.append(row);
    }
    this.status = document.createElement('p');
    this.status.className = 'error cfg-status';
    this.status.setAttribute('role', 'alert');
    this.note = document.createElement('p');
    this.note.className = 'note cfg-note';
    host.append(this.status, this.note);
    this.inEffect = null;
    this.set(config);
    this.setCapacity(capacity);
  }

  /** Sets the config string and the knobs it names. */
  set(config) {
    this.string.value = config;
    this.readString();
  }

  setCapacity(bytes) {
    const unit = bytes % UNITS.GiB === 0 || bytes >= UNITS.GiB ? 'GiB' : 'MiB';
    this.unit.value = unit;
    this.capacity.value = String(+(bytes / UNITS[unit]).toFixed(3));
  }

  readString() {
    const pairs = new Map(splitConfig(this.string.value));
    for (const k of KNOBS) {
      const input = this.inputs[k.key];
      const v = pairs.get(k.key);
      if (k.kind === 'checkbox') input.checked = v === 'True' || v === 'true';
      else if (k.kind === 'select') input.value = v || defaultPolicy();
      else input.value = v || '';
    }
    this.extra = [...pairs].filter(([key]) => !KNOBS.some((k) => k.key === key));
  }

  writeString() {
    const parts = [];
    for (const k of KNOBS) {
      const input = this.inputs[k.key];
      if (k.kind === 'checkbox') {
        if (input.checked) parts.push(`${k.key}:True`);
      } else if (input.value.trim() !== '') {
        parts.push(`${k.key}:${input.value.trim()}`);
      }
    }
    for (const [key, v] of this.extra || []) parts.push(`${key}:${v}`);
    this.string.value = parts.join(',');
  }

  /** `{config, capacity}`; throws an Error naming a bad capacity. */
  value() {
    return { config: this.string.value.trim(), capacity: parseSize(this.capacity.value, this.unit.value) };
  }

  /**
   * `value()` once the core accepts it (an allocator is built and dropped), with `moot`: a
   * sentence for each key that changes nothing under the policy that runs; throws an Error
   * saying what was rejected.
   */
  checked() {
    let v;
    try {
      v = this.value();
    } catch (e) {
      throw new Error(`Device capacity rejected: ${clause(e.message)}.`);
    }
    try {
      const a = new Allocator(v.config, v.capacity);
      v.moot = a.keys_without_effect();
      a.free();
    } catch (e) {
      throw new Error(`Config “${v.config}” on a ${bytes(v.capacity)} device rejected: ${clause(e.message)}.`);
    }
    return v;
  }

  /** True when the form shows something other than the config in effect. */
  changed() {
    if (!this.inEffect) return true;
    try {
      const v = this.value();
      return v.config !== this.inEffect.config || v.capacity !== this.inEffect.capacity;
    } catch {
      return true;
    }
  }

  /** Records `{config, capacity}` as the config in effect; a rejection shown earlier is over. */
  accept(value) {
    this.inEffect = { config: value.config, capacity: value.capacity };
    this.status.textContent = '';
    this.note.textContent = (value.moot || []).map((note) => `${note}.`).join(' ');
  }

  /** Says why the form's config was not applied, and shows the config in effect again. */
  revert(reason) {
    if (!this.inEffect) {
      this.status.textContent = refusal(reason, 'No config is in effect yet.');
      return;
    }
    const { config, capacity } = this.inEffect;
    this.set(config);
    this.setCapacity(capacity);
    this.status.textContent = refusal(reason, `Still in effect, and shown again above: ${config || '(the defaults)'} on a ${bytes(capacity)} device.`);
  }
}
