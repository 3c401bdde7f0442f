// The dashboard end to end in headless Chromium (tests/browser/run.sh): a real
// coordinator (`xmod serve --http`) and a real worker group train a small sweep
// (tests/fixtures/dashboard_run.yaml) and a broken one (its corpus is missing)
// while the pages are open. Checks that the pages show what the database holds
// (counts, a job in flight, a failure's reason, a job's last step, a stored fit's
// parameters and predictions, each chart's data), that they update when jobs
// finish without a reload, and that a token-guarded dashboard refuses a request
// without the token; keeps screenshots in $XMOD_ARTIFACTS.
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
const spec = path.join(SRC, 'tests/fixtures/dashboard_run.yaml');
const children = [];
let passed = 0, failed = 0;

function run(args) {
  return execFileSync(xmod, args, { encoding: 'utf8' });
}
// A command that must fail: its stderr.
function runFails(args) {
  try {
    execFileSync(xmod, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    return String(e.stderr);
  }
  throw new Error(`xmod ${args.join(' ')} succeeded`);
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

// What the chart `name` holds (charts.js: labels and data), or null.
async function chart(page, name) {
  return page.evaluate((n) => (window.XmodCharts ? window.XmodCharts.read(n) : null), name);
}
const close = (a, b) => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b));

