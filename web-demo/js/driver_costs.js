// Driver costs: what one cuMemAlloc and one cuMemFree took on an NVIDIA H200 (driver 580),
// for the smallest and the largest segment measured, and the words that cite them. The page
// multiplies a replay's live counts of driver calls by these to put a time on them; the
// figures are measurements, so they are written here once, with their source, and nowhere
// else (docs/benchmarks.md, "Segment calls on the H200", says how they were taken).
// Invariant: every figure here appears in that section of docs/benchmarks.md.

import { count } from './units.js';

export const DRIVER_COSTS = {
  alloc: { call: 'cuMemAlloc', small: 50, large: 150 },
  free: { call: 'cuMemFree', small: 40, large: 1100 },
  smallBytes: 2 * 1024 ** 2,
  largeBytes: 2 * 1024 ** 3,
  source: 'measured on an NVIDIA H200, driver 580, median µs per call (docs/benchmarks.md, “Segment calls on the H200”)',
};

/** "cuMemFree 40 µs (2 MiB) – 1,100 µs (2 GiB)". */
export function costRange(kind) {
  const k = DRIVER_COSTS[kind];
  return `${k.call} ${count(k.small)} µs (2 MiB) – ${count(k.large)} µs (2 GiB)`;
}

/** `n` calls of `kind` ('alloc' or 'free') on segments of 2 MiB to 2 GiB: the least and the
 *  most they take, in milliseconds (each call costs at least its 2 MiB figure and at most its
 *  2 GiB one). Throws when a segment lies outside the measured sizes. */
export function callTime(kind, sizes) {
  for (const s of sizes) {
    if (s < DRIVER_COSTS.smallBytes || s > DRIVER_COSTS.largeBytes) {
      throw new Error(`a ${s}-byte segment lies outside the sizes measured (2 MiB to 2 GiB)`);
    }
  }
  const k = DRIVER_COSTS[kind];
  return { least: (sizes.length * k.small) / 1000, most: (sizes.length * k.large) / 1000 };
}

/** "7.3–200.2 ms". */
export function msRange({ least, most }) {
  const f = (x) => (x < 10 ? x.toFixed(2) : x.toFixed(1));
  return `${f(least)}–${f(most)} ms`;
}
