// Trace sources: the three embedded reference traces (copied next to the page at build
// time, under pkg/traces/) and any file a person picks or drops — RMM CSV, PyTorch snapshot
// JSON, or the pickle `torch.cuda.memory._dump_snapshot` writes — plain or gzip (decompressed
// with the browser's DecompressionStream, detected by gzip's magic bytes, not the file name).
// Every trace is parsed from the file's bytes by the core's reader in wasm (TraceFile.parse),
// the CLI's own, pickles included.
// Invariant: an embedded trace is fetched and parsed at most once per page load, and is
// marked `embedded` (PyTorch's reference figures may apply to it, never to a file); a file
// that is not valid gzip, holds more text than the page can parse, or holds no allocation
// event (and no segments to draw, or the caller cannot draw them), is refused with its name
// and the two lines that record a history; a
// snapshot of several GPUs becomes one trace per GPU with events, each labelled with it.

import { TraceFile } from '../pkg/cachalot_wasm.js';
import { clause } from './refusal.js';
import { RECORD_LINES } from './snapshot_only.js';

export const EMBEDDED = ['gpt2_train.csv.gz', 'resnet50_train.csv.gz', 'mixed_fc_conv.csv.gz'];
const cache = new Map();

/**
 * The most bytes of trace text (once gunzipped) the page reads. The wasm module's memory
 * (4 GiB at most, never given back) must hold the text, its copy and the parsed trace at
 * once: a 1.2 GB CSV of 40 million operations traps, and the memory it took is lost to later
 * files. An object, so that a test can lower it.
 */
export const limits = { textBytes: 768 * 1024 * 1024, snapshotBytes: 1536 * 1024 * 1024 };

/**
 * The most bytes the page reads of text that starts as `head` does: a JSON or pickle snapshot is read
 * with its frames interned as they are met (wasm/src/slim_snapshot.rs), so it may be twice as
 * large (`limits.snapshotBytes`) as other text.
 */
function limitFor(head) {
  let i = head[0] === 0xef && head[1] === 0xbb && head[2] === 0xbf ? 3 : 0;
  while (i < head.length && (head[i] === 0x20 || head[i] === 0x0a || head[i] === 0x0d || head[i] === 0x09)) i++;
  // A JSON snapshot, or a pickle (0x80, then protocol 2 to 5), as torch.cuda.memory._dump_snapshot writes.
  const pickle = head[0] === 0x80 && head[1] >= 2 && head[1] <= 5;
  return head[i] === 0x7b || pickle ? limits.snapshotBytes : limits.textBytes;
}

/** Refuses text longer than the limit, naming the file and the tool that can replay it. */
function tooLarge(name, gzipped, n = limits.textBytes) {
  const size = n % (1024 * 1024) === 0 ? `${n / (1024 * 1024)} MiB` : `${n} bytes`;
  return new Error(`${name}: too large for the page (more than ${size} of trace text`
    + `${gzipped ? ' once decompressed' : ''}); replay it with the command-line tool: cachalot replay FILE`);
}

/** All of a stream's chunks as one array; a failing stream throws its own error, a stream
 *  longer than `limitOf(first chunk)` bytes the one `tooLong(limit)` makes. */
async function drain(stream, limitOf, tooLong) {
  const reader = stream.getReader();
  const chunks = [];
  let length = 0;
  let limit = null;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    if (limit === null) limit = limitOf(value);
    length += value.length;
    if (length > limit) {
      await reader.cancel();
      throw tooLong(limit);
    }
  }
  const out = new Uint8Array(length);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/**
 * Bytes of a Blob or Response body, gunzipped when they start with gzip's magic bytes;
 * throws "NAME: not a valid gzip file (why)" when they cannot be.
 */
export async function textBytes(blob, name = 'the file') {
  const raw = new Uint8Array(await blob.arrayBuffer());
  if (raw.length >= 2 && raw[0] === 0x1f && raw[1] === 0x8b) {
    const tooLong = (n) => Object.assign(tooLarge(name, true, n), { tooLong: true });
    try {
      // Read the stream itself: through a Response, every gzip error reads "Failed to fetch".
      return await drain(new Blob([raw]).stream().pipeThrough(new DecompressionStream('gzip')),
        limitFor, tooLong);
    } catch (e) {
      if (e.tooLong) throw e;
      throw new Error(`${name}: not a valid gzip file (${clause(e.message || e)})`);
    }
  }
  const limit = limitFor(raw.subarray(0, 64));
  if (raw.length > limit) throw tooLarge(name, false, limit);
  return raw;
}

/** Labels a parsed trace with its name and GPU, and records how long reading took. */
function labelled(trace, ms) {
  trace.parseMs = ms;
  trace.label = trace.device === undefined ? trace.name : `${trace.name}, device ${trace.device}`;
  return trace;
}

/** Parses bytes into a TraceFile. */
export function parse(bytes, name) {
  const t0 = performance.now();
  const trace = TraceFile.parse(bytes, name);
  return labelled(trace, performance.now() - t0);
}

/** An embedded trace by file name. */
export async function embedded(name) {
  if (!cache.has(name)) {
    cache.set(name, (async () => {
      const response = await fetch(`pkg/traces/${name}`);
      if (!response.ok) throw new Error(`cannot fetch the embedded trace ${name}: HTTP ${response.status}`);
      const trace = parse(await textBytes(await response.blob(), name), name);
      trace.embedded = true;
      return trace;
    })());
  }
  try {
    return await cache.get(name);
  } catch (e) {
    cache.delete(name);
    throw e;
  }
}

/**
 * The traces in a File the person picked: one, or one per GPU of a snapshot that recorded
 * several (a replay simulates one GPU); throws an Error naming the file if it is unusable.
 * A snapshot with segments but no history comes back as `{ noHistory: true, name, map, trace }`
 * (its segments' memory map, and its TraceFile for the frames, which the caller frees) when
 * `noHistory` allows it.
 */
export async function fromFile(file, { noHistory = false } = {}) {
  const bytes = await textBytes(file, file.name);
  const t0 = performance.now();
  const traces = TraceFile.parse_each_device(bytes, file.name);
  const ms = performance.now() - t0;
  if (traces[0].length === 0) {
    const map = traces[0].snapshot_map();
    // The caller keeps the one trace it is handed (its segments' frames) and frees it.
    if (map && noHistory) return { noHistory: true, name: file.name, map, trace: traces[0] };
    traces.forEach((t) => t.free());
    const how = map ? ` (it was taken without a recorded history: call ${RECORD_LINES[0]} before the work and `
      + `${RECORD_LINES[1]} after it)` : '';
    throw new Error(`${file.name} holds no allocation events: nothing to replay${how}`);
  }
  return traces.map((t) => labelled(t, ms));
}

/** Fills a <select> with the embedded traces (and a slot for a loaded file). */
export function fillSelect(select) {
  select.innerHTML = '';
  for (const name of EMBEDDED) select.append(new Option(name.replace('.csv.gz', ''), name));
}

/**
 * Adds an option for each of `traces` (from one file) to `select`, keeping each in `files`
 * under its key; returns the first one's key.
 */
export function addFileOptions(select, files, traces) {
  const keys = traces.map((trace) => {
    const key = `file:${trace.label}`;
    files.set(key, trace);
    if (![...select.options].some((o) => o.value === key)) select.append(new Option(`${trace.label} (your file)`, key));
    return key;
  });
  return keys[0];
}
