// End-to-end test of the replay view following the trace's own addresses (issue 42): the
// cold pass places segments where the trace's pointers say the run's were, as `cachalot
// replay` does, so its figures equal the CLI's and PyTorch's reference row for the trace;
// the count followed is on the page, and the box that turns following off gives the CLI's
// `--no-follow-addresses` figures.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { serve, launch, openPage, screenshot, cliReplay, REPO } from './harness.mjs';

let server;
let browser;
let page;
let errors;

const GPT2 = path.join(REPO, 'traces', 'gpt2_train.csv.gz');
const FIELDS = ['peak_requested_bytes', 'peak_allocated_bytes', 'peak_reserved_bytes', 'device_allocs'];

before(async () => {
  const s = await serve();
  server = s.server;
  browser = await launch();
  ({ page, errors } = await openPage(browser.context, s.url));
  await page.click('#tab-replay');
  await page.waitForSelector('#replay-outcome table');
});

after(async () => {
  if (browser) await browser.close();
  if (server) server.close();
});

/** The replay table's figures, its config, its PyTorch row and the placements note. */
async function shown() {
  return page.$eval('#replay-outcome', (host) => {
    const out = { config: host.querySelector('table').dataset.config, cachalot: {}, pytorch: {} };
    for (const td of host.querySelectorAll('tr.cachalot td[data-field]')) out.cachalot[td.dataset.field] = Number(td.dataset.value);
    for (const td of host.querySelectorAll('tr.pytorch td[data-field]')) out.pytorch[td.dataset.field] = td.dataset.value;
    const note = host.querySelector('.placements');
    out.placements = note ? { text: note.textContent, followed: Number(note.dataset.value) } : null;
    return out;
  });
}

/** Waits until the placements note says `pattern` (a replay after a change has drawn). */
const noteSays = (pattern) => page.waitForFunction(
  (source) => new RegExp(source).test(document.querySelector('#replay-outcome .placements')?.textContent || ''),
  pattern.source, { timeout: 120000 },
);

test('the replay follows the trace\'s addresses: the count is shown and the figures are the CLI\'s and PyTorch\'s', async () => {
  await page.selectOption('#replay-trace', 'gpt2_train.csv.gz');
  await page.click('#replay-config .presets button[title="policy:pytorch"]');
  await page.click('#replay-apply');
  await page.waitForFunction(() => document.querySelector('#replay-outcome table').dataset.config === 'policy:pytorch'
    && document.getElementById('status').textContent.startsWith('gpt2_train'), null, { timeout: 120000 });
  await noteSays(/of the 182 segments/);
  assert.equal(await page.isChecked('#replay-follow'), true, 'following is on by default');
  const on = await shown();
  const cli = cliReplay(GPT2, on.config);
  for (const f of FIELDS) assert.equal(on.cachalot[f], cli[f], `${f} under ${on.config}`);
  assert.equal(on.placements.followed, cli.segment_placements_followed);
  assert.equal(cli.segment_placements_followed, 182);
  assert.match(on.placements.text, /^182 of the 182 segments placed where the run’s were, as the trace’s pointers say\.$/);
  // PyTorch's reference row for the trace is the run's own figures, and the replay's agree.
  assert.equal(on.cachalot.peak_allocated_bytes, Number(on.pytorch.pytorch_peak_allocated));
  assert.equal(on.cachalot.peak_reserved_bytes, Number(on.pytorch.pytorch_peak_reserved));
  assert.equal(on.cachalot.peak_allocated_bytes, 15073086464);
  await screenshot(page, 'placements-followed');
  assert.deepEqual(errors, []);
});

test('turning following off gives the CLI\'s --no-follow-addresses figures, apart from PyTorch\'s', async () => {
  await page.uncheck('#replay-follow');
  await noteSays(/own rule/);
  const off = await shown();
  const cli = cliReplay(GPT2, off.config, ['--no-follow-addresses']);
  for (const f of FIELDS) assert.equal(off.cachalot[f], cli[f], `${f} under ${off.config}, not following`);
  assert.equal(off.placements.followed, 0);
  assert.equal(cli.segment_placements_followed, 0);
  // Best fit breaks some ties the other way: the 15,072,037,888 bytes against 15,073,086,464.
  assert.equal(off.cachalot.peak_allocated_bytes, 15072037888);
  assert.notEqual(off.cachalot.peak_allocated_bytes, Number(off.pytorch.pytorch_peak_allocated));
  // The player's allocator places segments as the pass did: at the end its peaks are the pass's.
  await page.check('#replay-follow');
  await noteSays(/of the 182 segments/);
  assert.equal((await shown()).cachalot.peak_allocated_bytes, 15073086464);
  assert.deepEqual(errors, []);
});
