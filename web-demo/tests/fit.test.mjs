// End-to-end test of Compare's "smallest device it fits on" table (issue 44): on demand, for
// PyTorch's default, expandable segments, cachalot's policy and the two configs compared, the
// page shows the smallest simulated device the trace runs on, its ratio to the peak requested
// bytes, the driver calls there, the calm device, the driver calls on the device PyTorch's default needs and the
// card verdicts; every figure equals `cachalot fit --json`'s for the same trace and configs (one
// search in the core serves both), and so does the whole entry TraceFile.fit_json gives. At 390 px the table scrolls in its own box, if at all.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { serve, launch, openPage, screenshot, cliFit, REPO } from './harness.mjs';

let server;
let browser;
let page;
let errors;

const TRACE = 'gpt2_train.csv.gz';
const B = 'policy:pytorch,garbage_collection_threshold:0.6';

before(async () => {
  const s = await serve();
  server = s.server;
  browser = await launch();
  ({ page, errors } = await openPage(browser.context, s.url));
  await page.click('#tab-compare');
  await page.waitForSelector('#compare-outcome-b table');
});

after(async () => {
  if (browser) await browser.close();
  if (server) server.close();
});

test('Compare\'s smallest devices equal cachalot fit --json for the same trace and configs', async () => {
  assert.equal(await page.isDisabled('#compare-fit-run'), false, 'the button is ready once a comparison is shown');
  await page.selectOption('#compare-trace', TRACE);
  await page.fill('#compare-config-b .conf', B);
  await page.dispatchEvent('#compare-config-b .conf', 'change');
  await page.click('#compare-run');
  await page.waitForFunction((b) => document.querySelector('#compare-outcome-b table').dataset.config === b
    && /not searched yet/.test(document.getElementById('compare-fit-status').textContent), B, { timeout: 60000 });
  const a = await page.$eval('#compare-outcome-a table', (t) => t.dataset.config);

  await page.click('#compare-fit-run');
  await page.waitForSelector('#compare-fit-table table.fit', { timeout: 60000 });
  await page.locator('#compare-fit-table').scrollIntoViewIfNeeded();
  await screenshot(page, 'compare-fit');
  assert.match(await page.textContent('#compare-fit-status'), /^gpt2_train\.csv\.gz: searched in [\d.]+ s \(\d+ replays\)\.$/);
  const rows = await page.$$eval('#compare-fit-table tbody tr', (trs) => trs.map((tr) => {
    const row = { config: tr.dataset.config, role: tr.querySelector('.role').textContent, cards: {} };
    for (const td of tr.querySelectorAll('td[data-field]')) {
      row[td.dataset.field] = td.dataset.value === 'null' ? null : Number(td.dataset.value);
    }
    for (const s of tr.querySelectorAll('[data-card]')) row.cards[s.dataset.card] = s.dataset.value === 'true';
    return row;
  }));

  const cli = cliFit(path.join(REPO, 'traces', TRACE), [a, B]);
  assert.deepEqual(rows.map((r) => r.config), cli.fits.map((f) => f.config), 'the same configs, in the same order');
  assert.equal(rows.length, 4, 'config A is PyTorch\'s default: one row for both');
  assert.equal(rows[0].role, 'PyTorch’s default, config A');
  for (const [i, f] of cli.fits.entries()) {
    const r = rows[i];
    assert.equal(r.capacity_bytes, f.capacity_bytes, f.config);
    assert.equal(r.capacity_over_requested, f.capacity_over_requested, f.config);
    assert.equal(r.driver_calls, f.driver_calls, f.config);
    assert.equal(r.calm_capacity_bytes, f.calm_capacity_bytes, f.config);
    assert.equal(r.where_pytorch_fits, cli.where_pytorch_fits.driver_calls[i], f.config);
    assert.deepEqual(r.cards, Object.fromEntries(f.cards.map((c) => [c.card, c.fits])), f.config);
  }
  // The shown figures in words, as the CLI prints them ("15.13 GiB", "1.079").
  const first = await page.$$eval('#compare-fit-table tbody tr:first-child td', (tds) => tds.map((td) => td.textContent));
  assert.deepEqual(first.slice(1, 3), ['15.13 GiB', '1.079']);
  const calmShown = `${(cli.fits[0].calm_capacity_bytes / 2 ** 30).toFixed(2)} GiB, `;
  assert.ok(first[4].startsWith(calmShown), `${first[4]} against ${calmShown}`);

  // The binding's entry is the CLI's, field for field; its cards are the CLI's cards.
  const bound = await page.evaluate(async ({ trace, configs }) => {
    const { embedded } = await import('./js/trace_source.js');
    const { fit_cards_json: cards } = await import('./pkg/cachalot_wasm.js');
    const t = await embedded(trace);
    return { fits: configs.map((c) => JSON.parse(t.fit_json(c))), cards: JSON.parse(cards()) };
  }, { trace: TRACE, configs: cli.fits.map((f) => f.config) });
  assert.deepEqual(bound.fits, cli.fits);
  assert.deepEqual(bound.cards, cli.cards);
  await assert.rejects(page.evaluate(async (trace) => {
    const { embedded } = await import('./js/trace_source.js');
    (await embedded(trace)).fit_json('policy:pytorch,max_split_size_mb:big');
  }, TRACE), /max_split_size_mb/);

  // A new comparison drops the figures of the last one.
  await page.fill('#compare-config-b .conf', 'policy:pytorch');
  await page.dispatchEvent('#compare-config-b .conf', 'change');
  await page.click('#compare-run');
  await page.waitForFunction(() => /^3 configs .*not searched yet/.test(document.getElementById('compare-fit-status').textContent));
  assert.equal(await page.$('#compare-fit-table table'), null);

  // Where a config runs out of memory on the device PyTorch's default needs, the page says so:
  // on mixed_fc_conv expandable segments need 1.11 times the requested bytes, PyTorch's default 1.06.
  await page.selectOption('#compare-trace', 'mixed_fc_conv.csv.gz');
  await page.click('#compare-run');
  await page.waitForFunction(() => /mixed_fc_conv.*not searched yet/.test(document.getElementById('compare-fit-status').textContent),
    null, { timeout: 60000 });
  await page.click('#compare-fit-run');
  await page.waitForSelector('#compare-fit-table table.fit', { timeout: 60000 });
  const mixed = cliFit(path.join(REPO, 'traces', 'mixed_fc_conv.csv.gz'), []);
  const shown = await page.$$eval('#compare-fit-table tbody tr td[data-field="where_pytorch_fits"]',
    (tds) => tds.map((td) => [td.textContent, td.dataset.value]));
  assert.deepEqual(shown.map(([, v]) => (v === 'null' ? null : Number(v))), mixed.where_pytorch_fits.driver_calls);
  assert.equal(shown[1][0], 'out of memory');
  assert.equal(errors.length, 0, errors.join('\n'));
});

test('phone, 390 px: the table of smallest devices keeps the document from scrolling sideways', async () => {
  await page.click('#compare-fit-run');
  await page.waitForSelector('#compare-fit-table table.fit', { timeout: 60000 });
  await page.setViewportSize({ width: 390, height: 844 });
  await page.locator('#compare-fit-table').scrollIntoViewIfNeeded();
  const widths = await page.evaluate(() => ({
    document: document.documentElement.scrollWidth,
    box: document.getElementById('compare-fit-table').getBoundingClientRect().width,
    table: document.querySelector('#compare-fit-table table').getBoundingClientRect().width,
  }));
  await screenshot(page, 'compare-fit-phone');
  assert.ok(widths.document <= 390, `the document is ${widths.document} px wide`);
  assert.ok(widths.box <= 390, `the table's box is ${widths.box} px wide`);
  assert.ok(widths.table <= 390, `the table is ${widths.table} px wide`);
  assert.equal(errors.length, 0, errors.join('\n'));
});
