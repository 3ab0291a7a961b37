// End-to-end tests of the recorded run beside its replays (issue 43): a PyTorch snapshot's
// own figures as a row and as lines on the timeline, the stack frames of an allocation, a
// segment and a block on hover and on keyboard focus, the active-memory timeline by tensor
// (recorded and replayed, side by side, zoom and pan), and its speed with hundreds of
// thousands of allocations. Figures are compared with `cachalot replay --json` on the same
// file where the CLI has them, and with the fixture's own arithmetic where it does not.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { serve, launch, openPage, screenshot, cliReplay, REPO, ROOT, RESULTS } from './harness.mjs';

let server;
let browser;
let page;
let errors;

const MiB = 1 << 20;
const PICKLE = path.join(REPO, 'native', 'cli', 'tests', 'fixtures', 'pytorch_snapshot.pickle');
const RECORDED = path.join(ROOT, 'tests', 'fixtures', 'recorded_run.pickle');
const NO_HISTORY = path.join(ROOT, 'tests', 'fixtures', 'no_history.pickle');
const DIR = path.join(RESULTS, 'your_run');

before(async () => {
  const s = await serve();
  server = s.server;
  browser = await launch();
  ({ page, errors } = await openPage(browser.context, s.url));
  await mkdir(DIR, { recursive: true });
  await page.click('#tab-replay');
  await page.waitForSelector('#replay-outcome table');
});

after(async () => {
  if (browser) await browser.close();
  if (server) server.close();
});

/** `cachalot replay --json` on `file` under the page's config, even when it ran out of memory. */
function cli(file) {
  return page.$eval('#replay-outcome table', (t) => t.dataset.config).then((config) => {
    try {
      return cliReplay(file, config);
    } catch (e) {
      if (!e.stdout) throw e;
      return JSON.parse(e.stdout);
    }
  });
}

async function open(file) {
  const name = path.basename(file);
  // A file box that already holds the file fires no change: empty it first.
  await page.setInputFiles('#replay-file', []);
  await page.setInputFiles('#replay-file', file);
  await page.waitForFunction((n) => document.getElementById('status').textContent.startsWith(`${n}: `)
    && document.getElementById('replay-trace').value === `file:${n}`, name);
}

/** The recorded row's figures, by field. */
const recordedRow = () => page.$eval('#replay-outcome tr.recorded', (tr) => {
  const out = {};
  for (const e of tr.querySelectorAll('[data-field]')) out[e.dataset.field] = Number(e.dataset.value);
  return out;
});

