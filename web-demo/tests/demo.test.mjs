// End-to-end tests of the browser demo: Debian's Chromium, headless, drives the page as a
// person would — every guided scenario, allocating and freeing by hand (mouse and
// keyboard), replaying the embedded traces and loaded files, comparing two configs — and
// checks that every figure the page shows equals `cachalot replay --json` for the same
// trace and config. It measures gpt2_train's replay to its end and the playback frame
// rate, writes them to test-results/browser-bench.json, and saves a screenshot per view.
// It also holds the page to what it shows after something goes wrong: a scenario left
// while its trace loads, a rejected config, a refused file or value each leave the page
// showing what is in effect, and saying why.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile, mkdir, readFile } from 'node:fs/promises';
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

/** Asserts the page's figures equal the CLI's for `trace` (a path, `extra` CLI options) and the config the page used. */
async function assertMatchesCli(selector, trace, extra = []) {
  const shown = await tableFigures(selector);
  const cli = cliReplay(trace, shown.config, extra);
  for (const f of FIELDS) {
    assert.equal(Number(shown[f]), cli[f], `${path.basename(trace)} under ${shown.config}: ${f}`);
  }
  // The exact byte counts are on the page as text too.
  assert.ok(shown.text.includes(cli.peak_reserved_bytes.toLocaleString('en-US')), shown.text);
  return { shown, cli };
}

const live = (host, field) => page.$eval(`#${host} [data-field="${field}"]`, (e) => Number(e.dataset.value));
const kinds = (list) => page.$$eval(`#${list} li[data-kind]`, (lis) => lis.map((l) => l.dataset.kind));
const outs = () => page.$$eval('#scenario-steps .out', (os) => os.length);

/** Clicks "Next step" and waits until the scenario shows `n` step outputs. */
async function nextStep(n) {
  await page.click('#scenario-next');
  await page.waitForFunction((k) => document.querySelectorAll('#scenario-steps .out').length === k, n, { timeout: 30000 });
}

/** Holds the page's fetch of an embedded trace until `release()`; `requested` resolves when the page asks for it. */
async function holdTrace(name) {
  let release;
  const released = new Promise((r) => { release = r; });
  let arrived;
  const requested = new Promise((r) => { arrived = r; });
  const url = `**/pkg/traces/${name}`;
  const handler = async (route) => {
    arrived();
    await released;
    await route.continue();
  };
  await page.route(url, handler);
  return { requested, release, stop: () => page.unroute(url, handler) };
}

/** PyTorch's reference row for an embedded trace and PyTorch config name, read from the file the page loads. */
async function pytorchRow(trace, conf) {
  const text = await readFile(path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'pkg', 'traces', 'pytorch_reference.jsonl'), 'utf8');
  return text.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l)).find((r) => r.trace === trace && r.conf === conf);
}

/** Sets a config form's string as a person would (typing, then leaving the box). */
async function typeConfig(host, config) {
  await page.fill(`#${host} .conf`, config);
  await page.dispatchEvent(`#${host} .conf`, 'change');
}

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

