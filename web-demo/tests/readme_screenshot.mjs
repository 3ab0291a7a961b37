// Regenerates the README's picture, docs/img/web-demo.png: the compare view with gpt2_train
// under PyTorch's default and max_split_size_mb:128, both maps in log scale, at the moment
// config B's reserved memory peaks. Run with `npm run screenshot` after `make web-build`.

import path from 'node:path';
import { serve, launch, openPage, REPO } from './harness.mjs';

const { server, url } = await serve();
const browser = await launch();
try {
  const { page, errors } = await openPage(browser.context, url);
  await page.setViewportSize({ width: 1400, height: 900 });
  await page.click('#tab-compare');
  await page.waitForSelector('#compare-outcome-b table');
  await page.selectOption('#compare-trace', 'gpt2_train.csv.gz');
  await page.click('#compare-run');
  await page.waitForFunction(() => document.getElementById('status').textContent.includes('peak reserved'));
  await page.evaluate(() => {
    const v = window.cachalot.compare;
    v.player.seek(v.panes[1].figures.peak_reserved_op + 1);
    for (const id of ['compare-map-a-log', 'compare-map-b-log']) {
      const c = document.getElementById(id);
      c.checked = true;
      c.dispatchEvent(new Event('change'));
    }
    document.getElementById('compare-outcome-a').scrollIntoView();
    window.scrollBy(0, -40);
  });
  await page.waitForTimeout(300);
  if (errors.length) throw new Error(errors.join('\n'));
  await page.screenshot({ path: path.join(REPO, 'docs', 'img', 'web-demo.png') });
} finally {
  await browser.close();
  server.close();
}