const browser = await chromium.launch({
  executablePath: process.env.XMOD_CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-background-networking', '--disable-gpu'],
});
try {
  run(['submit', spec, '--db', db]);
  // A second sweep whose corpus is gone by the time a worker gets its job.
  fs.writeFileSync(path.join(dir, 'broken.yaml'), `name: broken
data: {path: ${path.join(dir, 'moved-corpus')}, vocab_size: 64}
family: dense
scales: {s1: {d_model: 16, n_heads: 2, n_layers: 2}}
grid: [{family: dense, scale: [s1], context: 32, budget: {tokens: 8192}}]
train: {batch_tokens: 1024, lr: 3.0e-3, warmup_steps: 2, eval_interval: 8, eval_tokens: 2048}
resources: {ranks: 1, max_attempts: 1}
design: {laws: []}
`);
  run(['submit', path.join(dir, 'broken.yaml'), '--db', db]);
  const total = sql("SELECT COUNT(*) AS n FROM jobs j JOIN sweep_jobs sj ON sj.job_id = j.job_id JOIN sweeps s ON s.sweep_id = sj.sweep_id WHERE s.name = 'dashboard-run'")[0].n;
  const serve = await start(xmod, ['serve', '--db', db, '--listen', '127.0.0.1:0', '--address-file', path.join(dir, 'addr'),
    '--lease-ttl', '10', '--http', '127.0.0.1:0'], /dashboard on http:\/\/([\d.]+:\d+)\//);
  const base = `http://${serve.match[1]}`;
  const page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));

  await check('the chart bundle is built in and loads', async () => {
    await page.goto(`${base}/#/`);
    await waitFor('the page', async () => page.evaluate(() => !!document.body.dataset.rendered));
    const missing = await page.evaluate(() => window.XmodChartsMissing || null);
    assert.equal(missing, null, `built without charts: ${missing}`);
    assert.equal(await page.evaluate(() => typeof window.XmodCharts?.facets), 'function');
    assert.equal(await page.locator('#nocharts').isHidden(), true);
  });

  await check('the sweeps page shows the counts, a job in flight and a failure with its reason, updating in place', async () => {
    await waitFor('the sweeps table', async () => (await cell(page, 'sweeps', 'sweep', 'dashboard-run', 'pending')) === String(total));
    assert.equal(await cell(page, 'sweeps', 'sweep', 'dashboard-run', 'succeeded'), '0');
    await page.evaluate(() => { window.__loaded_once = true; });
    // A worker group trains both sweeps while the page stays open.
    const worker = spawn('mpirun', ['-np', '1', '--allow-run-as-root', '--oversubscribe', path.join(BIN, 'xmod-worker'),
      '--coordinator', fs.readFileSync(path.join(dir, 'addr'), 'utf8').trim(), '--run-dir', path.join(dir, 'runs'),
      '--threads', '1', '--poll-seconds', '0.2', '--exit-when-idle'], { cwd: dir, stdio: 'ignore' });
    children.push(worker);
    const seen = new Set();
    let inflight = null;
    await waitFor('every job succeeded on the page', async () => {
      const v = await cell(page, 'sweeps', 'sweep', 'dashboard-run', 'succeeded');
      seen.add(v);
      // A row of the in-flight table: its job, step and attempt, as the page showed them.
      const row = await page.evaluate(() => {
        const tr = document.querySelector('table#inflight-all tbody tr');
        if (!tr) return null;
        const get = (c) => tr.querySelector(`td[data-col="${c}"]`)?.textContent.trim();
        return { job: get('job_id'), step: Number(get('step')), attempt: Number(get('attempt')), steps: Number(get('steps')) };
      });
      if (row && !inflight) {
        inflight = row;
        await page.screenshot({ path: path.join(ART, 'sweeps-in-flight.png'), fullPage: true });
      }
      return v === String(total);
    });
    assert.ok(seen.size >= 2, `the page showed ${[...seen]} only`);
    assert.equal(await page.evaluate(() => window.__loaded_once), true, 'the page reloaded');
    assert.ok(inflight, 'no job was ever shown in flight');
    const steps = sql(`SELECT steps FROM jobs WHERE job_id = '${inflight.job}'`)[0].steps;
    assert.equal(inflight.steps, steps);
    assert.ok(inflight.step >= 0 && inflight.step <= steps && inflight.attempt >= 1, JSON.stringify(inflight));
    const status = JSON.parse(run(['status', '--db', db, '--format', 'json'])).find((s) => s.sweep === 'dashboard-run');
    for (const col of ['pending', 'succeeded', 'failed', 'total']) {
      assert.equal(await cell(page, 'sweeps', 'sweep', 'dashboard-run', col), String(status[col]), col);
    }
    // The broken sweep's job failed; the page names it with the stored reason.
    const failure = await waitFor('the failure', async () => sql("SELECT job_id, status_reason FROM jobs WHERE status = 'failed'")[0]);
    await waitFor('the failure on the page', async () => (await page.locator('.failures li', { hasText: failure.job_id }).count()) === 1);
    const reason = await page.locator('.failures li', { hasText: failure.job_id }).locator('.reason').textContent();
    assert.equal(reason, failure.status_reason);
    assert.match(reason, /moved-corpus/);
    await page.screenshot({ path: path.join(ART, 'sweeps.png'), fullPage: true });
  });

  const job = sql("SELECT job_id, MAX(step) AS step FROM metrics GROUP BY job_id ORDER BY job_id LIMIT 1")[0];
  await check('the sweep page lists every job with its last step, and the stored fit', async () => {
    run(['fit', 'dashboard-run', '--db', db, '--law', 'dense', '--holdout-largest']);
    await page.goto(`${base}/#/sweep/dashboard-run`);
    await waitFor('the jobs table', async () => (await page.locator('table#jobs tbody tr').count()) === total);
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
  });

  await check('the law views hold the database\'s runs and the stored fit\'s predictions', async () => {
    const results = sql("SELECT r.job_id, r.family, r.scale, r.train_flops, r.final_val_loss, r.final_val_loss_causal, r.seed, r.context, r.budget_value FROM job_results r JOIN sweep_jobs sj ON sj.job_id = r.job_id JOIN sweeps s ON s.sweep_id = sj.sweep_id WHERE s.name = 'dashboard-run' AND r.status = 'succeeded'");
    const loss = (r) => r.final_val_loss_causal ?? r.final_val_loss;
    // Final loss against FLOPs: one dot per finished run, at its FLOPs and loss;
    // one dashed law line per dense N.
    const lf = await waitFor('the loss-vs-flops chart', () => chart(page, 'loss-vs-flops'));
    const dotsOf = (c) => c.labels.map((l, i) => ({ l, d: c.data[i] })).filter((s) => s.l && !s.l.startsWith('dense law'));
    const dots = dotsOf(lf).flatMap((s) => s.d[0].map((x, k) => [x, s.d[1][k]]));
    assert.equal(dots.length, results.length);
    for (const r of results) assert.ok(dots.some(([x, y]) => close(x, r.train_flops) && close(y, loss(r))), r.job_id);
    const denseN = sql("SELECT COUNT(DISTINCT n_params_active) AS n FROM jobs WHERE family = 'dense'")[0].n;
    assert.equal(lf.labels.filter((l) => l && l.startsWith('dense law')).length, denseN);
    const iso = await chart(page, 'isoflop');
    assert.equal(iso.labels.filter((l) => l && l.startsWith('C = ')).length, 4);
    // Predicted against observed: the stored fit's own predictions, held-out runs apart.
    const report = JSON.parse(sql("SELECT result_json FROM fits ORDER BY fit_id DESC LIMIT 1")[0].result_json);
    const pv = await chart(page, 'predicted-vs-observed');
    const series = (prefix) => { const i = pv.labels.findIndex((l) => l && l.startsWith(prefix)); return i < 0 ? null : pv.data[i]; };
    const fitted = series('dense (fitted)'), held = series('held out');
    assert.equal(fitted[0].length, report.fitted.length);
    for (const p of report.fitted) {
      const k = fitted[0].findIndex((x) => close(x, p.observed));
      assert.ok(k >= 0 && close(fitted[1][k], p.predicted), p.job_id);
    }
    assert.equal(held[0].length, report.holdout.points.length);
    assert.ok(report.holdout.points.length > 0);
    // Each X-MoD run against the dense run of its scale, context, budget and seed.
    const rel = await chart(page, 'relative-to-dense');
    const xmodRuns = results.filter((r) => r.family === 'xmod');
    const each = rel.data[rel.labels.findIndex((l) => l && l.endsWith('each run'))];
    assert.equal(each[1].length, xmodRuns.length);
    for (const r of xmodRuns) {
      const d = results.find((x) => x.family === 'dense' && x.scale === r.scale && x.seed === r.seed && x.context === r.context && x.budget_value === r.budget_value);
      const pct = 100 * (loss(r) / d.final_val_loss - 1);
      assert.ok(each[1].some((v) => close(v, pct)), `${r.job_id}: ${pct}`);
    }
    await page.screenshot({ path: path.join(ART, 'sweep.png'), fullPage: true });
  });

  await check('the sweep page shows the compute-matched pairs and the advice xmod advise gives', async () => {
    // The pairs: one point per X-MoD configuration at its difference from dense, as
    // `xmod results --pairs` computes it; the panel names what is matched.
    const pairs = JSON.parse(run(['results', 'dashboard-run', '--db', db, '--pairs', '--format', 'json']));
    assert.ok(pairs.length > 0);
    const pc = await waitFor('the pairs chart', () => chart(page, 'pairs-xmod'));
    const points = pc.data[pc.labels.findIndex((l) => l === 'xmod stride 2')];
    assert.equal(points[1].length, pairs.filter((p) => p.family === 'xmod').length);
    for (const p of pairs) assert.ok(points[1].some((v) => close(v, p.diff_pct)), `${p.scale}: ${p.diff_pct}`);
    const heading = await page.locator('h4', { hasText: 'xmod: sparsity = skipped tokens' }).textContent();
    assert.ok(heading.includes('matched: '), heading);
    // The advice, asked for by the page once the sweep finished, is the command's.
    const verdict = await waitFor('the advice', async () => {
      const v = page.locator('#advise-verdict');
      return (await v.count()) ? v.textContent() : null;
    }, 180000);
    const answer = await page.evaluate(async (u) => (await fetch(u)).json(), '/api/advise?sweep=dashboard-run');
    assert.equal(verdict.trim(), answer.verdict);
    const cli = JSON.parse(run(['advise', 'dashboard-run', '--db', db, '--compute', String(answer.compute),
      '--context', String(answer.context), '--bootstrap', '100', '--format', 'json']));
    assert.equal(cli.verdict, answer.verdict);
    const rows = await page.locator('table#advise tbody tr').count();
    assert.equal(rows, cli.configurations.length);
    assert.equal(await cell(page, 'advise', 'configuration', cli.configurations[0].configuration, 'law'), cli.configurations[0].law);
    // Calibration on request: this sweep has one seed per configuration, so the
    // page shows why it cannot run, as the command says it.
    await page.fill('#advise-calibrate-n', '2');
    await page.click('#advise-calibrate');
    const calibration = await waitFor('the calibration', async () => {
      const c = page.locator('#advise-calibration');
      return (await c.count()) ? c.textContent() : null;
    }, 180000);
    const refused = runFails(['advise', 'dashboard-run', '--db', db, '--compute', String(answer.compute),
      '--context', String(answer.context), '--calibrate', '2']);
    assert.ok(refused.includes('no seed replicates'), refused);
    assert.ok(calibration.includes('no seed replicates'), calibration);
  });

  await check('curves overlay by the axis chosen, one line per job', async () => {
    const withCurves = sql("SELECT COUNT(DISTINCT m.job_id) AS n FROM metrics m JOIN sweep_jobs sj ON sj.job_id = m.job_id JOIN sweeps s ON s.sweep_id = sj.sweep_id WHERE s.name = 'dashboard-run' AND m.name IN ('val_loss', 'val_loss_causal')")[0].n;
    let ov = await chart(page, 'overlay');
    assert.equal(ov.data.length - 1, withCurves);
    await page.selectOption('#colour', 'scale');
    await waitFor('the legend by scale', async () => (await page.locator('.legend').first().textContent()).includes('s3'));
    const legend = await page.locator('.legend').first().locator('span').allTextContents();
    assert.deepEqual(legend, ['s1', 's2', 's3']);
    ov = await chart(page, 'overlay');
    assert.equal(ov.data.length - 1, withCurves);
    await page.screenshot({ path: path.join(ART, 'overlay.png'), fullPage: false });
  });

  await check('the job page draws its curves from every stored row', async () => {
    await page.goto(`${base}/#/job/${job.job_id}`);
    const rows = sql(`SELECT step, tokens, train_loss FROM job_curves WHERE job_id = '${job.job_id}' ORDER BY step`);
    const loss = await waitFor('the loss chart', () => chart(page, 'loss'));
    assert.deepEqual(loss.data[0], rows.map((r) => r.step));
    const train = loss.data[loss.labels.indexOf('train_loss')];
    rows.forEach((r, i) => assert.ok(r.train_loss === null ? train[i] === null : close(train[i], r.train_loss), `row ${i}`));
    assert.ok(await chart(page, 'lr'));
    // Against tokens: the x data are the stored tokens.
    await page.selectOption('#xaxis', 'tokens');
    await waitFor('the tokens axis', async () => (await chart(page, 'loss'))?.labels[0] === 'tokens');
    assert.deepEqual((await chart(page, 'loss')).data[0], rows.map((r) => r.tokens));
    await page.screenshot({ path: path.join(ART, 'job.png'), fullPage: true });
  });

  await check('no page raised a script error', async () => {
    assert.deepEqual(errors, []);
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
    await waitFor('the sweeps table behind the token', async () => (await cell(fresh, 'sweeps', 'sweep', 'dashboard-run', 'succeeded')) === String(total));
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
