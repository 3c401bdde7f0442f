// The dashboard end to end in headless Chromium (tests/browser/run.sh): a real
// coordinator (`xmod serve --http`) and a real worker group train a small sweep
// while the pages are open. Checks that the pages show what the database holds
// (counts, a job's last step, a stored fit's parameters), that they update when
// jobs finish without a reload, and that a token-guarded dashboard refuses a
// request without the token; keeps screenshots in $XMOD_ARTIFACTS.
import { chromium } from 'playwright-core';
import { spawn, execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BIN = process.env.XMOD_BIN_DIR;
const SRC = process.env.XMOD_SOURCE_DIR;
const ART = process.env.XMOD_ARTIFACTS;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xmod-browser-'));
const db = path.join(dir, 'x.db');
const xmod = path.join(BIN, 'xmod');
const spec = path.join(SRC, 'tests/fixtures/adaptive_run.yaml');
const children = [];
let passed = 0, failed = 0;

function run(args) {
  return execFileSync(xmod, args, { encoding: 'utf8' });
}
function sql(query) {
  return JSON.parse(run(['sql', '--db', db, '--format', 'json', query]));
}
// Starts a process and resolves with it once a stdout line matches `pattern`.
function start(cmd, args, pattern) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    const timer = setTimeout(() => reject(new Error(`${cmd}: no line matching ${pattern} in 30 s:\n${out}`)), 30000);
    const read = (chunk) => {
      out += chunk;
      const m = out.match(pattern);
      if (m) { clearTimeout(timer); resolve({ child, match: m }); }
    };
    child.stdout.on('data', read);
    child.stderr.on('data', (c) => { out += c; });
    child.on('exit', (code) => { clearTimeout(timer); if (!out.match(pattern)) reject(new Error(`${cmd} exited ${code}:\n${out}`)); });
  });
}
async function check(name, body) {
  try {
    await body();
    passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    console.log(`not ok - ${name}\n  ${String(e.stack || e).replace(/\n/g, '\n  ')}`);
  }
}
// The text of the cell in column `col` of the row whose `key` cell is `value`.
async function cell(page, table, key, value, col) {
  return page.evaluate(([t, k, v, c]) => {
    for (const tr of document.querySelectorAll(`table#${t} tbody tr`)) {
      const keyCell = tr.querySelector(`td[data-col="${k}"]`);
      if (keyCell && keyCell.textContent.trim() === v) return tr.querySelector(`td[data-col="${c}"]`)?.textContent.trim();
    }
    return null;
  }, [table, key, value, col]);
}
async function waitFor(what, fn, ms = 120000) {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const browser = await chromium.launch({
  executablePath: process.env.XMOD_CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-background-networking', '--disable-gpu'],
});
try {
  run(['submit', spec, '--db', db]);
  const serve = await start(xmod, ['serve', '--db', db, '--listen', '127.0.0.1:0', '--address-file', path.join(dir, 'addr'),
    '--lease-ttl', '10', '--http', '127.0.0.1:0'], /dashboard on http:\/\/([\d.]+:\d+)\//);
  const base = `http://${serve.match[1]}`;
  const page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });

  await check('the sweeps page shows the database\'s counts, then updates in place as jobs finish', async () => {
    await page.goto(`${base}/#/`);
    await waitFor('the sweeps table', async () => (await cell(page, 'sweeps', 'sweep', 'adaptive-run', 'pending')) === '9');
    assert.equal(await cell(page, 'sweeps', 'sweep', 'adaptive-run', 'succeeded'), '0');
    await page.evaluate(() => { window.__loaded_once = true; });
    // A worker group trains the sweep while the page stays open.
    const worker = spawn('mpirun', ['-np', '1', '--allow-run-as-root', '--oversubscribe', path.join(BIN, 'xmod-worker'),
      '--coordinator', fs.readFileSync(path.join(dir, 'addr'), 'utf8').trim(), '--run-dir', path.join(dir, 'runs'),
      '--threads', '1', '--poll-seconds', '0.2', '--exit-when-idle'], { cwd: dir, stdio: 'ignore' });
    children.push(worker);
    const seen = new Set();
    await waitFor('nine succeeded jobs on the page', async () => {
      const v = await cell(page, 'sweeps', 'sweep', 'adaptive-run', 'succeeded');
      seen.add(v);
      return v === '9';
    });
    assert.ok(seen.size >= 2, `the page showed ${[...seen]} only`);
    assert.equal(await page.evaluate(() => window.__loaded_once), true, 'the page reloaded');
    const status = JSON.parse(run(['status', '--db', db, '--format', 'json']))[0];
    for (const col of ['pending', 'succeeded', 'failed', 'total']) {
      assert.equal(await cell(page, 'sweeps', 'sweep', 'adaptive-run', col), String(status[col]), col);
    }
    await page.screenshot({ path: path.join(ART, 'sweeps.png'), fullPage: true });
  });

  const job = sql("SELECT job_id, MAX(step) AS step FROM metrics GROUP BY job_id ORDER BY job_id LIMIT 1")[0];
  await check('the sweep page lists every job with its last step, and the stored fit', async () => {
    run(['fit', 'adaptive-run', '--db', db, '--law', 'dense']);
    await page.goto(`${base}/#/sweep/adaptive-run`);
    await waitFor('the jobs table', async () => (await page.locator('table#jobs tbody tr').count()) === 9);
    assert.equal(await cell(page, 'jobs', 'job_id', job.job_id, 'step'), String(job.step));
    assert.equal(await cell(page, 'jobs', 'job_id', job.job_id, 'status'), 'succeeded');
    const fit = sql("SELECT fit_id, n_points, params_json FROM fits ORDER BY fit_id DESC LIMIT 1")[0];
    await waitFor('the fits table', async () => (await cell(page, 'fits', 'fit_id', String(fit.fit_id), 'n_points')) === String(fit.n_points));
    const shown = await page.evaluate((id) => {
      const d = [...document.querySelectorAll('details')].find((x) => x.textContent.includes(`fit ${id}:`));
      return d ? JSON.parse(d.querySelector('pre').textContent).params : null;
    }, fit.fit_id);
    const stored = JSON.parse(fit.params_json);
    for (const k of Object.keys(stored)) assert.equal(shown[k], stored[k], k);
    // The law views: one point per finished job; predicted = the stored law at the job.
    assert.equal(await page.locator('g[data-plot="loss-vs-flops"]').getAttribute('data-count'), '9');
    assert.equal(await page.locator('g[data-plot="predicted-vs-observed"]').getAttribute('data-count'), '9');
    const jr = sql(`SELECT n_params_active AS n, tokens_trained AS d, final_val_loss AS loss FROM job_results WHERE job_id = '${job.job_id}'`)[0];
    const predicted = stored.E + stored.A / Math.pow(jr.n, stored.alpha) + stored.B / Math.pow(jr.d, stored.beta);
    const dot = page.locator(`g[data-plot="predicted-vs-observed"] circle[data-x="${jr.loss}"]`);
    assert.equal(await dot.count(), 1);
    assert.ok(Math.abs(Number(await dot.getAttribute('data-y')) - predicted) < 1e-9 * predicted);
    await page.screenshot({ path: path.join(ART, 'sweep.png'), fullPage: true });
  });

  await check('the job page draws its curves from every stored row', async () => {
    await page.goto(`${base}/#/job/${job.job_id}`);
    const rows = sql(`SELECT COUNT(*) AS n FROM job_curves WHERE job_id = '${job.job_id}' AND train_loss IS NOT NULL`)[0].n;
    await waitFor('the loss chart', async () => (await page.locator('polyline[data-series="train_loss"]').count()) === 1);
    const points = await page.evaluate(() => document.querySelector('polyline[data-series="train_loss"]').getAttribute('points').trim().split(/\s+/).length);
    assert.equal(points, rows);
    assert.equal(await page.locator('polyline[data-series="lr"]').count(), 1);
    // Against tokens: the axis label says so, with the last row's tokens.
    const tokens = sql(`SELECT MAX(tokens) AS t FROM job_curves WHERE job_id = '${job.job_id}'`)[0].t;
    await page.selectOption('#xaxis', 'tokens');
    await waitFor('the tokens axis', async () => (await page.locator('svg.curve text', { hasText: `tokens` }).count()) === 2);
    const label = await page.locator('svg.curve text', { hasText: 'tokens' }).first().textContent();
    assert.ok(label.endsWith(String(tokens)), `${label} does not end at ${tokens}`);
    await page.screenshot({ path: path.join(ART, 'job.png'), fullPage: true });
  });

  await check('with a token, a request without it is refused and the login cookie lets the page in', async () => {
    fs.writeFileSync(path.join(dir, 'token'), 'browser-s3cret\n', { mode: 0o600 });
    const guarded = await start(xmod, ['dashboard', '--db', db, '--http', '127.0.0.1:0', '--token-file', path.join(dir, 'token')],
      /on http:\/\/([\d.]+:\d+)\//);
    const at = `http://${guarded.match[1]}`;
    const fresh = await browser.newPage();
    assert.equal((await fresh.goto(`${at}/`)).status(), 401);
    assert.equal((await fresh.goto(`${at}/api/sweeps`)).status(), 401);
    assert.equal((await fresh.goto(`${at}/login?token=wrong`)).status(), 401);
    await fresh.goto(`${at}/login?token=browser-s3cret`);
    await waitFor('the sweeps table behind the token', async () => (await cell(fresh, 'sweeps', 'sweep', 'adaptive-run', 'succeeded')) === '9');
    await fresh.close();
  });

  await check('a non-loopback dashboard without a token does not start', async () => {
    let error = null;
    try { run(['dashboard', '--db', db, '--http', '0.0.0.0:0']); } catch (e) { error = e; }
    assert.ok(error, 'it started');
    assert.equal(error.status, 2);
    assert.match(String(error.stderr), /operator token/);
  });
} finally {
  await browser.close();
  for (const c of children) { try { c.kill('SIGTERM'); } catch { /* gone */ } }
  fs.rmSync(dir, { recursive: true, force: true });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
