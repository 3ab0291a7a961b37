// How large a PyTorch snapshot the page opens, and how long it takes, in headless Chromium:
// writes snapshots of the sizes asked for with make_large_snapshot.py (into a temporary
// folder, removed after), opens each in the replay view's file box as a person would, and
// prints the time until its replay is shown (or the page's refusal), the time the reader
// took, and whether the page still answers after. Not a test (a 1 GB file takes minutes to
// write and read): run it by hand, see docs/usage.md.
//
// Run: node tests/large_snapshot.mjs [json|pickle] MEGABYTES... (from web-demo/, after make web-build)

import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { serve, launch, openPage, ROOT } from './harness.mjs';

const [form = 'json', ...sizes] = process.argv.slice(2);
const dir = await mkdtemp(path.join(tmpdir(), 'cachalot-large-'));
const s = await serve();
try {
  for (const mb of sizes.map(Number)) {
    const file = path.join(dir, `snapshot_${mb}MB.${form}`);
    execFileSync('python3', [path.join(ROOT, 'tests', 'make_large_snapshot.py'), String(mb), file]);
    const bytes = (await stat(file)).size;
    // A fresh browser for each file: the wasm module's memory is never given back.
    const browser = await launch();
    try {
      const { page, errors } = await openPage(browser.context, s.url);
      await page.click('#tab-replay');
      await page.waitForSelector('#replay-outcome table');
      const name = path.basename(file);
      const t0 = Date.now();
      await page.setInputFiles('#replay-file', file);
      await page.waitForFunction((n) => document.getElementById('status').textContent.startsWith(`${n}: `)
        || document.getElementById('replay-error').textContent !== '', name, { timeout: 600000, polling: 200 });
      const ms = Date.now() - t0;
      const shown = await page.evaluate(() => ({
        error: document.getElementById('replay-error').textContent,
        info: document.getElementById('replay-trace-info').textContent,
        recorded: document.querySelector('#replay-outcome tr.recorded') !== null,
        answers: 1 + 1,
      }));
      console.log(JSON.stringify({ form, megabytes: +(bytes / 1e6).toFixed(1), open_ms: ms, ...shown, console_errors: errors.length }));
    } catch (e) {
      console.log(JSON.stringify({ form, megabytes: +(bytes / 1e6).toFixed(1), failed: String(e.message || e).split('\n')[0] }));
    } finally {
      await browser.close();
    }
    await rm(file, { force: true });
  }
} finally {
  s.server.close();
  await rm(dir, { recursive: true, force: true });
}
