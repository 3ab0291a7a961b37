// The wasm module's exports as a JavaScript program meets them, in Node without a browser:
// every argument of the wrong type or range throws an Error that names it (no coercion of
// null, booleans or strings into numbers, no trap inside the module), a failed step changes
// nothing, and what the module hands back stays exact and bounded.

import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';

let api;

before(async () => {
  api = await import('../pkg/cachalot_wasm.js');
  await api.default({ module_or_path: await readFile(new URL('../pkg/cachalot_wasm_bg.wasm', import.meta.url)) });
});

const encode = (text) => new TextEncoder().encode(text);

/** A CSV trace: `n` allocations of 4 KiB, none freed. */
function allocations(n) {
  let csv = 'Time,Action,Pointer,Size\n';
  for (let i = 0; i < n; i += 1) csv += `${i},allocate,0x${(i + 1).toString(16)}0,4096\n`;
  return csv;
}

/** Asserts `f` throws an Error whose message matches `pattern`. */
function throwsNaming(f, pattern) {
  assert.throws(f, (e) => e instanceof Error && pattern.test(e.message), `expected an Error matching ${pattern}`);
}

test('numbers must be numbers: null, booleans, strings and arrays are refused, not coerced', () => {
  const a = new api.Allocator('', 1e9);
  throwsNaming(() => a.set_memory_fraction(null), /^memory fraction must be a number, got null$/);
  assert.equal(a.malloc(4096, 0) > 0, true, 'the refused fraction left no limit behind');
  // Out of range, in JavaScript's spelling of the number.
  throwsNaming(() => a.set_memory_fraction(Infinity), /^memory fraction must be a number from 0 to 1, got Infinity$/);
  throwsNaming(() => a.set_memory_fraction(1.5), /^memory fraction must be a number from 0 to 1, got 1\.5$/);
  throwsNaming(() => a.malloc('4096', 0), /^size must be a number, got a string$/);
  throwsNaming(() => a.malloc(true, 0), /^size must be a number, got a boolean$/);
  throwsNaming(() => a.malloc([512], 0), /^size must be a number, got an array$/);
  throwsNaming(() => a.malloc(4096, null), /^stream must be a number, got null$/);
  throwsNaming(() => a.malloc(4096n, 0), /^size must be a number, got a bigint$/);
  throwsNaming(() => a.malloc(4096), /^stream must be a number, got undefined$/);
  throwsNaming(() => a.malloc(Infinity, 0), /^size must be a whole number/);
  throwsNaming(() => a.free_block({}), /^address must be a number, got an object$/);
  throwsNaming(() => a.record_stream(1.5, 0), /^address must be a whole number/);
  throwsNaming(() => a.hold_stream(-1), /^stream must be a whole number/);
  throwsNaming(() => new api.Allocator('', '1e9'), /^capacity must be a number, got a string$/);
});

test('flags must be booleans and text must be strings', () => {
  const a = new api.Allocator('', 1e9);
  throwsNaming(() => a.memory_summary('yes'), /^abbreviated must be true or false, got a string$/);
  throwsNaming(() => a.set_explain(1), /^explain must be true or false, got a number$/);
  assert.match(a.memory_summary(true), /memory summary, device ID 0/);
  throwsNaming(() => new api.Allocator(42, 1e9), /^config must be a string, got a number$/);
  throwsNaming(() => api.TraceFile.parse(new Uint8Array(), 42), /^trace name must be a string, got a number$/);
  throwsNaming(() => api.TraceFile.parse(new Uint8Array()), /^trace name must be a string, got undefined$/);
  throwsNaming(() => api.TraceFile.parse(encode(allocations(1)).buffer, 't'),
    /^trace must be a Uint8Array or a string, got an object$/);
  const tf = api.TraceFile.parse(encode(allocations(1)), 't');
  throwsNaming(() => new api.ReplayRun(tf, null, 1e9), /^config must be a string, got null$/);
  throwsNaming(() => new api.ReplayRun(tf, '', 1e9, 'no'), /^follow_addresses must be true or false, got a string$/);
  throwsNaming(() => new api.Allocator('', 1e9).load_trace(tf, 0), /^follow_addresses must be true or false, got a number$/);
  // The module still works after every refusal above.
  assert.equal(new api.ReplayRun(tf, '', 1e9).requested().length, 1);
});

