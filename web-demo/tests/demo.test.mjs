// End-to-end tests of the browser demo: Debian's Chromium, headless, drives the page as a
// person would — every guided scenario, allocating and freeing by hand (mouse and
// keyboard), replaying the embedded traces and loaded files, comparing two configs — and
// checks that every figure the page shows equals `cachalot replay --json` for the same
// trace and config. It measures gpt2_train's replay to its end and the playback frame
// rate, writes them to test-results/browser-bench.json, and saves a screenshot per view.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { serve, launch, openPage, screenshot, cliReplay, REPO, RESULTS } from './harness.mjs';

let server;
let browser;
let page;
let errors;
const bench = {};

before(async () => {
  const s = await serve();
  server = s.server;
  browser = await launch();
  ({ page, errors } = await openPage(browser.context, s.url));
});

after(async () => {
  await mkdir(RESULTS, { recursive: true });
  await writeFile(path.join(RESULTS, 'browser-bench.json'), `${JSON.stringify(bench, null, 2)}\n`);
  if (browser) await browser.close();
  if (server) server.close();
});

const FIELDS = ['peak_requested_bytes', 'peak_allocated_bytes', 'peak_reserved_bytes', 'device_allocs', 'ooms'];

/** The figures an outcome table shows, by JSON field name. */
async function tableFigures(selector) {
  return page.$eval(selector, (host) => {
    const out = {};
    for (const td of host.querySelectorAll('tr.cachalot td[data-field]')) out[td.dataset.field] = td.dataset.value;
    out.config = host.querySelector('table').dataset.config;
    out.text = host.querySelector('tr.cachalot').innerText;
    return out;
  });
}

/** Asserts the page's figures equal the CLI's for `trace` (a path) and the config the page used. */
async function assertMatchesCli(selector, trace) {
  const shown = await tableFigures(selector);
  const cli = cliReplay(trace, shown.config);
  for (const f of FIELDS) {
    assert.equal(Number(shown[f]), cli[f], `${path.basename(trace)} under ${shown.config}: ${f}`);
  }
  // The exact byte counts are on the page as text too.
  assert.ok(shown.text.includes(cli.peak_reserved_bytes.toLocaleString('en-US')), shown.text);
  return { shown, cli };
}

const live = (host, field) => page.$eval(`#${host} [data-field="${field}"]`, (e) => Number(e.dataset.value));
const kinds = (list) => page.$$eval(`#${list} li[data-kind]`, (lis) => lis.map((l) => l.dataset.kind));

test('the page loads the allocator and its tabs work from the keyboard', async () => {
  assert.match(await page.textContent('#status'), /Ready/);
  await page.focus('#tab-scenarios');
  await page.keyboard.press('ArrowRight');
  assert.equal(await page.getAttribute('#tab-hand', 'aria-selected'), 'true');
  assert.equal(await page.isVisible('#view-hand'), true);
  await page.keyboard.press('ArrowLeft');
  assert.equal(await page.isVisible('#view-scenarios'), true);
  // Every form control has a label.
  const unlabelled = await page.$$eval('input, select', (els) => els
    .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
    .map((e) => e.id || e.outerHTML));
  assert.deepEqual(unlabelled, []);
});

test('every guided scenario runs to its conclusion', async () => {
  const expectedOoms = { caching: 0, splitting: 0, fragmentation: 2, 'max-split': 1, 'empty-cache': 0, leak: 1, fraction: 2 };
  const ids = await page.$$eval('#scenario-list button', (bs) => bs.map((b) => b.dataset.id));
  assert.deepEqual(ids.sort(), Object.keys(expectedOoms).sort());
  for (const id of ids) {
    await page.click(`#scenario-list button[data-id="${id}"]`);
    await page.click('#scenario-next');
    await page.waitForFunction(() => document.querySelectorAll('#scenario-steps .out').length === 1);
    await page.click('#scenario-all');
    await page.waitForFunction(() => ['finished', 'failed'].includes(document.getElementById('view-scenarios').dataset.state), null, { timeout: 30000 });
    const state = await page.getAttribute('#view-scenarios', 'data-state');
    const outs = await page.$$eval('#scenario-steps .out', (os) => os.map((o) => ({ text: o.textContent, oom: o.dataset.expected === 'oom' })));
    assert.equal(state, 'finished', `${id}: ${JSON.stringify(outs)}`);
    assert.equal(outs.filter((o) => o.oom).length, expectedOoms[id], id);
    for (const o of outs.filter((x) => x.oom)) assert.match(o.text, /out of memory\. Tried to allocate/, id);
    assert.ok((await page.textContent('#scenario-result')).length > 40, id);
    if (id === 'fragmentation') await screenshot(page, 'scenarios');
  }
  // The max_split_size_mb scenario says where the setting backfires, with live figures.
  await page.click('#scenario-list button[data-id="max-split"]');
  await page.click('#scenario-all');
  await page.waitForFunction(() => document.getElementById('view-scenarios').dataset.state === 'finished');
  assert.match(await page.textContent('#scenario-result'), /backfires: GPT-2’s peak reserved memory grows 2\.24×/);
});