test('scenarios: a step still loading a real trace is dropped when its scenario is left or restarted', async () => {
  // Left: caching's step 4 fetches gpt2_train; switch to splitting before it arrives.
  const gpt2 = await holdTrace('gpt2_train.csv.gz');
  await page.click('#scenario-list button[data-id="caching"]');
  for (let i = 1; i <= 3; i++) await nextStep(i);
  await page.click('#scenario-next');
  await gpt2.requested;
  await page.click('#scenario-list button[data-id="splitting"]');
  assert.equal(await outs(), 0);
  await nextStep(1);
  const shown = { segments: await live('scenario-figures', 'live_segments'), allocated: await live('scenario-figures', 'live_allocated') };
  gpt2.release();
  await page.waitForFunction(() => window.cachalot.scenarios.abandoned === 1, null, { timeout: 30000 });
  assert.equal(await page.textContent('#scenario-title'), 'Splitting: one 2 MiB and one 20 MiB segment serve many tensors');
  assert.equal(await outs(), 1);
  assert.equal(await page.getAttribute('#view-scenarios', 'data-state'), 'ready');
  assert.equal(await page.$$eval('#scenario-steps li.done', (l) => l.length), 1);
  assert.deepEqual({ segments: await live('scenario-figures', 'live_segments'), allocated: await live('scenario-figures', 'live_allocated') }, shown);
  assert.match(await page.textContent('#scenario-map .map-bar'), /1 segment,/);
  assert.match(await page.textContent('#scenario-explain'), /malloc 1000 B\s*s1 = malloc\(1000 B\)/);
  await nextStep(2);
  assert.equal(await page.getAttribute('#view-scenarios', 'data-state'), 'ready');
  await gpt2.stop();

  // Restarted: max-split's step 4 fetches resnet50_train; Restart before it arrives.
  const resnet = await holdTrace('resnet50_train.csv.gz');
  await page.click('#scenario-list button[data-id="max-split"]');
  for (let i = 1; i <= 3; i++) await nextStep(i);
  await page.click('#scenario-next');
  await resnet.requested;
  await page.click('#scenario-restart');
  assert.equal(await outs(), 0);
  await nextStep(1);
  const before = await page.textContent('#scenario-map .map-bar');
  resnet.release();
  await page.waitForFunction(() => window.cachalot.scenarios.abandoned === 2, null, { timeout: 30000 });
  assert.equal(await outs(), 1);
  assert.equal(await page.getAttribute('#view-scenarios', 'data-state'), 'ready');
  assert.equal(await page.textContent('#scenario-map .map-bar'), before);
  await resnet.stop();

  // A step of several calls shows every call's decisions, in order: under
  // max_split_size_mb:128, B refuses the cached 200 MiB block.
  await nextStep(2);
  const calls = await page.$$eval('#scenario-explain li.call', (ls) => ls.map((l) => l.textContent));
  assert.deepEqual(calls, ['A = malloc(200.00 MiB)', 'free A', 'B = malloc(50.00 MiB)', 'C = malloc(200.00 MiB)']);
  const ofB = await page.$$eval('#scenario-explain li', (ls) => {
    const from = ls.findIndex((l) => l.textContent === 'B = malloc(50.00 MiB)');
    const to = ls.findIndex((l) => l.textContent === 'C = malloc(200.00 MiB)');
    return ls.slice(from + 1, to).map((l) => `${l.dataset.kind}: ${l.textContent}`);
  });
  assert.ok(ofB.some((d) => /^rejected: .*200\.00 MiB block.*max_split_size/.test(d)), ofB.join('\n'));
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('every guided scenario runs to its conclusion', async () => {
  // fragmentation and max-split each add mixed_fc_conv on a 1.40 GiB device, where PyTorch's default runs out.
  const expectedOoms = { caching: 0, splitting: 0, fragmentation: 3, 'max-split': 2, 'empty-cache': 0, summary: 0, leak: 1, fraction: 2 };
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
    if (id === 'fragmentation') {
      await screenshot(page, 'scenarios');
      // Under cachalot's policy the same 8 MiB request moves idle pages, and GPT-2 fits in 15 GiB.
      assert.match(await page.textContent('#scenario-result'), /by moving [1-9]\d* idle pages, and ran GPT-2’s trace in 15 GiB with a peak of 1\.0\d\d×/);
      // Its step says what the figures beside it say: address ranges and mappings.
      const moved = outs.find((o) => /idle 2 MiB pages under the holes were moved/.test(o.text));
      assert.match(moved.text, /\d+ address ranges?, \d+ mappings?\)/);
      assert.doesNotMatch(moved.text, /segment|device allocation/);
    }
    // The heading of empty_cache() says what went back, measured from the figures.
    if (id === 'empty-cache') assert.match(await page.textContent('#scenario-explain'), /empty_cache\(\): \d+ cached segments?, [\d.]+ GiB, went back to the device$/);
    // The conclusion quotes what the screen shows: most of the device free, not "half empty".
    if (id === 'fraction') {
      const result = await page.textContent('#scenario-result');
      assert.match(result, /most of the device still free \((\d+)% of the 1\.00 GiB device in the script, (\d+)% of the 140\.00 GiB device on GPT-2’s trace\)/);
      assert.doesNotMatch(result, /half empty/);
    }
  }
  // The splitting claim quotes two articles apart, each with its own source.
  await page.click('#scenario-list button[data-id="splitting"]');
  assert.deepEqual(await page.$$eval('#scenario-claim .quote cite', (cs) => cs.map((c) => c.textContent)),
    ['“GPU显存不够用？PyTorch内存管理全解析”, §1.1', '“PyTorch显存分配器探秘”, §2.3 (the table of memory_summary() fields)']);
  assert.doesNotMatch(await page.textContent('#scenario-claim'), /……/);
  assert.match(await page.textContent('#view-scenarios .side .note'), /leak scenario has none/);
  // The max_split_size_mb scenario says where the setting backfires, with live figures.
  await page.click('#scenario-list button[data-id="max-split"]');
  await page.click('#scenario-all');
  await page.waitForFunction(() => document.getElementById('view-scenarios').dataset.state === 'finished');
  assert.match(await page.textContent('#scenario-result'), /backfires: GPT-2’s peak reserved memory grows 2\.24×/);
  assert.doesNotMatch(await page.textContent('#scenario-text'), /a segment of its own instead/);
  // PyTorch's own ratio (its peak reserved over its peak requested), not against cachalot's figures.
  const ref = await pytorchRow('gpt2_train.csv.gz', 'max_split_size_mb:128');
  const theirs = `(PyTorch 2.11 on an H200: ${(ref.peak_reserved / 2 ** 30).toFixed(2)} GiB, ${(ref.peak_reserved / ref.peak_requested).toFixed(3)}×)`;
  assert.ok((await page.textContent('#scenario-steps')).includes(theirs), theirs);
});