test('a trace parses from bytes or from a string alike', () => {
  const text = allocations(3);
  const fromBytes = api.TraceFile.parse(encode(text), 'b');
  const fromText = api.TraceFile.parse(text, 's');
  assert.equal(fromText.length, 3);
  assert.equal(fromText.describe(), fromBytes.describe());
  throwsNaming(() => api.TraceFile.parse('not a trace', 'x'), /^x: invalid trace/);
});

test('positions and counts are whole numbers: no wrap, no silent rewind', () => {
  const tf = api.TraceFile.parse(encode(allocations(20)), 't');
  const a = new api.Allocator('', 1e9);
  a.load_trace(tf);
  a.seek(15);
  for (const bad of [NaN, Infinity, -1, 2.5, null, '3']) {
    assert.throws(() => a.seek(bad), Error, `seek(${String(bad)})`);
    assert.equal(a.trace_position(), 15, `seek(${String(bad)}) moved the trace`);
  }
  throwsNaming(() => a.seek(2 ** 32 + 3), /^position must be at most the trace's length, 20, got 4294967299$/);
  throwsNaming(() => a.seek(21), /^position must be at most the trace's length, 20/);
  assert.equal(a.trace_position(), 15);
  throwsNaming(() => a.step(-1), /^step count must be a whole number/);
  assert.equal(a.step(2 ** 32), 5, 'a count past the end runs to the end');
  a.seek(5);
  assert.equal(a.trace_position(), 5);
  throwsNaming(() => tf.describe_op(1.5), /^operation index must be a whole number/);
  assert.equal(tf.describe_op(2 ** 32), '', 'past the end: nothing to describe');
  assert.match(tf.describe_op(2), /slot 2\)$/);
});

test('a failed step changes nothing, and a retry fails the same way', () => {
  const csv = 'Time,Action,Pointer,Size\n1,allocate,0x10,4096\n2,free,0x10,0\n';
  const a = new api.Allocator('policy:pytorch', 1e9);
  a.load_trace(api.TraceFile.parse(encode(csv), 't'));
  a.step(1);
  const flat = a.memory_map();
  a.free_block(flat[7]); // the trace's allocation, freed by hand behind the trace's back
  let first;
  assert.throws(() => a.step(1), (e) => { first = e.message; return /already freed/.test(e.message); });
  assert.equal(a.trace_position(), 1);
  assert.throws(() => a.step(1), (e) => e.message === first);
  assert.equal(a.trace_position(), 1, 'the free was not skipped');
});

test('a snapshot placing a segment beyond 2^53 gets exact, distinct addresses', () => {
  const snap = '{"device_traces":[[{"action":"segment_alloc","addr":18446744073705357312,"size":2097152},'
    + '{"action":"alloc","addr":1,"size":512},{"action":"alloc","addr":2,"size":512}]]}';
  const a = new api.Allocator('policy:pytorch', 8e10);
  a.load_trace(api.TraceFile.parse(encode(snap), 's'));
  a.step(2);
  const m = a.memory_map();
  const blocks = [m[7], m[11]];
  assert.ok(blocks.every(Number.isSafeInteger), `addresses ${blocks} are exact`);
  assert.notEqual(blocks[0], blocks[1]);
});

test('explained decisions left untaken stay bounded and keep the latest', () => {
  const a = new api.Allocator('', 1e9);
  a.set_explain(true);
  for (let i = 0; i < 30000; i += 1) a.free_block(a.malloc(1000, 0));
  const kept = JSON.parse(a.take_decisions());
  assert.ok(kept.length <= 65536, `${kept.length} decisions kept`);
  assert.equal(kept.at(-1).kind, 'cached');
  assert.equal(JSON.parse(a.take_decisions()).length, 0);
});

test('no export traps, whatever it is given, and the allocator still works after', () => {
  const odd = [undefined, null, true, '', '4096', [], {}, 4096n, Symbol('s'), () => 0, NaN, -Infinity, -1, 0.5,
    2 ** 53 + 2, 1e300, new Uint8Array([1])];
  const tf = api.TraceFile.parse(allocations(4), 't');
  const a = new api.Allocator('', 1e9);
  const methods = Object.getOwnPropertyNames(api.Allocator.prototype)
    .filter((m) => !['constructor', 'free', 'capacity'].includes(m) && !m.startsWith('__') && typeof a[m] === 'function');
  assert.ok(methods.length >= 20, `${methods.length} methods`);
  for (const m of methods) {
    for (const x of odd) {
      for (const args of [[x], [x, x], [4096, x]]) {
        try {
          a[m](...args);
        } catch (e) {
          assert.ok(e instanceof Error && !(e instanceof WebAssembly.RuntimeError) && e.message,
            `${m}(${args.map(String)}) threw ${e}`);
        }
      }
    }
    a.load_trace(tf);
  }
  for (const x of odd) {
    for (const f of [() => tf.describe_op(x), () => api.TraceFile.parse(x, x, x), () => api.TraceFile.parse_each_device(x, x),
      () => new api.ReplayRun(tf, x, x)]) {
      try { f(); } catch (e) { assert.ok(e instanceof Error && !(e instanceof WebAssembly.RuntimeError), String(e)); }
    }
  }
  a.reset();
  a.free_block(a.malloc(4096, 0));
  assert.equal(a.seek(4), undefined);
  assert.equal(a.trace_position(), 4);
});

test('a snapshot of two GPUs is read one GPU at a time, the device asked for or refused', () => {
  const list = (n) => `[${Array.from({ length: n }, (_, i) => `{"action": "alloc", "addr": ${4096 * (i + 1)}, "size": 512}`).join(',')}]`;
  const both = `{"device_traces": [${list(1)}, ${list(3)}]}`;
  throwsNaming(() => api.TraceFile.parse(both, 'two.json'),
    /^two\.json: the snapshot holds allocation events of devices 0 and 1; a replay simulates one GPU: choose one with the device argument/);
  const second = api.TraceFile.parse(both, 'two.json', 1);
  assert.equal(second.length, 3);
  assert.equal(second.device, 1);
  assert.equal(api.TraceFile.parse(both, 'two.json', 0).length, 1);
  throwsNaming(() => api.TraceFile.parse(both, 'two.json', 2), /records devices 0 to 1/);
  throwsNaming(() => api.TraceFile.parse(both, 'two.json', 2 ** 53), /^two\.json: device 9007199254740992 asked for/);
  throwsNaming(() => api.TraceFile.parse(both, 'two.json', '1'), /^device must be a number, got a string$/);
  assert.equal(api.TraceFile.parse(allocations(2), 'one.csv').device, undefined);
  throwsNaming(() => api.TraceFile.parse(allocations(2), 'one.csv', 0), /an RMM CSV trace records one device/);
  // One parse for every GPU, in device order.
  const each = api.TraceFile.parse_each_device(both, 'two.json');
  assert.deepEqual(each.map((t) => [t.device, t.length, t.name]), [[0, 1, 'two.json'], [1, 3, 'two.json']]);
  const one = api.TraceFile.parse_each_device(allocations(2), 'one.csv');
  assert.deepEqual(one.map((t) => [t.device, t.length]), [[undefined, 2]]);
  throwsNaming(() => api.TraceFile.parse_each_device('{', 'bad.json'), /^bad\.json: invalid trace/);
});

test('under cachalot\'s policy the memory map shows idle pages, and the holes pages moved out of', () => {
  const MiB = 2 ** 20;
  const a = new api.Allocator('policy:cachalot', 100 * MiB);
  const live = Array.from({ length: 20 }, () => a.malloc(5 * MiB, 0));
  live.filter((_, i) => i % 2 === 0).forEach((p) => a.free_block(p));
  const states = (flat) => {
    const out = [];
    for (let i = 1, s = 0; s < flat[0]; s++) {
      const [kind, count] = [flat[i + 4], flat[i + 5]];
      assert.equal(kind, 2, 'a range of cachalot\'s policy');
      i += 6;
      for (let b = 0; b < count; b++, i += 4) out.push([flat[i + 3], flat[i + 1]]);
    }
    return out;
  };
  const bytesIn = (list, state) => list.filter(([s]) => s === state).reduce((n, [, size]) => n + size, 0);
  const before = states(a.memory_map());
  assert.ok(bytesIn(before, 3) >= 8 * MiB, 'the holes hold idle pages');
  assert.equal(bytesIn(before, 4), 0, 'nothing has moved yet');
  a.malloc(8 * MiB, 0);
  const after = states(a.memory_map());
  assert.equal(bytesIn(after, 4), 8 * MiB, 'the pages moved left 8 MiB of unmapped address space');
  const held = after.filter(([s]) => s !== 4).reduce((n, [, size]) => n + size, 0);
  assert.equal(held, a.figures()[2], 'what holds memory is what is reserved');
  a.free();
});