test('by hand: each decision explained, free by click and by keyboard, pending free, out of memory', async () => {
  await page.click('#tab-hand');
  await page.click('#hand-restart');
  await page.fill('#hand-size', '5');
  await page.selectOption('#hand-unit', 'MiB');
  await page.click('#hand-alloc');
  assert.deepEqual(await kinds('hand-explain'), ['rounded', 'pool', 'best_fit', 'new_segment', 'split']);
  assert.equal(await live('hand-figures', 'live_allocated'), 5 * 2 ** 20);
  assert.equal(await live('hand-figures', 'live_reserved'), 20 * 2 ** 20);
  await page.click('#view-hand .quick button[data-size="1000"]');
  assert.match(await page.textContent('#hand-explain'), /Round 1000 bytes up to 1024 bytes/);
  assert.equal(await live('hand-figures', 'live_segments'), 2);

  // Click the 5 MiB block in the map to free it.
  const where = await page.evaluate(() => {
    const m = window.cachalot.hand.map;
    const s = m.segments.findIndex((seg) => seg.large);
    const r = m.canvas.getBoundingClientRect();
    return { x: r.left + 150 + 5, y: r.top + 4 + s * m.pitch() + 3 };
  });
  await page.mouse.move(where.x, where.y);
  assert.match(await page.textContent('#hand-map .map-tip'), /allocated[\s\S]*requested +5\.00 MiB/);
  await page.mouse.click(where.x, where.y);
  assert.deepEqual(await kinds('hand-explain'), ['merged', 'cached']);
  assert.match(await page.textContent('#hand-explain'), /a whole segment: empty_cache can return it/);
  assert.equal(await live('hand-figures', 'live_allocated'), 1024);

  // Free the 1000-byte block with the keyboard: focus the map, move to it, press Enter.
  const target = await page.evaluate(() => {
    const segs = window.cachalot.hand.map.segments;
    const s = segs.findIndex((seg) => seg.blocks.some((b) => b.state === 0));
    return { s, b: segs[s].blocks.findIndex((b) => b.state === 0) };
  });
  await page.focus('#hand-map canvas');
  await page.keyboard.press('Home');
  for (let i = 0; i < target.s; i++) await page.keyboard.press('ArrowDown');
  for (let i = 0; i < target.b; i++) await page.keyboard.press('ArrowRight');
  await page.keyboard.press('Enter');
  assert.equal(await live('hand-figures', 'live_allocated'), 0);
  assert.equal(await live('hand-figures', 'live_reserved'), 22 * 2 ** 20);

  // A block used on a busy stream stays pending after its free.
  await page.fill('#hand-busy-stream', '1');
  await page.click('#hand-hold');
  await page.fill('#hand-size', '3');
  await page.click('#hand-alloc');
  await page.selectOption('#hand-live', { index: 0 });
  await page.fill('#hand-use-stream', '1');
  await page.click('#hand-record');
  await page.click('#hand-free');
  assert.deepEqual(await kinds('hand-explain'), ['pending']);
  const pending = await page.evaluate(() => window.cachalot.hand.map.segments.flatMap((s) => s.blocks).filter((b) => b.state === 1).length);
  assert.equal(pending, 1);
  await screenshot(page, 'hand');
  await page.click('#hand-finish');
  await page.fill('#hand-size', '512');
  await page.selectOption('#hand-unit', 'B');
  await page.click('#hand-alloc');
  assert.ok((await kinds('hand-explain')).includes('events_completed'));

  // empty_cache returns the unsplit segments.
  await page.click('#hand-empty');
  assert.equal(await live('hand-figures', 'live_reserved'), 2 * 2 ** 20);

  // A memory fraction, and its out-of-memory message with every step of the path.
  await page.fill('#hand-fraction', '0.05');
  await page.click('#hand-set-fraction');
  await page.fill('#hand-size', '60');
  await page.selectOption('#hand-unit', 'MiB');
  await page.click('#hand-alloc');
  const err = await page.textContent('#hand-error');
  assert.match(err, /^out of memory\. Tried to allocate 60\.00 MiB .* 51\.20 MiB allowed;/);
  const k = await kinds('hand-explain');
  assert.deepEqual(k.slice(-2), ['out_of_memory', 'error']);
  assert.ok(k.includes('segment_refused'));

  // Bad input is an error that says what is wrong; a bad config names its key.
  await page.fill('#hand-size', 'lots');
  await page.click('#hand-alloc');
  assert.match(await page.textContent('#hand-error'), /'lots' is not a size/);
  await page.fill('#hand-config .conf', 'policy:pytorch,max_split_size_mb:5');
  await page.click('#hand-restart');
  assert.match(await page.textContent('#hand-error'), /max_split_size_mb.*must be >= 20/);
  await page.fill('#hand-config .conf', 'policy:pytorch');
  await page.click('#hand-restart');
});

