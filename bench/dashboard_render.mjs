// Render times of the dashboard in headless Chromium (docs/dashboard.md), a
// benchmark, not a test: run through the browser tests' harness,
//   bash tests/browser/run.sh SOURCE_DIR BUILD_DIR BUILD_DIR/bin bench/dashboard_render.mjs
// It submits bench/grid-10k.yaml (10,000 jobs) to a fresh database and writes
// curves straight into the metrics table with sqlite3 (nothing trains here): one
// job gets 100,000 rows (train loss and learning rate every step, a validation
// loss every 100), and 500 others, marked succeeded, 1,000 rows each (validation
// losses in both routing modes), then refreshes the metric summary as
// schema/0009 asks of a program that writes metrics itself. It serves
// the file with `xmod dashboard` and times, over several rounds, each page from
// navigation (or from the click that asks for more, once the page has drawn
// what it had) until its table or chart
// holds the data: the sweeps page, the 10,000-row job table, the job page with its
// curve thinned by the server to 2,000 rows, the same curve with all 100,000 rows,
// and the 500 jobs' curves overlaid. Prints the median and range of each, and
// the time of the JSON answer alone.
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
    FROM s WHERE step % 100 = 0;
  CREATE TEMP TABLE overlaid AS SELECT job_id, ROW_NUMBER() OVER (ORDER BY job_id) AS k FROM jobs
    WHERE job_id != '${job}' ORDER BY job_id LIMIT 500;
  UPDATE jobs SET status = 'succeeded' WHERE job_id IN (SELECT job_id FROM overlaid);
  WITH RECURSIVE s(step) AS (SELECT 1 UNION ALL SELECT step + 1 FROM s WHERE step < 1000)
  INSERT INTO metrics (job_id, name, step, value, tokens, flops, attempt, wall_time)
  SELECT o.job_id, 'train_loss', step, 3.0 + o.k / 500.0 + 5.0 / (1 + step / 100.0), step * 65536, step * 1e13, 1, 0
    FROM overlaid o, s
  UNION ALL SELECT o.job_id, 'val_loss', step, 3.0 + o.k / 500.0 + 5.0 / (1 + step / 100.0), step * 65536, step * 1e13, 1, 0
    FROM overlaid o, s WHERE step % 100 = 0
  UNION ALL SELECT o.job_id, 'val_loss_causal', step, 3.01 + o.k / 500.0 + 5.0 / (1 + step / 100.0), step * 65536, step * 1e13, 1, 0
    FROM overlaid o, s WHERE step % 100 = 0;
  INSERT OR REPLACE INTO job_metric_summary SELECT * FROM job_metric_rollup;`]);

const server = spawn(xmod, ['dashboard', '--db', db, '--http', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'inherit'] });
const base = await new Promise((resolve) => {
  let out = '';
  server.stdout.on('data', (c) => { out += c; const m = out.match(/on http:\/\/([\d.]+:\d+)\//); if (m) resolve(`http://${m[1]}`); });
});
const browser = await chromium.launch({
  executablePath: process.env.XMOD_CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-background-networking', '--disable-gpu'],
});

// Milliseconds from navigation until `ready` holds, or, with `action`, from the
// action (after the page first satisfied `before`) until `ready` holds.
async function timePage(url, ready, before, action) {
  const page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });
  let t0 = performance.now();
  await page.goto(url);
  if (action) {
    await page.waitForFunction(before, null, { timeout: 120000, polling: 10 });
    t0 = performance.now();
    await action(page);
  }
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
const chartRows = (name, n) => new Function(`const c = window.XmodCharts && XmodCharts.read('${name}'); return !!c && c.data[0].length === ${n};`);
const cases = [
  { name: 'sweeps page', url: `${base}/#/`, ready: () => document.querySelectorAll('table#sweeps tbody tr').length === 1,
    api: `${base}/api/sweeps` },
  { name: 'job table of 10,000 jobs (first 1,000 drawn)', url: `${base}/#/sweep/grid-10k`,
    ready: () => document.querySelectorAll('table#jobs tbody tr').length === 1000 && /10000 of 10000/.test(document.body.textContent),
    api: `${base}/api/jobs?sweep=grid-10k` },
  { name: 'job page, 1e5 rows thinned to 2,000', url: `${base}/#/job/${job}`, ready: chartRows('loss', 2000),
    api: `${base}/api/curves?job=${job}&max_points=2000` },
  { name: 'job page, all 1e5 rows (after the choice)', url: `${base}/#/job/${job}`, before: chartRows('loss', 2000),
    action: (p) => p.selectOption('#points', 'all'), ready: chartRows('loss', 100000),
    api: `${base}/api/curves?job=${job}&max_points=0` },
  { name: '500 jobs\' curves overlaid (after the click)', url: `${base}/#/sweep/grid-10k`,
    before: () => !!document.getElementById('load-overlay') && !document.body.textContent.includes('loading…'), action: (p) => p.click('#load-overlay'),
    ready: () => { const c = window.XmodCharts && XmodCharts.read('overlay'); return !!c && c.data.length === 501; },
    api: `${base}/api/curves?sweep=grid-10k&max_points=200` },
];
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
const range = (v) => `${median(v).toFixed(0)} (${Math.min(...v).toFixed(0)}-${Math.max(...v).toFixed(0)})`;
console.log(`dashboard render times in headless Chromium, ${rounds} rounds each (median, range), ms`);
for (const c of cases) {
  const page = [], json = [];
  for (let r = 0; r < rounds; r++) {
    page.push(await timePage(c.url, c.ready, c.before, c.action));
    json.push(await timeFetch(c.api));
  }
  console.log(`  ${c.name.padEnd(44)} page ${range(page)}   its JSON alone ${range(json)}`);
}
await browser.close();
server.kill('SIGTERM');
fs.rmSync(dir, { recursive: true, force: true });