test('the recorded run\'s own figures are a row beside the replay\'s, equal to the CLI\'s where it has them', async () => {
  await open(PICKLE);
  const c = await cli(PICKLE);
  const row = await recordedRow();
  // A history from the start: what the run allocated at most is what the replay was asked for at most.
  assert.equal(row.recorded_peak_allocated_bytes, c.peak_requested_bytes);
  assert.equal(row.recorded_device_allocs, c.segment_placements_recorded, 'segment_alloc events');
  assert.equal(row.recorded_ooms, c.trace_report.alloc_failures, 'oom events');
  assert.equal(row.recorded_peak_reserved_bytes, 20 * MiB);
  assert.equal(row.recorded_segments, 1);
  // The row sits above the replay's, under the same headers.
  const rows = await page.$$eval('#replay-outcome table tr', (trs) => trs.map((tr) => tr.className));
  assert.deepEqual(rows.slice(1, 3), ['recorded', 'cachalot']);

  // A history PyTorch's ring buffer cut: what was held before it is counted in.
  await open(RECORDED);
  const c2 = await cli(RECORDED);
  const r2 = await recordedRow();
  assert.equal(r2.recorded_peak_reserved_bytes, 42 * MiB, '20 MiB from before the history, 20 + 2 made in it');
  assert.equal(r2.recorded_peak_allocated_bytes, 8 * MiB + c2.peak_requested_bytes, '8 MiB before, then the replay\'s requests');
  assert.equal(r2.recorded_device_allocs, c2.segment_placements_recorded);
  assert.equal(r2.recorded_ooms, 1);
  assert.equal(c2.trace_report.alloc_failures, 1);
  assert.equal(r2.recorded_segments, 3);
  assert.match(await page.textContent('#recorded-run .recorded-note'), /starts mid-run .*20\.00 MiB reserved and 8\.00 MiB allocated before its first event/);
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('the recorded run is a dashed line on the timeline next to the replay\'s', async () => {
  const { series, recorded, legend } = await page.evaluate(() => {
    const t = window.cachalot.replay.pane.timeline;
    return { series: [...t.series.reserved], recorded: t.recorded && { reserved: [...t.recorded.reserved], allocated: [...t.recorded.allocated] }, legend: !t.recordedLegend.hidden };
  });
  assert.ok(recorded && legend);
  assert.equal(recorded.reserved.length, series.length, 'one value per operation');
  // After each operation of recorded_run.pickle (alloc 4, alloc 6, free 4, alloc 1, alloc 512 B), as the run held it.
  assert.deepEqual(recorded.allocated, [12, 18, 14, 15, 15].map((m) => m * MiB).map((v, i) => (i === 4 ? v + 512 : v)));
  assert.deepEqual(recorded.reserved, [40, 40, 40, 40, 42].map((m) => m * MiB));
  // Its colour is drawn on the canvas.
  const orange = await page.$eval('#replay-timeline canvas', (c) => {
    const { data } = c.getContext('2d').getImageData(0, 0, c.width, c.height);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) if (data[i] === 0xe0 && data[i + 1] === 0x7b && data[i + 2] === 0x00) n++;
    return n;
  });
  assert.ok(orange > 20, `recorded line drawn (${orange} px)`);
  // An RMM CSV records no allocator: no row, no line, and the page says so.
  await page.selectOption('#replay-trace', 'mixed_fc_conv.csv.gz');
  await page.waitForFunction(() => /records no allocator/.test(document.querySelector('#recorded-run .recorded-note').textContent));
  assert.equal(await page.$('#replay-outcome tr.recorded'), null);
  assert.match(await page.textContent('#recorded-run .recorded-note'), /none is recorded/);
  assert.equal(await page.evaluate(() => window.cachalot.replay.pane.timeline.recorded), null);
  assert.equal(errors.length, 0, errors.join('\n'));
});

/** Frames shown in the panel, one line each. */
const shownFrames = () => page.$$eval('#recorded-frames ol.frames li', (lis) => lis.map((li) => li.textContent));

test('an allocation\'s frames show on hover and on keyboard focus, a segment\'s and a block\'s too', async () => {
  await open(RECORDED);
  await page.$eval('#recorded-run', (e) => e.scrollIntoView());
  // Hover: the band of the 6 MiB tensor (the second allocation) at the end of the run, over
  // the 8 MiB held before the history (grey, at the bottom); 42 MiB are drawn in 192 px.
  const canvas = await page.$('#tensor-recorded canvas');
  const box = await canvas.boundingBox();
  await page.mouse.move(box.x + box.width - 20, box.y + box.height - 18 - 45);
  await page.waitForFunction(() => document.querySelector('#recorded-frames').dataset.band !== undefined);
  const title = await page.textContent('#recorded-frames .frames-title');
  assert.match(title, /^Allocation made at operation 1 \(allocate 6\.00 MiB/);
  assert.deepEqual(await shownFrames(), ['backward (/home/user/train.py:20)']);
  // Keyboard: focus the canvas, arrows pick the largest then walk the stack.
  await page.focus('#tensor-recorded canvas');
  await page.keyboard.press('End');
  const picked = await page.evaluate(() => window.cachalot.replay.recorded.recordedView.picked);
  assert.ok(picked, 'an allocation picked from the keyboard');
  const bands = await page.evaluate(() => [...window.cachalot.replay.trace.bands()]);
  assert.equal(bands.length / 4, 4, 'four allocations');
  // The largest live allocation at the end is the 6 MiB one: its frames are backward's.
  assert.deepEqual(await shownFrames(), ['backward (/home/user/train.py:20)']);
  await page.keyboard.press('ArrowUp');
  assert.match((await shownFrames())[0], /^d{10,}…$/, 'a 300-character name, cut');
  const deep = await shownFrames();
  assert.equal(deep.length, 33, '32 frames kept, then a line saying how many were not');
  assert.equal(deep[32], '… 8 more frames not kept');
  // Segments and blocks: focusable items; focus shows their frames.
  await page.click('#recorded-segments summary');
  await page.focus('#recorded-segments button.segment');
  assert.match(await page.textContent('#recorded-frames .frames-title'), /^Segment at 0x7f0000000000, 20\.00 MiB/);
  assert.deepEqual(await shownFrames(), ['warmup (/home/user/train.py:5)']);
  await page.focus('#recorded-segments li:nth-child(2) button.block:nth-of-type(2)');
  assert.match(await page.textContent('#recorded-frames .frames-title'), /^Block at 0x7f0004400000, 6\.00 MiB, allocated/);
  assert.deepEqual(await shownFrames(), ['backward (/home/user/train.py:20)']);
  await page.hover('#recorded-segments li:nth-child(3) button.segment');
  assert.deepEqual(await shownFrames(), ['bias (/home/user/train.py:50)']);
  await screenshot(page, 'recorded-run');
  // A snapshot without a history: its figures when taken, and its segments' list.
  await page.setInputFiles('#replay-file', NO_HISTORY);
  await page.waitForSelector('#snapshot-only:not([hidden])');
  assert.equal(await page.getAttribute('#recorded-run .recorded-note', 'data-reserved'), String(22 * MiB));
  assert.equal(await page.$$eval('#recorded-segments button.segment', (b) => b.length), 2);
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('active memory by tensor, recorded and replayed side by side, zooms and pans together', async () => {
  await page.selectOption('#replay-trace', 'file:recorded_run.pickle');
  await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('recorded_run.pickle: '));
  const view = () => page.evaluate(() => {
    const r = window.cachalot.replay.recorded;
    return [r.recordedView.from, r.recordedView.to, r.replayView.from, r.replayView.to];
  });
  assert.deepEqual(await view(), [0, 5, 0, 5]);
  // The replay's bands are its blocks: the 512 B tensor sits in a 512 B block; the others as asked.
  const sizes = await page.evaluate(() => [...window.cachalot.replay.recorded.replayView.sizes]);
  assert.deepEqual(sizes, [4 * MiB, 6 * MiB, MiB, 512]);
  // Zoom and pan through a larger trace (the reference mixed_fc_conv, 9,545 operations).
  await page.selectOption('#replay-trace', 'mixed_fc_conv.csv.gz');
  await page.waitForFunction(() => window.cachalot.replay.recorded.replayView.length === 9545);
  await page.click('#tensor-replay button:text("Zoom in")');
  const [a, b, c, d] = await view();
  assert.equal(b - a, Math.round(9545 / 2));
  assert.deepEqual([c, d], [a, b], 'the other side follows');
  await page.click('#tensor-replay button:text("Pan ▶")');
  const [a2] = await view();
  assert.ok(a2 > a, 'panned right');
  await page.focus('#tensor-replay canvas');
  await page.keyboard.press('Home');
  assert.deepEqual(await view(), [0, 9545, 0, 9545]);
  await page.keyboard.press('+');
  assert.equal((await view())[1] - (await view())[0], Math.round(9545 / 2));
  // The replay's stack at its peak equals the replay's peak allocated bytes (the bands are the blocks).
  const { peak, stackPeak } = await page.evaluate(() => {
    const v = window.cachalot.replay.recorded.replayView;
    return { peak: window.cachalot.replay.pane.figures.peak_allocated_bytes, stackPeak: v.live.reduce((m, x) => Math.max(m, x), 0) };
  });
  assert.equal(stackPeak, peak);
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('hundreds of thousands of allocations draw fast', async () => {
  // 300,000 allocations, a third of them long-lived, as an RMM CSV.
  const rows = ['Thread,Time,Action,Pointer,Size,Stream'];
  const live = [];
  let t = 0;
  for (let i = 0; i < 300000; i++) {
    const p = (0x100000 + i * 0x1000).toString(16);
    rows.push(`0,${t++},allocate,0x${p},${512 * (1 + (i % 97))},0x0`);
    live.push(p);
    if (i % 3 !== 0) rows.push(`0,${t++},free,0x${live.pop()},0,0x0`);
  }
  const file = path.join(DIR, 'many_tensors.csv');
  await writeFile(file, `${rows.join('\n')}\n`);
  await open(file);
  const ms = await page.evaluate(() => {
    const v = window.cachalot.replay.recorded.replayView;
    const t0 = performance.now();
    v.draw();
    v.zoom(0.1);
    v.setView(0, v.length);
    return (performance.now() - t0) / 3;
  });
  const bands = await page.evaluate(() => window.cachalot.replay.recorded.replayView.bands.length / 4);
  assert.equal(bands, 300000);
  console.log(`# tensor timeline: ${bands} allocations, ${ms.toFixed(1)} ms per draw`);
  assert.ok(ms < 1500, `a draw took ${ms.toFixed(0)} ms`);
  assert.equal(errors.length, 0, errors.join('\n'));
});

for (const form of ['json', 'pickle']) test(`a ${form} snapshot twice the text limit opens (frames interned as read), equal to the CLI's`, async () => {
  // make_large_snapshot.py writes the run large_snapshot.mjs measures; here 6 MB, with the
  // page's limits lowered to 4 MB of other text and 8 MB of snapshot, as 768 MiB and 1.5 GiB are.
  const file = path.join(DIR, `big_snapshot.${form}`);
  execFileSync('python3', [path.join(ROOT, 'tests', 'make_large_snapshot.py'), '6', file]);
  const csv = path.join(DIR, 'big_trace.csv');
  await writeFile(csv, `Time,Action,Pointer,Size\n${'1,allocate,0x10,512\n2,free,0x10,512\n'.repeat(150000)}`);
  const set = (text, json) => page.evaluate(async ([t, j]) => {
    Object.assign((await import('./js/trace_source.js')).limits, { textBytes: t, snapshotBytes: j });
  }, [text, json]);
  await set(4e6, 8e6);
  try {
    await open(file);
    const c = await cli(file);
    const row = await recordedRow();
    assert.equal(row.recorded_peak_allocated_bytes, c.peak_requested_bytes);
    assert.equal(row.recorded_device_allocs, c.segment_placements_recorded);
    assert.ok(row.recorded_segments > 0);
    const shown = await page.$eval('#replay-outcome tr.cachalot td[data-field="peak_reserved_bytes"]', (td) => Number(td.dataset.value));
    assert.equal(shown, c.peak_reserved_bytes);
    // Every band's frames are there: 12 a stack.
    const frames = await page.evaluate(() => {
      const t = window.cachalot.replay.trace;
      return t.stack_frames(t.bands()[3]).length;
    });
    assert.equal(frames, 12);
    // Other text keeps the lower limit.
    await page.setInputFiles('#replay-file', csv);
    await page.waitForFunction(() => /^big_trace\.csv: too large for the page \(more than 4000000 bytes of trace text\)/
      .test(document.getElementById('replay-error').textContent));
  } finally {
    await set(768 * 1024 * 1024, 1536 * 1024 * 1024);
  }
  assert.equal(errors.length, 0, errors.join('\n'));
});