test('by hand: each decision explained, free by click and by keyboard, pending free, out of memory', async () => {
  await page.click('#tab-hand');
  await page.click('#hand-restart');
  // No fraction is in effect, and the box says so rather than showing one that is not.
  assert.equal(await page.inputValue('#hand-fraction'), '');
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
  // Each decision's label stands apart from its sentence, the long ones ("segment refused") too.
  const gaps = await page.$$eval('#hand-explain li[data-kind] .kind', (spans) => spans.map((span) => {
    const range = document.createRange();
    range.selectNodeContents(span.nextSibling);
    return range.getClientRects()[0].left - span.getBoundingClientRect().right;
  }));
  assert.ok(gaps.every((g) => g >= 6), `gaps between label and sentence: ${gaps}`);

  // Bad input is an error that says what is wrong, and changes nothing.
  await page.fill('#hand-size', 'lots');
  await page.click('#hand-alloc');
  assert.match(await page.textContent('#hand-error'), /'lots' is not a size/);
  const heading = await page.textContent('#hand-explain');
  const allocated = await live('hand-figures', 'live_allocated');
  await page.fill('#hand-size', '1');
  for (const bad of ['-1', '2.5', '']) {
    await page.fill('#hand-stream', bad);
    await page.click('#hand-alloc');
    assert.match(await page.textContent('#hand-error'), /“on stream”: .* is not a stream number/, bad);
    await page.click('#view-hand .quick button[data-size="1000"]');
    assert.match(await page.textContent('#hand-error'), /is not a stream number/, bad);
  }
  await page.fill('#hand-busy-stream', '-1');
  await page.click('#hand-hold');
  assert.match(await page.textContent('#hand-error'), /“Stream”: '-1' is not a stream number/);
  await page.fill('#hand-busy-stream', '1');
  await page.fill('#hand-stream', '0');
  assert.equal(await live('hand-figures', 'live_allocated'), allocated);
  assert.equal(await page.textContent('#hand-explain'), heading);
  // A request the allocator refuses outright gets its error, and no heading of a call.
  await page.fill('#hand-size', '99999999999');
  await page.selectOption('#hand-unit', 'GiB');
  await page.click('#hand-alloc');
  assert.match(await page.textContent('#hand-error'), /size must be a whole number/);
  assert.equal(await page.$$eval('#hand-explain li.title', (l) => l.length), 0);
  assert.doesNotMatch(await page.textContent('#hand-explain'), /malloc\(/);

  // The fraction box always shows the fraction in effect; a bad one is refused.
  assert.equal(await page.inputValue('#hand-fraction'), '0.05');
  for (const bad of ['1.5', '-1', '']) {
    const explained = await page.textContent('#hand-explain');
    await page.fill('#hand-fraction', bad);
    await page.click('#hand-set-fraction');
    assert.match(await page.textContent('#hand-error'), /A memory fraction is a number from 0 to 1.*the fraction 0\.05 stays in effect/, bad);
    assert.equal(await page.inputValue('#hand-fraction'), '0.05');
    assert.equal(await page.textContent('#hand-explain'), explained);
  }

  // A rejected config keeps the allocator running, says so until a config is applied, and
  // the form shows the config in effect again.
  await page.fill('#hand-config .conf', 'policy:pytorch,max_split_size_mb:5');
  await page.click('#hand-restart');
  const rejected = /Config “policy:pytorch,max_split_size_mb:5” on a 1\.00 GiB device rejected: .*max_split_size_mb.*must be >= 20\. Still in effect, and shown again above: policy:pytorch on a 1\.00 GiB device\./;
  assert.match(await page.textContent('#hand-config .cfg-status'), rejected);
  assert.equal(await page.inputValue('#hand-config .conf'), 'policy:pytorch');
  assert.equal(await page.inputValue('#hand-fraction'), '0.05');
  await page.fill('#hand-size', '1');
  await page.selectOption('#hand-unit', 'MiB');
  await page.click('#hand-alloc');
  assert.equal(await page.textContent('#hand-error'), '');
  assert.match(await page.textContent('#hand-config .cfg-status'), rejected);
  // Starting afresh drops the fraction set by hand: the box follows the new allocator.
  await page.click('#hand-restart');
  assert.equal(await page.textContent('#hand-config .cfg-status'), '');
  assert.equal(await page.inputValue('#hand-fraction'), '');
  await page.click('#hand-config .presets button[title*="per_process_memory_fraction:0.5"]');
  await page.click('#hand-restart');
  assert.equal(await page.inputValue('#hand-fraction'), '0.5');
  // A config that names no policy runs the core's default, and the form shows that one.
  await typeConfig('hand-config', 'max_split_size_mb:128');
  assert.equal(await page.inputValue('#hand-config select'), 'cachalot');
  await page.click('#hand-restart');
  assert.match(await page.textContent('#hand-explain'), /A fresh allocator: policy:cachalot,max_split_size_mb:128 on/);
  // A PyTorch setting that cachalot's policy ignores is named, not silently accepted.
  assert.match(await page.textContent('#hand-config .cfg-note'), /^max_split_size_mb has no effect under policy:cachalot/);
  await page.fill('#hand-config .conf', 'policy:pytorch');
  await page.click('#hand-restart');
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('by hand under cachalot\'s policy: the page speaks of mapped pages and address ranges', async () => {
  await page.click('#tab-hand');
  await page.click('#hand-config .presets button[title="policy:cachalot"]');
  await page.click('#hand-restart');
  await page.fill('#hand-size', '5');
  await page.selectOption('#hand-unit', 'MiB');
  for (let i = 0; i < 3; i++) await page.click('#hand-alloc');
  assert.deepEqual(await kinds('hand-explain'), ['rounded', 'pool', 'best_fit', 'mapped_pages', 'split']);
  assert.match(await page.textContent('#hand-explain'), /mapped in pages of 2\.00 MiB/);
  const figures = await page.textContent('#hand-figures');
  assert.match(figures, /address ranges 1/);
  assert.match(figures, /mappings \d+/);
  assert.doesNotMatch(figures, /segments/);
  assert.match(await page.textContent('#hand-map .map-bar .note'), /^1 address range holding memory, \d+ blocks?$/);
  assert.ok(await page.evaluate(() => window.cachalot.hand.map.segments.every((s) => s.kind === 2)));
  await page.click('#hand-empty');
  assert.match(await page.textContent('#hand-explain'), /empty_cache\(\): [\d.]+ [KMG]?i?B of pages went back to the device/);
  await page.click('#hand-config .presets button[title="policy:pytorch"]');
  await page.click('#hand-restart');
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('replay: gpt2_train equals the CLI, replays to its end in under 1 s, plays at 30 fps or more', async () => {
  await page.click('#tab-replay');
  await page.waitForSelector('#replay-outcome table');
  const gpt2 = path.join(REPO, 'traces', 'gpt2_train.csv.gz');
  const { cli } = await assertMatchesCli('#replay-outcome', gpt2);
  assert.match(await page.textContent('#replay-outcome tr.pytorch'), /PyTorch 2\.11/);
  // PyTorch's ratio is of its own figures.
  const ref = await pytorchRow('gpt2_train.csv.gz', 'default');
  assert.equal(await page.$eval('#replay-outcome [data-field="pytorch_reserved_over_requested"]', (e) => e.dataset.value),
    (ref.peak_reserved / ref.peak_requested).toFixed(3));
  // On another device than the H200 PyTorch ran on, its figures are not set beside cachalot's.
  await page.fill('#replay-config input[id$="-capacity"]', '100');
  await page.click('#replay-apply');
  await page.waitForFunction(() => document.querySelector('#replay-outcome .reference-apart'));
  assert.equal(await page.$('#replay-outcome tr.pytorch'), null);
  assert.match(await page.textContent('#replay-outcome .reference-apart'), /measured on an H200 \(140\.00 GiB\); they are not shown beside a 100\.00 GiB device/);
  await page.fill('#replay-config input[id$="-capacity"]', '140');
  await page.click('#replay-apply');
  await page.waitForSelector('#replay-outcome tr.pytorch');

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
  assert.match(await page.textContent('#replay-player .where'), /^69,203 \/ 69,203 ops run · end of the trace/);
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
  assert.match(await page.textContent('#replay-player .where'), /^30,000 \/ 69,203 ops run · next: op 30,000: (allocate|free)/);
  await page.click('#replay-player [aria-label="Step one operation, explained"]');
  assert.match(await page.textContent('#replay-explain'), /op 30,000: (allocate|free)/);
  assert.ok((await kinds('replay-explain')).length >= 1);
  await page.click('#replay-player [aria-label="Back one operation"]');
  assert.match(await page.textContent('#replay-player .where'), /^30,000 \/ 69,203 ops run/);
  // empty_cache keeps only what live blocks need; the map then leaves the timeline, and says so until the player goes back.
  const before = await live('replay-figures', 'live_reserved');
  assert.equal(await page.isVisible('#replay-diverged'), false);
  await page.click('#replay-empty');
  assert.ok((await live('replay-figures', 'live_reserved')) < before);
  assert.match(await page.textContent('#replay-explain'), /empty_cache\(\): \d+ cached segments?, .* went back to the device/);
  assert.match(await page.textContent('#replay-diverged'), /no longer match the timeline/);
  await page.click('#replay-player [aria-label="Step one operation, explained"]');
  assert.equal(await page.isVisible('#replay-diverged'), true);
  await page.click('#replay-player [aria-label="Back one operation"]');
  assert.equal(await page.isVisible('#replay-diverged'), false);
  // A change of config replays afresh, and the last step's decisions (of the old replay) go.
  await page.click('#replay-player [aria-label="Step one operation, explained"]');
  assert.ok((await kinds('replay-explain')).length >= 1);
  await page.click('#replay-config .presets button[title="policy:pytorch,roundup_power2_divisions:4"]');
  await page.click('#replay-apply');
  await page.waitForFunction(() => document.querySelector('#replay-outcome table').dataset.config.includes('roundup'));
  assert.deepEqual(await kinds('replay-explain'), []);
  assert.match(await page.textContent('#replay-explain'), /Use “Step”/);
  await page.click('#replay-config .presets button[title="policy:pytorch"]');
  await page.click('#replay-apply');
  await page.waitForFunction(() => document.querySelector('#replay-outcome table').dataset.config === 'policy:pytorch');
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('replay and compare: a rejected config changes nothing and says so; a config without a policy shows the one that runs', async () => {
  await page.click('#tab-replay');
  await page.waitForSelector('#replay-outcome table');
  // No policy named: the core's default (cachalot's) runs, and the form shows it.
  await typeConfig('replay-config', 'max_split_size_mb:128');
  assert.equal(await page.inputValue('#replay-config select'), 'cachalot');
  await page.click('#replay-apply');
  await page.waitForFunction(() => document.querySelector('#replay-outcome table').dataset.config === 'policy:cachalot,max_split_size_mb:128');
  // A bad config with a new trace: neither is applied, and the page says which config still runs.
  await page.fill('#replay-config .conf', 'policy:pytorch,max_split_size_mb:5');
  await page.selectOption('#replay-trace', 'resnet50_train.csv.gz');
  const status = /Config “policy:pytorch,max_split_size_mb:5” on a 140\.00 GiB device rejected: .*must be >= 20\. Still in effect, and shown again above: max_split_size_mb:128 on a 140\.00 GiB device\./;
  await page.waitForFunction(() => document.querySelector('#replay-config .cfg-status').textContent.length > 0);
  assert.match(await page.textContent('#replay-config .cfg-status'), status);
  assert.equal(await page.inputValue('#replay-trace'), 'gpt2_train.csv.gz');
  assert.equal(await page.inputValue('#replay-config .conf'), 'max_split_size_mb:128');
  assert.equal(await page.$eval('#replay-outcome table', (t) => t.dataset.config), 'policy:cachalot,max_split_size_mb:128');
  // It stays said while the replay is used, until a config is applied.
  await page.click('#replay-player [aria-label="Replay to the end"]');
  await page.click('#replay-player [aria-label="Back to the start"]');
  assert.match(await page.textContent('#replay-config .cfg-status'), status);
  await typeConfig('replay-config', 'policy:pytorch');
  await page.click('#replay-apply');
  await page.waitForFunction(() => document.querySelector('#replay-outcome table').dataset.config === 'policy:pytorch');
  assert.equal(await page.textContent('#replay-config .cfg-status'), '');

  // Compare: config B rejected; neither side changes, both forms show what runs.
  await page.click('#tab-compare');
  await page.waitForSelector('#compare-outcome-b table');
  const shown = await page.$$eval('#view-compare table.outcome', (ts) => ts.map((t) => t.dataset.config));
  await typeConfig('compare-config-a', 'policy:cachalot');
  await page.fill('#compare-config-b .conf', 'policy:pytorch,max_split_size_mb:big');
  await page.click('#compare-run');
  assert.match(await page.textContent('#compare-error'), /Nothing changed: a config was rejected/);
  assert.match(await page.textContent('#compare-config-b .cfg-status'), /“policy:pytorch,max_split_size_mb:big” .*rejected: .*max_split_size_mb.* Still in effect, and shown again above: policy:pytorch,max_split_size_mb:128 on/);
  assert.match(await page.textContent('#compare-config-a .cfg-status'), /Not applied: config B was rejected\. Still in effect, and shown again above: policy:pytorch on/);
  assert.deepEqual(await page.$$eval('#view-compare .cfg .conf', (is) => is.map((i) => i.value)), shown);
  assert.deepEqual(await page.$$eval('#view-compare table.outcome', (ts) => ts.map((t) => t.dataset.config)), shown);
  // A config without a policy, on side A.
  await typeConfig('compare-config-a', 'expandable_segments:True');
  assert.equal(await page.inputValue('#compare-config-a select'), 'cachalot');
  await page.click('#compare-run');
  await page.waitForFunction(() => document.querySelector('#compare-outcome-a table').dataset.config === 'policy:cachalot,expandable_segments:True');
  assert.equal(await page.textContent('#compare-config-a .cfg-status'), '');
  assert.equal(await page.textContent('#compare-config-b .cfg-status'), '');
  await typeConfig('compare-config-a', 'policy:pytorch');
  await page.click('#compare-run');
  await page.waitForFunction(() => document.querySelector('#compare-outcome-a table').dataset.config === 'policy:pytorch');
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
  // A snapshot of two GPUs: one trace per GPU in the list, each equal to the CLI's --device.
  const twoGpus = path.join(dir, 'two_gpus.json');
  const second = json.device_traces[0].filter((e, i) => i % 4 !== 1).map((e) => ({ ...e, stream: 7 }));
  await writeFile(twoGpus, JSON.stringify({ segments: [], device_traces: [json.device_traces[0], second] }));
  await page.setInputFiles('#replay-file', twoGpus);
  await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('two_gpus.json, device 0:'));
  assert.deepEqual(await page.$$eval('#replay-trace option', (os) => os.map((o) => o.textContent).filter((t) => t.startsWith('two_gpus'))),
    ['two_gpus.json, device 0 (your file)', 'two_gpus.json, device 1 (your file)']);
  await assertMatchesCli('#replay-outcome', twoGpus, ['--device', '0']);
  await page.selectOption('#replay-trace', 'file:two_gpus.json, device 1');
  await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('two_gpus.json, device 1:'));
  await assertMatchesCli('#replay-outcome', twoGpus, ['--device', '1']);
  // A loaded trace replays afresh: no decisions of the previous trace's last step stay.
  await page.click('#replay-player [aria-label="Step one operation, explained"]');
  assert.ok((await kinds('replay-explain')).length >= 1);
  await page.setInputFiles('#replay-file', gz);
  await page.waitForFunction(() => document.querySelector('#replay-outcome table').dataset.config
    && document.getElementById('replay-trace').value === 'file:mixed_fc_conv.csv.gz'
    && document.querySelectorAll('#replay-explain li[data-kind]').length === 0);
  assert.match(await page.textContent('#replay-explain'), /Use “Step”/);
  // A file that merely has an embedded trace's name gets no PyTorch figures.
  const impostor = path.join(dir, 'impostor');
  await mkdir(impostor, { recursive: true });
  await writeFile(path.join(impostor, 'gpt2_train.csv.gz'), await readFile(gz));
  await page.setInputFiles('#replay-file', path.join(impostor, 'gpt2_train.csv.gz'));
  await page.waitForFunction(() => document.getElementById('replay-trace').value === 'file:gpt2_train.csv.gz');
  assert.equal(await page.$('#replay-outcome tr.pytorch'), null);
  assert.equal(await page.$('#replay-outcome .reference-apart'), null);

  // A file the page cannot use is refused with its name and the reason; the replay shown stays.
  const truncated = path.join(dir, 'truncated.csv.gz');
  const whole = await readFile(gz);
  await writeFile(truncated, whole.subarray(0, whole.length >> 1));
  const headerOnly = path.join(dir, 'header_only.csv');
  await writeFile(headerOnly, 'Thread,Time,Action,Pointer,Size,Stream\n');
  const bad = path.join(dir, 'bad.csv');
  await writeFile(bad, 'Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0xZZ,5,0x0\n');
  const shown = {
    trace: await page.inputValue('#replay-trace'), status: await page.textContent('#status'),
    config: await page.$eval('#replay-outcome table', (t) => t.dataset.config), info: await page.textContent('#replay-trace-info'),
  };
  for (const [file, reason, limit] of [
    // The decompressor's own reason (Chromium's words), not the "Failed to fetch" of a Response.
    [truncated, /^truncated\.csv\.gz: not a valid gzip file \((?!Failed to fetch)[^)]*truncated[^)]*\)\. Still replaying gpt2_train\.csv\.gz\.$/],
    [headerOnly, /^header_only\.csv holds no allocation events: nothing to replay\. Still replaying gpt2_train\.csv\.gz\.$/],
    [bad, /bad\.csv: invalid trace, line 2: bad pointer '0xZZ'/],
    // Past the page's limit (lowered here): named, with the tool that can replay it.
    [gz, /^mixed_fc_conv\.csv\.gz: too large for the page \(more than 4096 bytes of trace text once decompressed\); replay it with the command-line tool: cachalot replay FILE\. Still replaying/, 4096],
    [bad, /^bad\.csv: too large for the page \(more than 16 bytes of trace text\)/, 16],
  ]) {
    await page.evaluate(async (n) => { (await import('./js/trace_source.js')).limits.textBytes = n; }, limit ?? 768 * 1024 * 1024);
    await page.setInputFiles('#replay-file', file);
    await page.waitForFunction((src) => new RegExp(src).test(document.getElementById('replay-error').textContent), reason.source);
    assert.deepEqual({
      trace: await page.inputValue('#replay-trace'), status: await page.textContent('#status'),
      config: await page.$eval('#replay-outcome table', (t) => t.dataset.config), info: await page.textContent('#replay-trace-info'),
    }, shown, path.basename(file));
    assert.equal(await page.$eval('#replay-file', (i) => i.files.length), 0);
  }
  await page.evaluate(async () => { (await import('./js/trace_source.js')).limits.textBytes = 768 * 1024 * 1024; });
  assert.equal(errors.length, 0, errors.join('\n'));
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
  // Each side's decisions for a single step.
  await page.click('#compare-player [aria-label="Back to the start"]');
  await page.click('#compare-player [aria-label="Step one operation, explained"]');
  for (const side of ['a', 'b']) {
    assert.match(await page.textContent(`#compare-explain-${side}`), /^op 0: allocate/);
    assert.ok((await kinds(`compare-explain-${side}`)).includes('new_segment'), side);
  }
  // A bad config on one side is the core's message, naming the key.
  await page.fill('#compare-config-b .conf', 'policy:pytorch,max_split_size_mb:big');
  await page.click('#compare-run');
  assert.match(await page.textContent('#compare-config-b .cfg-status'), /max_split_size_mb/);
  // A file it cannot use is refused by name; the comparison stays.
  await page.setInputFiles('#compare-file', path.join(RESULTS, 'traces', 'header_only.csv'));
  await page.waitForFunction(() => /holds no allocation events/.test(document.getElementById('compare-error').textContent));
  assert.match(await page.textContent('#compare-error'), /^header_only\.csv holds no allocation events: nothing to replay\. Still comparing on gpt2_train\.csv\.gz\.$/);
  assert.equal(await page.inputValue('#compare-trace'), 'gpt2_train.csv.gz');
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('layout at 1280 px: outcome tables fit their halves, labels break between words, legend swatches keep their names', async () => {
  await page.setViewportSize({ width: 1280, height: 800 });
  try {
    await page.click('#tab-compare');
    await page.waitForSelector('#compare-outcome-b table');
    const fits = await page.$$eval('#view-compare .figures:has(table.outcome)', (hs) => hs.map((h) => ({ id: h.id, over: h.scrollWidth - h.clientWidth })));
    assert.deepEqual(fits.filter((f) => f.over > 0), []);
    for (const view of ['compare', 'replay', 'hand']) {
      await page.click(`#tab-${view}`);
      // Each piece between underscores stays on one line: a label breaks only at an underscore.
      const broken = await page.$$eval(`#view-${view} .cfg .knobs label`, (ls) => ls.flatMap((l) => [...l.childNodes]
        .filter((n) => n.nodeType === Node.TEXT_NODE)
        .filter((n) => {
          const r = document.createRange();
          r.selectNodeContents(n);
          return new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size > 1;
        })
        .map((n) => `${l.textContent}: ${n.textContent}`)));
      assert.deepEqual(broken, [], view);
    }
    // A swatch and its name on one line, in the footer and under every timeline.
    const split = await page.$$eval('.legend-item', (items) => items.filter((i) => {
      const tops = [...i.getClientRects()].map((r) => r.top);
      return tops.length && Math.max(...tops) - Math.min(...tops) > 8;
    }).map((i) => i.textContent));
    assert.deepEqual(split, []);
    const apart = await page.$$eval('footer .legend-item', (items) => items.filter((i) => {
      const swatch = i.querySelector('.swatch');
      return swatch && Math.abs(swatch.getBoundingClientRect().top - i.getBoundingClientRect().top) > 8;
    }).map((i) => i.textContent));
    assert.deepEqual(apart, []);
  } finally {
    await page.setViewportSize({ width: 1400, height: 1000 });
  }
});
