// Units: byte counts and counts as the page shows them, and sizes typed with a unit.
// Invariant: `bytes` uses binary units with two decimals, as the `cachalot` CLI prints them
// ("20.35 GiB", "512 B"), so a figure reads the same in the page and in the terminal.

export const UNITS = { B: 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, TiB: 1024 ** 4 };

/** "20.35 GiB" (the CLI's `human`). */
export function bytes(n) {
  const names = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < names.length - 1) {
    v /= 1024;
    u += 1;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(2)} ${names[u]}`;
}

/** "69,203". */
export function count(n) {
  return Math.round(n).toLocaleString('en-US');
}

/** "0x7fffffe00000". */
export function hex(n) {
  return `0x${n.toString(16)}`;
}

/** A whole number of bytes from a number and a unit name; throws an Error naming the problem. */
export function parseSize(value, unit) {
  const text = String(value).trim();
  const scale = UNITS[unit];
  if (scale === undefined) throw new Error(`unknown unit '${unit}' (use ${Object.keys(UNITS).join(', ')})`);
  if (text === '' || !/^\d*\.?\d+$|^\d+\.$/.test(text)) throw new Error(`'${text}' is not a size: type a number such as 20 or 1.5`);
  const n = Math.round(Number(text) * scale);
  if (!(n >= 1)) throw new Error(`a size must be at least 1 byte, got ${text} ${unit}`);
  return n;
}