test('replay: gpt2_train equals the CLI, replays to its end in under 1 s, plays at 30 fps or more', async () => {
  await page.click('#tab-replay');
  await page.waitForSelector('#replay-outcome table');
  const gpt2 = path.join(REPO, 'traces', 'gpt2_train.csv.gz');
  const { cli } = await assertMatchesCli('#replay-outcome', gpt2);
  assert.match(await page.textContent('#replay-outcome tr.pytorch'), /PyTorch 2\.11/);

  // Reading the trace from scratch: fetch, gunzip (DecompressionStream) and parse.
  bench.gpt2_read_ms = await page.evaluate(async () => {
    const src = await import('./js/trace_source.js');
    const t0 = performance.now();
    const r = await fetch('pkg/traces/gpt2_train.csv.gz');
    const t = src.parse(await src.textBytes(await r.blob()), 'gpt2_train.csv.gz');
    const ms = performance.now() - t0;
    t.free();
    return ms;
  });
  // Replay to the end from the start, final state drawn and painted; best of three.
  const toEnd = [];
  for (let i = 0; i < 3; i++) {
    await page.evaluate(() => window.cachalot.replay.player.seek(0));
    toEnd.push(await page.evaluate(() => window.cachalot.replay.player.toEnd()));
  }
  bench.gpt2_to_end_ms = toEnd;
  // Everything the Replay button does: the cold pass with its timeline, a fresh allocator,
  // then to the end and painted.
  bench.gpt2_replay_and_draw_ms = await page.evaluate(async () => {
    const v = window.cachalot.replay;
    const t0 = performance.now();
    await v.apply();
    await v.player.toEnd();
    return performance.now() - t0;
  });
  assert.ok(Math.min(...toEnd) < 1000, `to the end: ${toEnd}`);
  assert.ok(bench.gpt2_replay_and_draw_ms < 1000, `replay and draw: ${bench.gpt2_replay_and_draw_ms}`);
  assert.match(await page.textContent('#replay-player .where'), /op 69,203 \/ 69,203 · end of the trace/);
  assert.match(await page.textContent('#replay-map .map-bar'), new RegExp(`${cli.device_allocs} segments`));
  assert.equal(await live('replay-figures', 'live_peak_reserved'), cli.peak_reserved_bytes);
  await screenshot(page, 'replay');

  // Playback: frames drawn per second while playing.
  await page.evaluate(() => window.cachalot.replay.player.seek(0));
  await page.selectOption('#replay-player-speed', '10000');
  const f0 = await page.evaluate(() => ({ frames: window.cachalot.replay.player.frames, t: performance.now() }));
  await page.click('#replay-player [aria-label="Play"]');
  await page.waitForTimeout(3000);
  const f1 = await page.evaluate(() => ({ frames: window.cachalot.replay.player.frames, t: performance.now(), pos: window.cachalot.replay.player.position }));
  await page.click('#replay-player [aria-label="Pause"]');
  bench.playback_fps = (f1.frames - f0.frames) / ((f1.t - f0.t) / 1000);
  bench.playback_ops_per_second = 10000;
  bench.playback_position_after_3s = f1.pos;
  assert.ok(bench.playback_fps >= 30, `playback at ${bench.playback_fps} fps`);
  assert.ok(f1.pos > 20000, `position ${f1.pos}`);

  // Scrub, step (explained) and back.
  await page.fill('#replay-player-scrub', '30000');
  assert.match(await page.textContent('#replay-player .where'), /op 30,000 \/ 69,203/);
  await page.click('#replay-player [aria-label="Step one operation, explained"]');
  assert.match(await page.textContent('#replay-explain'), /op 30,000: (allocate|free)/);
  assert.ok((await kinds('replay-explain')).length >= 1);
  await page.click('#replay-player [aria-label="Back one operation"]');
  assert.match(await page.textContent('#replay-player .where'), /op 30,000 \/ 69,203/);
  // empty_cache keeps only what live blocks need.
  const before = await live('replay-figures', 'live_reserved');
  await page.click('#replay-empty');
  assert.ok((await live('replay-figures', 'live_reserved')) < before);
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('replay: a loaded .csv.gz, a plain .csv and a PyTorch snapshot .json equal the CLI', async () => {
  await page.click('#tab-replay');
  const gz = path.join(REPO, 'traces', 'mixed_fc_conv.csv.gz');
  await page.setInputFiles('#replay-file', gz);
  await page.waitForFunction(() => document.querySelector('#replay-outcome table')?.closest('#replay-outcome')
    && document.getElementById('status').textContent.startsWith('mixed_fc_conv.csv.gz'));
  await assertMatchesCli('#replay-outcome', gz);

  const dir = path.join(RESULTS, 'traces');
  await mkdir(dir, { recursive: true });
  const rows = ['Thread,Time,Action,Pointer,Size,Stream'];
  const json = { segments: [], device_traces: [[]] };
  for (let i = 0; i < 400; i++) {
    const ptr = 0x10000 + (i % 50) * 0x1000000;
    const size = ((i * 7919) % 40 + 1) * 300000;
    rows.push(`0,${2 * i},allocate,0x${ptr.toString(16)},${size},0x0`, `0,${2 * i + 1},free,0x${ptr.toString(16)},${size},0x0`);
    if (i % 3) {
      json.device_traces[0].push({ action: 'alloc', addr: ptr, size, stream: 0, time_us: i });
      if (i % 2) json.device_traces[0].push({ action: 'free_requested', addr: ptr, size, stream: 0, time_us: i });
    }
  }
  const csv = path.join(dir, 'made_up.csv');
  const snap = path.join(dir, 'made_up_snapshot.json');
  await writeFile(csv, `${rows.join('\n')}\n`);
  await writeFile(snap, JSON.stringify(json));
  for (const file of [csv, snap]) {
    await page.setInputFiles('#replay-file', file);
    await page.waitForFunction((name) => document.getElementById('status').textContent.startsWith(name), path.basename(file));
    await assertMatchesCli('#replay-outcome', file);
  }
  // A malformed file is reported with its line.
  const bad = path.join(dir, 'bad.csv');
  await writeFile(bad, 'Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0xZZ,5,0x0\n');
  await page.setInputFiles('#replay-file', bad);
  await page.waitForFunction(() => document.getElementById('replay-error').textContent.length > 0);
  assert.match(await page.textContent('#replay-error'), /bad\.csv: invalid trace, line 2: bad pointer '0xZZ'/);
});

test('compare: one trace under two configs, both sides equal the CLI', async () => {
  await page.click('#tab-compare');
  for (const name of ['mixed_fc_conv', 'resnet50_train', 'gpt2_train']) {
    await page.selectOption('#compare-trace', `${name}.csv.gz`);
    await page.click('#compare-run');
    await page.waitForFunction((n) => document.getElementById('status').textContent.startsWith(`${n}.csv.gz: peak reserved`), name);
    const file = path.join(REPO, 'traces', `${name}.csv.gz`);
    const a = await assertMatchesCli('#compare-outcome-a', file);
    const b = await assertMatchesCli('#compare-outcome-b', file);
    assert.equal(a.shown.config, 'policy:pytorch');
    assert.equal(b.shown.config, 'policy:pytorch,max_split_size_mb:128');
    assert.match(await page.textContent('#compare-outcome-b tr.pytorch'), /max_split_size_mb:128/);
  }
  // Playback with two maps and two timelines.
  await page.selectOption('#compare-player-speed', '10000');
  const f0 = await page.evaluate(() => ({ frames: window.cachalot.compare.player.frames, t: performance.now() }));
  await page.click('#compare-player [aria-label="Play"]');
  await page.waitForTimeout(2000);
  const f1 = await page.evaluate(() => ({ frames: window.cachalot.compare.player.frames, t: performance.now() }));
  await page.click('#compare-player [aria-label="Pause"]');
  bench.compare_playback_fps = (f1.frames - f0.frames) / ((f1.t - f0.t) / 1000);
  assert.ok(bench.compare_playback_fps >= 30, `compare playback at ${bench.compare_playback_fps} fps`);
  await page.click('#compare-player [aria-label="Replay to the end"]');
  const ends = await page.evaluate(() => window.cachalot.compare.panes.map((p) => p.alloc.trace_position()));
  assert.deepEqual(ends, [69203, 69203]);
  assert.match(await page.textContent('#compare-map-b .map-bar'), /293 segments/);
  await screenshot(page, 'compare');
  // A bad config on one side is the core's message, naming the key.
  await page.fill('#compare-config-b .conf', 'policy:pytorch,max_split_size_mb:big');
  await page.click('#compare-run');
  assert.match(await page.textContent('#compare-error'), /max_split_size_mb/);
  assert.equal(errors.length, 0, errors.join('\n'));
});
