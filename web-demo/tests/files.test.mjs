// End-to-end tests of opening a person's own files in the browser demo (issue 43): a
// PyTorch pickle (`torch.cuda.memory._dump_snapshot("x.pickle")`) read by the CLI's own
// reader compiled to wasm, gzipped or not; a file dropped on the page; a snapshot taken
// without a history, whose segments are drawn beside the two lines that record one; the
// page's own snapshot download opened again. Figures shown are compared with
// `cachalot replay --json` on the same file.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile, mkdir, readFile } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import path from 'node:path';
import { serve, launch, openPage, screenshot, cliReplay, REPO, ROOT, RESULTS } from './harness.mjs';

let server;
let browser;
let page;
let errors;

const PICKLE = path.join(REPO, 'native', 'cli', 'tests', 'fixtures', 'pytorch_snapshot.pickle');
const NO_HISTORY = path.join(ROOT, 'tests', 'fixtures', 'no_history.pickle');
const DIR = path.join(RESULTS, 'files');

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

const FIELDS = ['peak_requested_bytes', 'peak_allocated_bytes', 'peak_reserved_bytes', 'device_allocs', 'ooms'];

/** Asserts the replay table's figures equal the CLI's for `file` under the config the page used. */
async function assertMatchesCli(file) {
  const shown = await page.$eval('#replay-outcome', (host) => {
    const out = { config: host.querySelector('table').dataset.config };
    for (const td of host.querySelectorAll('tr.cachalot td[data-field]')) out[td.dataset.field] = td.dataset.value;
    return out;
  });
  let cli;
  try {
    cli = cliReplay(file, shown.config);
  } catch (e) {
    // A replay that ran out of memory exits non-zero, its figures printed all the same.
    if (!e.stdout) throw e;
    cli = JSON.parse(e.stdout);
  }
  for (const f of FIELDS) assert.equal(Number(shown[f]), cli[f], `${path.basename(file)} under ${shown.config}: ${f}`);
  return cli;
}

/** Waits until the status line starts with `name` followed by a replay's figures. */
const replayed = (name) => page.waitForFunction(
  (n) => document.getElementById('status').textContent.startsWith(`${n}: `)
    && document.getElementById('replay-trace').value === `file:${n}`, name);

/** Drops `bytes` as a file named `name` on the page, as a person dragging it from their files would. */
async function drop(name, bytes) {
  await page.evaluate(({ name, data }) => {
    const file = new File([new Uint8Array(data)], name);
    const dt = new DataTransfer();
    dt.items.add(file);
    const at = document.querySelector('h1') || document.body;
    for (const type of ['dragenter', 'dragover', 'drop']) {
      at.dispatchEvent(new DragEvent(type, { bubbles: true, cancelable: true, dataTransfer: dt }));
    }
  }, { name, data: [...bytes] });
}

test('the file box takes what PyTorch users have: .pickle, .json, .gz, .csv', async () => {
  for (const id of ['#replay-file', '#compare-file']) {
    const accept = (await page.getAttribute(id, 'accept')).split(',');
    for (const ext of ['.pickle', '.json', '.gz', '.csv']) assert.ok(accept.includes(ext), `${id} accepts ${ext}: ${accept}`);
  }
});

