// Trace sources: the three embedded reference traces (copied next to the page at build
// time, under pkg/traces/) and any file a person picks, plain or gzip (decompressed with
// the browser's DecompressionStream, detected by gzip's magic bytes, not the file name).
// Every trace is parsed by the core's reader in wasm (TraceFile.parse).
// Invariant: an embedded trace is fetched and parsed at most once per page load.

import { TraceFile } from '../pkg/cachalot_wasm.js';

export const EMBEDDED = ['gpt2_train.csv.gz', 'resnet50_train.csv.gz', 'mixed_fc_conv.csv.gz'];
const cache = new Map();

/** Bytes of a Blob or Response body, gunzipped when they start with gzip's magic bytes. */
export async function textBytes(blob) {
  const raw = new Uint8Array(await blob.arrayBuffer());
  if (raw.length >= 2 && raw[0] === 0x1f && raw[1] === 0x8b) {
    const stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream('gzip'));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  return raw;
}

/** Parses bytes into a TraceFile; records how long reading took. */
export function parse(bytes, name) {
  const t0 = performance.now();
  const trace = TraceFile.parse(bytes, name);
  trace.parseMs = performance.now() - t0;
  return trace;
}

/** An embedded trace by file name. */
export async function embedded(name) {
  if (!cache.has(name)) {
    cache.set(name, (async () => {
      const response = await fetch(`pkg/traces/${name}`);
      if (!response.ok) throw new Error(`cannot fetch the embedded trace ${name}: HTTP ${response.status}`);
      return parse(await textBytes(await response.blob()), name);
    })());
  }
  try {
    return await cache.get(name);
  } catch (e) {
    cache.delete(name);
    throw e;
  }
}

/** A trace from a File the person picked. */
export async function fromFile(file) {
  return parse(await textBytes(file), file.name);
}

/** Fills a <select> with the embedded traces (and a slot for a loaded file). */
export function fillSelect(select) {
  select.innerHTML = '';
  for (const name of EMBEDDED) select.append(new Option(name.replace('.csv.gz', ''), name));
}
