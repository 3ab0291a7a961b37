// End-to-end tests of what the guided scenarios teach under pressure, on a phone, and with
// hundreds of segments, in Debian's Chromium, headless. Each figure a scenario states about a
// real trace is read off the page and compared with `cachalot replay --json` (or its
// `--summary`) for the same trace, config and capacity: the FC/conv fragmentation and
// max_split_size_mb on mixed_fc_conv at 1.40 GiB, where PyTorch's default runs out of memory;
// empty_cache()'s driver calls between two epochs of gpt2_train and their time from the
// H200's measured costs (which docs/benchmarks.md must state); memory_summary() line by
// line. At 390×844 no view scrolls sideways and Compare's player stays a thin band; the
// segment list under a map of 293 segments holds them all, sorts, and selects one; zoom
// makes the map's labels 10 px or more.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { serve, launch, openPage, screenshot, REPO } from './harness.mjs';

let server;
let browser;
let page;
let errors;

before(async () => {
  const s = await serve();
  server = s.server;
  browser = await launch();
  ({ page, errors } = await openPage(browser.context, s.url));
});

after(async () => {
  if (browser) await browser.close();
  if (server) server.close();
});

const BIN = process.env.CACHALOT_BIN || path.join(REPO, 'target', 'release', 'cachalot');

/** `cachalot ARGS`' stdout; exit status 3 (the replay ran out of memory, its report complete) is expected here. */
function cli(args) {
  const r = spawnSync(BIN, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0 && r.status !== 3) throw new Error(`cachalot ${args.join(' ')}: status ${r.status}: ${r.stderr}`);
  return r.stdout;
}

/** `cachalot replay TRACE --config CONF --json --passes 3 [extra]`, parsed. */
const cliReplay = (file, config, extra = []) => JSON.parse(cli(['replay', file, '--config', config, '--json', '--passes', '3', ...extra]));

const GiB = 1024 ** 3;
const PRESSURE = Math.floor(1.4 * GiB);
const trace = (name) => path.join(REPO, 'traces', `${name}.csv.gz`);
const gib = (b) => `${(b / GiB).toFixed(2)} GiB`;
const num = (s) => Number(s.replace(/,/g, ''));

/** Runs scenario `id` to its end; returns its step outputs and its conclusion. */
async function runScenario(id) {
  await page.click('#tab-scenarios');
  await page.click(`#scenario-list button[data-id="${id}"]`);
  await page.click('#scenario-all');
  await page.waitForFunction(() => ['finished', 'failed'].includes(document.getElementById('view-scenarios').dataset.state), null, { timeout: 60000 });
  const outs = await page.$$eval('#scenario-steps .out', (os) => os.map((o) => o.textContent));
  assert.equal(await page.getAttribute('#view-scenarios', 'data-state'), 'finished', outs.join('\n'));
  return { outs, result: await page.textContent('#scenario-result') };
}

/** The output of the step whose caption matches `caption`. */
async function stepOut(caption) {
  const steps = await page.$$eval('#scenario-steps li', (ls) => ls.map((l) => ({ caption: l.querySelector('code').textContent, out: l.querySelector('.out')?.textContent || '' })));
  const s = steps.find((x) => caption.test(x.caption));
  assert.ok(s, `no step matching ${caption}`);
  return s.out;
}