test('a PyTorch pickle opens, plain and gzipped, with the CLI\'s figures', async () => {
  await page.setInputFiles('#replay-file', PICKLE);
  await replayed('pytorch_snapshot.pickle');
  assert.equal(await page.textContent('#replay-error'), '');
  const cli = await assertMatchesCli(PICKLE);
  assert.ok(cli.peak_reserved_bytes > 0);
  const gz = path.join(DIR, 'pytorch_snapshot.pickle.gz');
  await writeFile(gz, gzipSync(await readFile(PICKLE)));
  await page.setInputFiles('#replay-file', gz);
  await replayed('pytorch_snapshot.pickle.gz');
  await assertMatchesCli(gz);
  // A pickle that would run code is refused by the same reader as the CLI's, naming the file.
  const evil = path.join(DIR, 'evil.pickle');
  await writeFile(evil, Buffer.from('\x80\x02cos\nsystem\n.', 'latin1'));
  await page.setInputFiles('#replay-file', evil);
  await page.waitForFunction(() => /^evil\.pickle: invalid trace: not a readable pickle: opcode 0x63 imports or calls code/
    .test(document.getElementById('replay-error').textContent));
  assert.equal(await page.inputValue('#replay-trace'), 'file:pytorch_snapshot.pickle.gz', 'the replay shown stays');
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('a file dropped on the page opens in the replay view', async () => {
  await page.click('#tab-scenarios');
  await drop('dropped.pickle', await readFile(PICKLE));
  await replayed('dropped.pickle');
  assert.equal(await page.getAttribute('#tab-replay', 'aria-selected'), 'true');
  await assertMatchesCli(PICKLE);
  // A CSV too, gzipped: the same door as the file box.
  await drop('mixed.csv.gz', await readFile(path.join(REPO, 'traces', 'mixed_fc_conv.csv.gz')));
  await replayed('mixed.csv.gz');
  await assertMatchesCli(path.join(REPO, 'traces', 'mixed_fc_conv.csv.gz'));
  assert.equal(errors.length, 0, errors.join('\n'));
});

/** The segments the snapshot-only map draws, by address. */
const drawnSegments = () => page.evaluate(() => window.cachalot.replay.snapshotOnly.map.segments
  .map((s) => ({ address: s.address, total: s.total, large: s.large, blocks: s.blocks.map((b) => [b.size, b.state]) })));

test('a snapshot without a history shows its segments and the two lines that record one', async () => {
  const before = await page.inputValue('#replay-trace');
  await page.setInputFiles('#replay-file', NO_HISTORY);
  await page.waitForSelector('#snapshot-only:not([hidden])');
  assert.equal(await page.textContent('#replay-error'), '', 'not refused');
  const text = await page.textContent('#snapshot-only');
  assert.match(text, /no_history\.pickle holds 2 segments but no allocation events/);
  assert.deepEqual(await page.$$eval('#snapshot-only pre.record-line', (ps) => ps.map((p) => p.textContent)), [
    'torch.cuda.memory._record_memory_history(max_entries=100000)',
    'torch.cuda.memory._dump_snapshot("run.pickle")',
  ]);
  const MiB = 1 << 20;
  const base = 0x7F0000000000;
  assert.deepEqual(await drawnSegments(), [
    { address: base, total: 20 * MiB, large: true, blocks: [[8 * MiB, 0], [12 * MiB, 2]] },
    { address: base + 64 * MiB, total: 2 * MiB, large: false, blocks: [[512, 0], [2 * MiB - 512, 2]] },
  ]);
  assert.match(await page.textContent('#snapshot-only-map'), /2 segments, 4 blocks/);
  assert.equal(await page.inputValue('#replay-trace'), before, 'the replay shown stays');
  await page.$eval('#snapshot-only', (e) => e.scrollIntoView());
  await screenshot(page, 'snapshot-without-history');
  // The CLI refuses to replay it too: no events.
  // Replaying another trace puts the section away.
  await page.selectOption('#replay-trace', 'mixed_fc_conv.csv.gz');
  await page.waitForSelector('#snapshot-only[hidden]', { state: 'attached' });
  // The compare view cannot draw it: refused with the two lines.
  await page.click('#tab-compare');
  await page.setInputFiles('#compare-file', NO_HISTORY);
  await page.waitForFunction(() => /record_memory_history\(max_entries=100000\).*_dump_snapshot\("run\.pickle"\)/
    .test(document.getElementById('compare-error').textContent));
  await page.click('#tab-replay');
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('the page\'s own snapshot download opens again, its segments as the map showed them', async () => {
  await page.waitForSelector('#replay-outcome table');
  await page.click('#replay-player [aria-label="Step one operation, explained"]');
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#replay-snapshot')]);
  const file = path.join(DIR, download.suggestedFilename());
  await download.saveAs(file);
  const shownMap = await page.evaluate(() => window.cachalot.replay.pane.map.segments
    .map((s) => ({ address: s.address, total: s.total, large: s.large, blocks: s.blocks.map((b) => [b.size, b.state]) })));
  assert.ok(shownMap.length >= 1, 'the replay holds a segment after a step');
  await page.setInputFiles('#replay-file', file);
  await page.waitForSelector('#snapshot-only:not([hidden])');
  assert.equal(await page.textContent('#replay-error'), '');
  assert.deepEqual(await drawnSegments(), shownMap);
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('out of memory: marked on the timeline, first and last named as such, a control jumps to each', async () => {
  // Three refused requests (512 GiB each, past the 140 GiB device) among ordinary ones, at operations 2, 5 and 8.
  const rows = ['Thread,Time,Action,Pointer,Size,Stream'];
  let t = 0;
  for (let i = 0; i < 3; i++) {
    const p = (0x100000 * (i + 1)).toString(16);
    rows.push(`0,${t++},allocate,0x${p},1048576,0x0`, `0,${t++},allocate,0x${p}0,${2 ** 39},0x0`);
    rows.push(`0,${t++},free,0x${p},1048576,0x0`);
  }
  const file = path.join(DIR, 'three_ooms.csv');
  await writeFile(file, `${rows.join('\n')}\n`);
  await page.setInputFiles('#replay-file', file);
  await replayed('three_ooms.csv');
  const cli = await assertMatchesCli(file);
  assert.equal(cli.ooms, 3);
  const ops = await page.evaluate(() => window.cachalot.replay.ooms.ops);
  assert.equal(ops.length, 3);
  assert.match(await page.textContent('#replay-ooms .oom-summary'),
    new RegExp(`^3 operations refused for lack of memory \\(red ticks under the timeline\\): the first at operation ${ops[0]}, the last at operation ${ops[2]}\\.$`));
  // The table's note names the first; the line at the end names the last; both say which.
  assert.match(await page.textContent('#replay-outcome'), new RegExp(`First out of memory \\(of 3\\): operation ${ops[0]}: `));
  await page.click('#replay-player [aria-label="Replay to the end"]');
  await page.waitForFunction(() => /^Last out of memory/.test(document.getElementById('replay-error').textContent));
  assert.match(await page.textContent('#replay-error'), new RegExp(`^Last out of memory during the replay \\(of 3; the table names the first\\), operation ${ops[2]}: out of memory`));
  // Jumping: each OOM in turn, the player just after it, its explanation beside the buttons.
  await page.click('#replay-ooms button:text("First OOM")');
  assert.equal(await page.evaluate(() => window.cachalot.replay.player.position), ops[0] + 1);
  assert.match(await page.textContent('#replay-ooms .oom-text'), new RegExp(`^Out of memory 1 of 3 \\(the first\\), operation ${ops[0]}: out of memory`));
  await page.click('#replay-ooms button:text("Next OOM ▶")');
  assert.equal(await page.evaluate(() => window.cachalot.replay.player.position), ops[1] + 1);
  assert.match(await page.textContent('#replay-ooms .oom-text'), new RegExp(`^Out of memory 2 of 3 \\(the number 2\\), operation ${ops[1]}: `));
  await page.click('#replay-ooms button:text("Last OOM")');
  assert.equal(await page.evaluate(() => window.cachalot.replay.player.position), ops[2] + 1);
  assert.match(await page.textContent('#replay-ooms .oom-text'), new RegExp(`\\(the last\\), operation ${ops[2]}: `));
  assert.equal(await page.isDisabled('#replay-ooms button:text("Next OOM ▶")'), true);
  // The timeline draws a tick for each (pixels of the OOM colour under the plot).
  const ticks = await page.$eval('#replay-timeline canvas', (c) => {
    const ctx = c.getContext('2d');
    const { data } = ctx.getImageData(0, c.height - Math.round(20 * (window.devicePixelRatio || 1)), c.width, 4);
    let n = 0;
    for (let i = 0; i < data.length; i += 4) if (data[i] === 0xc2 && data[i + 1] === 0x18 && data[i + 2] === 0x5b) n++;
    return n;
  });
  assert.ok(ticks > 0, 'OOM ticks on the timeline');
  await page.$eval('#replay-timeline', (e) => e.scrollIntoView());
  await screenshot(page, 'replay-ooms');
  // A replay without refusals hides the row.
  await page.selectOption('#replay-trace', 'mixed_fc_conv.csv.gz');
  await page.waitForSelector('#replay-ooms[hidden]', { state: 'attached' });
  assert.equal(errors.length, 0, errors.join('\n'));
});
