// Test harness: serves web-demo/ on a free loopback port, starts Debian's Chromium headless
// through playwright-core (never Playwright's own browsers) with a fresh profile, and
// collects the page's console errors, so each test can fail on any of them.
// Invariant: everything started here is stopped by `close()`; screenshots land in
// web-demo/test-results/.

import http from 'node:http';
import { mkdtemp, readFile, rm, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execFileSync } from 'node:child_process';
import { chromium } from 'playwright-core';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REPO = path.resolve(ROOT, '..');
export const RESULTS = path.join(ROOT, 'test-results');
const TYPES = {
  '.html': 'text/html', '.js': 'text/javascript', '.mjs': 'text/javascript', '.css': 'text/css',
  '.wasm': 'application/wasm', '.json': 'application/json', '.jsonl': 'text/plain', '.gz': 'application/gzip',
};

/** A static file server for web-demo/ on 127.0.0.1 and a free port. */
export async function serve() {
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    const file = path.join(ROOT, decodeURIComponent(url.pathname === '/' ? '/index.html' : url.pathname));
    if (!file.startsWith(ROOT)) {
      res.writeHead(403).end();
      return;
    }
    try {
      const body = await readFile(file);
      res.writeHead(200, { 'Content-Type': TYPES[path.extname(file)] || 'application/octet-stream' });
      res.end(body);
    } catch {
      res.writeHead(404).end('not found');
    }
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${server.address().port}/` };
}

/** Chromium, headless, with a fresh profile. */
export async function launch() {
  const profile = await mkdtemp(path.join(tmpdir(), 'cachalot-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1400, height: 1000 },
  });
  return {
    context,
    async close() {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/** Opens the page and waits until the allocator is ready; `errors` collects console errors. */
export async function openPage(context, url) {
  const page = await context.newPage();
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(url);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 30000 });
  return { page, errors };
}

export async function screenshot(page, name) {
  await mkdir(RESULTS, { recursive: true });
  await page.screenshot({ path: path.join(RESULTS, `${name}.png`), fullPage: false });
}

/** `cachalot replay TRACE --config CONF --json`, parsed. */
export function cliReplay(trace, config, extra = []) {
  return cliJson(['replay', trace, '--config', config, '--json', '--passes', '3', ...extra]);
}

/** `cachalot fit TRACE --json --config C ...` for each of `configs`, parsed. */
export function cliFit(trace, configs) {
  return cliJson(['fit', trace, '--json', ...configs.flatMap((c) => ['--config', c])]);
}

/** The release CLI (or CACHALOT_BIN) run with `args`, its JSON output parsed. */
function cliJson(args) {
  const bin = process.env.CACHALOT_BIN || path.join(REPO, 'target', 'release', 'cachalot');
  return JSON.parse(execFileSync(bin, args, { encoding: 'utf8' }));
}