test('fragmentation: the FC/conv claim on mixed_fc_conv at 1.40 GiB, where PyTorch’s default fails, equals the CLI', async () => {
  const { result } = await runScenario('fragmentation');
  const out = await stepOut(/^The article’s case: mixed_fc_conv/);
  const cli = cliReplay(trace('mixed_fc_conv'), 'policy:pytorch', ['--capacity', String(PRESSURE)]);
  const roomy = cliReplay(trace('mixed_fc_conv'), 'policy:pytorch');
  assert.equal(cli.capacity_bytes, PRESSURE);
  assert.ok(cli.ooms > 0, 'PyTorch’s default runs out of memory on 1.40 GiB');
  assert.ok(roomy.peak_requested_bytes < PRESSURE, 'though the run never asks for 1.40 GiB at once');
  const m = out.match(/peak requested memory is ([\d.]+ GiB), less than 1\.40 GiB, and yet (\d+) allocations fail\. The first: operation (\d+): (out of memory\..*)$/s);
  assert.ok(m, out);
  assert.equal(m[1], gib(roomy.peak_requested_bytes));
  assert.equal(Number(m[2]), cli.ooms);
  assert.equal(Number(m[3]), cli.first_oom.operation);
  assert.equal(m[4], cli.first_oom.explanation);
  // The conclusion's cached and non-releasable bytes are the CLI's "reserved but unallocated" and "pinned".
  const c = result.match(/refuses (\d+) allocations on a 1\.40 GiB device .* at the first, ([\d.]+ MiB) is cached and all of it lies in segments that still hold a tensor/);
  assert.ok(c, result);
  assert.equal(Number(c[1]), cli.ooms);
  assert.ok(cli.first_oom.explanation.includes(`${c[2]} is reserved by cachalot but unallocated`), cli.first_oom.explanation);
  assert.ok(cli.first_oom.explanation.includes(`${c[2]} of it is pinned`), cli.first_oom.explanation);
  // Under cachalot's policy the same device runs it.
  const paged = cliReplay(trace('mixed_fc_conv'), 'policy:cachalot', ['--capacity', String(PRESSURE)]);
  assert.match(await stepOut(/under cachalot’s policy$/), new RegExp(`mixed_fc_conv: ${paged.ooms} out of memory, peak reserved ${gib(paged.peak_reserved_bytes)}`));
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('max_split_size_mb without pressure backfires, under pressure removes every OOM of mixed_fc_conv: both equal the CLI', async () => {
  const { result } = await runScenario('max-split');
  const gptA = cliReplay(trace('gpt2_train'), 'policy:pytorch');
  const gptB = cliReplay(trace('gpt2_train'), 'policy:pytorch,max_split_size_mb:128');
  assert.match(result, new RegExp(`backfires: GPT-2’s peak reserved memory grows ${(gptB.peak_reserved_bytes / gptA.peak_reserved_bytes).toFixed(2)}×`));
  const cap = ['--capacity', String(PRESSURE)];
  const a = cliReplay(trace('mixed_fc_conv'), 'policy:pytorch', cap);
  const b = cliReplay(trace('mixed_fc_conv'), 'policy:pytorch,max_split_size_mb:128', cap);
  const c = cliReplay(trace('mixed_fc_conv'), 'policy:pytorch,max_split_size_mb:32', cap);
  assert.equal(c.ooms, 0);
  const pressed = await stepOut(/^Under pressure/);
  assert.ok(pressed.startsWith(`default: ${a.ooms} allocations refused; max_split_size_mb:128: ${b.ooms}. The first: operation ${a.first_oom.operation}: ${a.first_oom.explanation}`), pressed);
  const fixed = await stepOut(/max_split_size_mb:32$/);
  assert.equal(fixed, `0 allocations refused: peak reserved ${gib(c.peak_reserved_bytes)} = ${c.reserved_over_requested.toFixed(3)}× peak requested ${gib(c.peak_requested_bytes)}\n`
    + `the price: ${c.device_allocs} segments allocated and ${c.device_frees} freed, against the default’s ${a.device_allocs} and ${a.device_frees}`);
  assert.match(result, new RegExp(`loses ${a.ooms} allocations under PyTorch’s default \\(${b.ooms} with max_split_size_mb:128\\) and 0 with max_split_size_mb:32, at the price of ${(c.device_allocs + c.device_frees).toLocaleString('en-US')} segment allocations and frees instead of ${a.device_allocs + a.device_frees}`));
});

test('empty_cache(): its driver calls between two epochs equal the CLI’s counts, its time comes from the H200’s costs in docs/benchmarks.md', async () => {
  const { result } = await runScenario('empty-cache');
  const cli = cliReplay(trace('gpt2_train'), 'policy:pytorch');
  const out = await stepOut(/^A real run: two epochs of gpt2_train/);
  const m = out.match(/first epoch \(cold\): ([\d,]+) cuMemAlloc calls\nsecond epoch, cache kept: ([\d,]+) cuMemAlloc, ([\d,]+) cuMemFree\nempty_cache\(\) between them: ([\d,]+) cuMemFree \(([\d.]+ GiB) back to the device\), then the second epoch makes ([\d,]+) cuMemAlloc calls again/);
  assert.ok(m, out);
  assert.equal(num(m[1]), cli.device_calls_cold.allocations);
  assert.equal(num(m[2]), cli.device_calls_warm.allocations);
  assert.equal(num(m[3]), cli.device_calls_warm.frees);
  // empty_cache() after an epoch returns every segment the epoch left: all it allocated, less what it freed.
  assert.equal(num(m[4]), cli.device_calls_cold.allocations - cli.device_calls_cold.frees);
  assert.equal(m[5], gib(cli.peak_reserved_bytes));
  // and the next epoch asks for them all again, as the cold one did.
  assert.equal(num(m[6]), cli.device_calls_cold.allocations);
  // The time: counts × the measured costs, whose figures and source the page cites.
  const costs = await page.evaluate(async () => (await import('./js/driver_costs.js')).DRIVER_COSTS);
  const time = await stepOut(/^What those calls take on an H200$/);
  assert.ok(time.includes('cuMemAlloc 50 µs (2 MiB) – 150 µs (2 GiB); cuMemFree 40 µs (2 MiB) – 1,100 µs (2 GiB), measured on an NVIDIA H200'), time);
  assert.ok(time.includes('docs/benchmarks.md, “Segment calls on the H200”'), time);
  const frees = num(m[4]);
  const allocs = num(m[6]);
  const ms = (x) => (x < 10 ? x.toFixed(2) : x.toFixed(1));
  assert.ok(time.includes(`${m[4]} cuMemFree: ${ms(frees * costs.free.small / 1000)}–${ms(frees * costs.free.large / 1000)} ms; ${m[6]} cuMemAlloc: ${ms(allocs * costs.alloc.small / 1000)}–${ms(allocs * costs.alloc.large / 1000)} ms`), time);
  assert.ok(result.includes(`${ms((frees * costs.free.small + allocs * costs.alloc.small) / 1000)}–${ms((frees * costs.free.large + allocs * costs.alloc.large) / 1000)} ms on an H200`), result);
  // docs/benchmarks.md states each figure the page uses, in the section the page names.
  const docs = await readFile(path.join(REPO, 'docs', 'benchmarks.md'), 'utf8');
  const section = docs.slice(docs.indexOf('### Segment calls on the H200'));
  assert.ok(section.length > 30, 'docs/benchmarks.md has a “Segment calls on the H200” section');
  for (const [call, k] of [['cuMemAlloc', costs.alloc], ['cuMemFree', costs.free]]) {
    assert.match(section.slice(0, 2000), new RegExp(`\\| ${call} \\| ${k.small.toLocaleString('en-US')} \\| ${k.large.toLocaleString('en-US')} \\|`));
  }
});

test('memory_summary(): every line explained beside it; the figures equal the CLI’s --summary', async () => {
  await runScenario('summary');
  assert.equal(await page.$eval('#scenario-summary-box', (d) => d.open), true);
  const text = cli(['replay', trace('mixed_fc_conv'), '--config', 'policy:pytorch', '--capacity', String(PRESSURE), '--passes', '3', '--summary']);
  const atEnd = text.slice(text.indexOf('memory summary at the end of the trace')).split('\n').slice(1).filter((l) => l.startsWith('|')).join('\n');
  // The page shows the allocator at the trace's end: its summary is the CLI's, line for line.
  assert.equal((await page.textContent('#scenario-summary')).trim(), atEnd.trim());
  const rows = await page.$$eval('#scenario-summary-explained tr[data-label]', (trs) => trs.map((t) => ({ line: t.querySelector('.line').textContent, what: t.querySelector('.what').textContent })));
  const printed = atEnd.split('\n').filter((l) => !/^[|=\-\s]*$/.test(l));
  assert.deepEqual(rows.map((r) => r.line), printed);
  assert.deepEqual(rows.filter((r) => r.what.length < 20).map((r) => r.line), []);
  const what = (label) => rows.find((r) => r.line.startsWith(`| ${label}`)).what;
  assert.match(what('Non-releasable memory'), /split segments.*empty_cache\(\) returns only wholly free segments.*inactive_split_bytes/);
  assert.match(what('GPU reserved memory'), /reserved_bytes/);
  // The step at the first OOM quotes the non-releasable bytes the CLI's explanation calls pinned.
  const run = cliReplay(trace('mixed_fc_conv'), 'policy:pytorch', ['--capacity', String(PRESSURE)]);
  const first = await stepOut(/up to its first out of memory$/);
  const m = first.match(/^after operation (\d+): Allocated [\d.]+ GiB, GPU reserved [\d.]+ GiB, Non-releasable ([\d.]+ MiB), CUDA OOMs 1, cudaMalloc retries \d+: all of the ([\d.]+ MiB) cache is non-releasable$/);
  assert.ok(m, first);
  assert.equal(Number(m[1]), run.first_oom.operation);
  assert.ok(run.first_oom.explanation.includes(`${m[2]} of it is pinned`), run.first_oom.explanation);
  // The end: the CLI's CUDA OOMs and retries, as the summary's header prints them.
  const end = await stepOut(/^The same run to its end$/);
  const h = atEnd.match(/CUDA OOMs: (\d+)\s+\|\s+cudaMalloc retries: (\d+)/);
  assert.ok(end.includes(`CUDA OOMs ${h[1]}, cudaMalloc retries ${h[2]}`), end);
  assert.equal(Number(h[1]), run.ooms);
});

test('memory_summary() in the by-hand and replay views: explained line by line on demand, following each change', async () => {
  const rows = (view) => page.$$eval(`#${view}-summary + .summary-lines tr[data-label]`, (trs) => trs.map((t) => t.querySelector('.line').textContent));
  const printed = (view) => page.$eval(`#${view}-summary`, (p) => p.textContent.split('\n').filter((l) => l.trim() && !/^[|=\-\s]*$/.test(l)));
  await page.click('#tab-hand');
  await page.click('#hand-restart');
  await page.click('#view-hand .quick button[data-size="5242880"]');
  await page.click('#hand-summary + .summary-lines > summary');
  await page.waitForFunction(() => document.querySelectorAll('#hand-summary + .summary-lines tr[data-label]').length > 10);
  assert.deepEqual(await rows('hand'), await printed('hand'));
  // Another allocation reprints the summary; the explained lines follow it.
  const before = (await rows('hand')).find((l) => l.startsWith('| Allocated memory'));
  await page.click('#view-hand .quick button[data-size="31457280"]');
  await page.waitForFunction((b) => ![...document.querySelectorAll('#hand-summary + .summary-lines tr[data-label] .line')].some((l) => l.textContent === b), before);
  assert.deepEqual(await rows('hand'), await printed('hand'));
  assert.match((await rows('hand')).find((l) => l.startsWith('| Allocated memory')), /\|  35840 KiB \|/);
  await page.click('#tab-replay');
  await page.waitForSelector('#replay-outcome table');
  await page.click('#replay-summary + .summary-lines > summary');
  await page.waitForFunction(() => document.querySelectorAll('#replay-summary + .summary-lines tr[data-label]').length > 10);
  assert.deepEqual(await rows('replay'), await printed('replay'));
  const what = await page.$eval('#replay-summary + .summary-lines tr[data-label="Non-releasable memory"] .what', (t) => t.textContent);
  assert.match(what, /empty_cache\(\) returns only wholly free segments/);
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('phone, 390×844: no view scrolls sideways, tables scroll in their own box, Compare’s player is a thin band', async () => {
  await page.setViewportSize({ width: 390, height: 844 });
  try {
    for (const view of ['scenarios', 'hand', 'replay', 'compare']) {
      await page.click(`#tab-${view}`);
      if (view === 'replay') await page.waitForSelector('#replay-outcome table');
      if (view === 'compare') await page.waitForSelector('#compare-outcome-b table');
      await page.waitForTimeout(200);
      const widths = await page.evaluate(() => ({
        document: document.documentElement.scrollWidth,
        // Any box wider than the screen scrolls inside a parent that does not.
        overflowing: [...document.querySelectorAll('table, .legend, pre, canvas')]
          .filter((e) => e.getClientRects().length && e.getBoundingClientRect().width > 390)
          .filter((e) => { for (let p = e.parentElement; p; p = p.parentElement) { if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX) && p.getBoundingClientRect().width <= 390) return false; } return true; })
          .map((e) => e.id || e.className || e.tagName),
      }));
      assert.ok(widths.document <= 390, `${view}: the document is ${widths.document} px wide`);
      assert.deepEqual(widths.overflowing, [], view);
      await screenshot(page, `phone-${view}`);
    }
    // Compare: the sticky player takes at most a thin band of the screen, and still plays.
    const player = await page.$eval('#compare-player', (p) => p.getBoundingClientRect().height);
    assert.ok(player <= 60, `the player is ${player} px high on an 844 px screen`);
    assert.equal(await page.isVisible('#compare-player [aria-label="Play"]'), true);
    assert.equal(await page.isVisible('#compare-player-scrub'), true);
    // The scenarios' summary and the footer's legend fit too.
    await runScenario('summary');
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth) <= 390);
  } finally {
    await page.setViewportSize({ width: 1400, height: 1000 });
  }
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('hundreds of segments: the segment list holds every one, sorts by address, size and free bytes, and selects one in the map', async () => {
  await page.click('#tab-compare');
  await page.selectOption('#compare-trace', 'gpt2_train.csv.gz');
  await page.click('#compare-run');
  await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('gpt2_train.csv.gz: peak reserved'));
  await page.click('#compare-player [aria-label="Replay to the end"]');
  const n = Number((await page.textContent('#compare-map-b .map-bar')).match(/(\d+) segments/)[1]);
  assert.ok(n >= 200, `${n} segments`);
  await page.click('#compare-map-b .segment-list summary');
  // The list draws when it opens (the toggle event comes after the click).
  await page.waitForFunction((k) => document.querySelectorAll('#compare-map-b .segment-list tbody tr').length === k, n);
  assert.equal(await page.textContent('#compare-map-b .segment-list summary'), `Segment list (${n})`);
  const column = (key) => page.$$eval(`#compare-map-b .segment-list td[data-key="${key}"]`, (tds) => tds.map((t) => Number(t.dataset.value)));
  const addresses = await column('address');
  assert.equal(addresses.length, n);
  assert.deepEqual(addresses, [...addresses].sort((x, y) => x - y));
  // Sorting from the keyboard: size, largest first.
  await page.focus('#compare-map-b .segment-list th[data-key="size"] button');
  await page.keyboard.press('Enter');
  const sizes = await column('size');
  assert.deepEqual(sizes, [...sizes].sort((x, y) => y - x));
  assert.equal(await page.getAttribute('#compare-map-b .segment-list th[data-key="size"]', 'aria-sort'), 'descending');
  // The sizes are the map's own segments.
  const mapSizes = await page.evaluate(() => window.cachalot.compare.panes[1].map.segments.map((s) => s.total).sort((x, y) => y - x));
  assert.deepEqual(sizes, mapSizes);
  await page.click('#compare-map-b .segment-list th[data-key="free"] button');
  const free = await column('free');
  assert.deepEqual(free, [...free].sort((x, y) => y - x));
  // A row selects its segment in the map: outlined, scrolled to, described.
  const row = await page.$eval('#compare-map-b .segment-list tbody tr:nth-child(3)', (tr) => ({ index: Number(tr.dataset.index), address: tr.querySelector('button').textContent }));
  await page.click('#compare-map-b .segment-list tbody tr:nth-child(3) button');
  const focus = await page.evaluate(() => window.cachalot.compare.panes[1].map.focus);
  assert.deepEqual(focus, { seg: row.index, block: 0 });
  assert.match(await page.textContent('#compare-map-b .map-tip'), new RegExp(`segment +${row.address}`));
  assert.equal(await page.isVisible('#compare-map-b .map-tip'), true);
  await screenshot(page, 'segment-list');
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('hundreds of segments: zoom, by button and by keyboard, keeps the map’s labels at 10 px or more and the selected segment in view', async () => {
  // The compare view is at gpt2_train's end from the test before: 293 segments on side B.
  const map = () => page.evaluate(() => {
    const m = window.cachalot.compare.panes[1].map;
    return { label: m.labelPx(), pitch: m.pitch(), rows: m.segments.length, top: m.scroll.scrollTop, view: m.viewH, focus: m.focus };
  });
  const start = await map();
  assert.ok(start.rows >= 200 && start.label < 10, `at first ${start.rows} rows with ${start.label} px labels`);
  assert.equal(await page.isDisabled('#compare-map-b [aria-label="Zoom out: shorter rows"]'), true);
  await page.click('#compare-map-b [aria-label="Zoom in: taller rows, larger labels"]');
  const zoomed = await map();
  assert.ok(zoomed.label >= 10, `${zoomed.label} px labels after zooming in`);
  // The selected segment (from the segment list) stays in view.
  const y = 4 + zoomed.focus.seg * zoomed.pitch;
  assert.ok(y >= zoomed.top && y + zoomed.pitch <= zoomed.top + zoomed.view, JSON.stringify(zoomed));
  // From the keyboard, on the map: - and +.
  await page.focus('#compare-map-b canvas');
  await page.keyboard.press('-');
  assert.equal((await map()).label, start.label);
  await page.keyboard.press('+');
  await page.keyboard.press('+');
  const more = await map();
  assert.ok(more.label >= 10 && more.pitch > zoomed.pitch, JSON.stringify(more));
  // The map scrolls through every row at that height.
  const height = await page.$eval('#compare-map-b .map-scroll', (s) => s.scrollHeight);
  assert.ok(height >= more.rows * more.pitch, `${height} px for ${more.rows} rows of ${more.pitch} px`);
  await screenshot(page, 'map-zoomed');
  assert.equal(errors.length, 0, errors.join('\n'));
});
