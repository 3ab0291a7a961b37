// PyTorch's own figures for the embedded traces, measured on an H200 (traces/
// pytorch_reference.jsonl, copied next to the page at build time), matched to a cachalot
// config the way `cachalot compare` matches them: `policy:pytorch` is PyTorch's
// `default`, `policy:pytorch,max_split_size_mb:128` is `max_split_size_mb:128`.
// Invariant: a figure is shown only for a config that makes PyTorch's decisions, on an
// embedded trace (never a file that merely has its name), and compared only on the device
// PyTorch ran on: the simulated capacity the CLI and the page default to for that reason.

let rows = [];

/** The simulated capacity that stands for the H200 the reference ran on (`cachalot replay`'s default). */
export const REFERENCE_CAPACITY = 140 * 1024 ** 3;

export async function loadReference() {
  try {
    const r = await fetch('pkg/traces/pytorch_reference.jsonl');
    if (!r.ok) return;
    rows = (await r.text()).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
  } catch {
    rows = [];
  }
}

/** PyTorch's name for the config a canonical cachalot config string reproduces, or null. */
export function pytorchConfName(config) {
  if (!config.startsWith('policy:pytorch')) return null;
  const rest = config.slice('policy:pytorch'.length).replace(/^,/, '');
  return rest === '' ? 'default' : rest;
}

/** The reference row for a trace and canonical config, or null. */
export function reference(trace, config) {
  const conf = pytorchConfName(config);
  return conf ? rows.find((r) => r.trace === trace && r.conf === conf) || null : null;
}

/** The row comparable with a cold pass's figures `f` (of an embedded trace), or null. */
export function comparableReference(f) {
  return f.capacity_bytes === REFERENCE_CAPACITY ? reference(f.trace, f.config) : null;
}

/** PyTorch's peak reserved over its own peak requested bytes. */
export function referenceRatio(ref) {
  return ref.peak_reserved / Math.max(1, ref.peak_requested);
}
