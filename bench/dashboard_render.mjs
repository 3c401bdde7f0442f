// Render times of the dashboard in headless Chromium (docs/dashboard.md), a
// benchmark, not a test: run through the browser tests' harness,
//   bash tests/browser/run.sh SOURCE_DIR BUILD_DIR BUILD_DIR/bin bench/dashboard_render.mjs
// It submits bench/grid-10k.yaml (10,000 jobs) to a fresh database, gives one job
// 100,000 curve rows (train loss and learning rate every step, a validation loss
// every 100; written straight into the metrics table with sqlite3, since nothing
// trains here), serves it with `xmod dashboard`, and times, over several rounds,
// the navigation to each page until the page has drawn (the app marks the body):
// the sweeps page, the 10,000-row job table, and the job page with its curves
// (thinned by the server to 2,000 rows), and the same job page asking for every
// row. Prints the median and range of each, and the time of the JSON answer alone.
import { chromium } from 'playwright-core';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BIN = process.env.XMOD_BIN_DIR;
const SRC = process.env.XMOD_SOURCE_DIR;
const rounds = Number(process.env.ROUNDS || 5);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xmod-render-'));
const db = path.join(dir, 'x.db');
const xmod = path.join(BIN, 'xmod');

execFileSync(xmod, ['submit', path.join(SRC, 'bench/grid-10k.yaml'), '--db', db, '--max-jobs', '20000',
  '--allow-unidentifiable'], { stdio: 'ignore' });
const job = JSON.parse(execFileSync(xmod, ['sql', '--db', db, '--format', 'json',
  'SELECT job_id FROM jobs ORDER BY job_id LIMIT 1'], { encoding: 'utf8' }))[0].job_id;
execFileSync('sqlite3', [db, `
  WITH RECURSIVE s(step) AS (SELECT 1 UNION ALL SELECT step + 1 FROM s WHERE step < 100000)
  INSERT INTO metrics (job_id, name, step, value, tokens, flops, attempt, wall_time)
  SELECT '${job}', 'train_loss', step, 3.0 + 5.0 / (1 + step / 1000.0) + 0.05 * ((step * 7919) % 101) / 101.0,
         step * 524288, step * 1e15, 1, 0 FROM s
  UNION ALL SELECT '${job}', 'lr', step, 3e-4 * MIN(1.0, step / 2000.0), step * 524288, step * 1e15, 1, 0 FROM s
  UNION ALL SELECT '${job}', 'val_loss', step, 3.0 + 5.0 / (1 + step / 1000.0), step * 524288, step * 1e15, 1, 0
    FROM s WHERE step % 100 = 0;`]);

const server = spawn(xmod, ['dashboard', '--db', db, '--http', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'inherit'] });
const base = await new Promise((resolve) => {
  let out = '';
  server.stdout.on('data', (c) => { out += c; const m = out.match(/on http:\/\/([\d.]+:\d+)\//); if (m) resolve(`http://${m[1]}`); });
});
const browser = await chromium.launch({
  executablePath: process.env.XMOD_CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-background-networking', '--disable-gpu'],
});

// Milliseconds from navigation until the page has drawn its data.
async function timePage(url, ready) {
  const page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });
  const t0 = performance.now();
  await page.goto(url);
  await page.waitForFunction(ready, null, { timeout: 120000, polling: 10 });
  const ms = performance.now() - t0;
  await page.close();
  return ms;
}
async function timeFetch(url) {
  const t0 = performance.now();
  const res = await fetch(url);
  await res.arrayBuffer();
  return performance.now() - t0;
}
const cases = [
  ['sweeps page', `${base}/#/`, () => document.querySelectorAll('table#sweeps tbody tr').length === 1, `${base}/api/sweeps`],
  ['job table of 10,000 jobs (first 1,000 drawn)', `${base}/#/sweep/grid-10k`,
    () => document.querySelectorAll('table#jobs tbody tr').length === 1000 && /10000 of 10000/.test(document.body.textContent),
    `${base}/api/jobs?sweep=grid-10k`],
  ['job page, 1e5 rows thinned to 2,000', `${base}/#/job/${job}`, () => !!document.querySelector('polyline[data-series="train_loss"]'),
    `${base}/api/curves?job=${job}&max_points=2000`],
];
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
console.log(`dashboard render times in headless Chromium, ${rounds} rounds each (median, range), ms`);
for (const [name, url, ready, api] of cases) {
  const page = [], json = [];
  for (let r = 0; r < rounds; r++) {
    page.push(await timePage(url, ready));
    json.push(await timeFetch(api));
  }
  console.log(`  ${name.padEnd(38)} page ${median(page).toFixed(0)} (${Math.min(...page).toFixed(0)}-${Math.max(...page).toFixed(0)})` +
    `   its JSON alone ${median(json).toFixed(0)} (${Math.min(...json).toFixed(0)}-${Math.max(...json).toFixed(0)})`);
}
const all = [];
for (let r = 0; r < rounds; r++) all.push(await timeFetch(`${base}/api/curves?job=${job}&max_points=0`));
console.log(`  every curve row as JSON (100,000 rows)  ${median(all).toFixed(0)} (${Math.min(...all).toFixed(0)}-${Math.max(...all).toFixed(0)})`);
await browser.close();
server.kill('SIGTERM');
fs.rmSync(dir, { recursive: true, force: true });
