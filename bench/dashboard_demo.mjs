// The dashboard on the demo sweep while `xmod run` trains it, for the record:
// screenshots in $XMOD_ARTIFACTS (demo-*.png), run through the browser tests'
// harness from a checkout with the demo corpus prepared (deploy/prepare-demo-data.sh):
//   bash tests/browser/run.sh SOURCE_DIR BUILD_DIR BUILD_DIR/bin bench/dashboard_demo.mjs
// It starts `xmod run sweeps/demo.yaml --http 127.0.0.1:0` on a fresh database
// and shoots the sweeps page, the sweep page and the page of a job in flight every
// SHOT_EVERY seconds (default 120) while it trains; once the run has fitted its
// laws and exited, it serves the file with `xmod dashboard` and shoots the
// finished sweep page. Prints what each shot showed (counts, jobs in flight).
import { chromium } from 'playwright-core';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BIN = process.env.XMOD_BIN_DIR;
const SRC = process.env.XMOD_SOURCE_DIR;
const ART = process.env.XMOD_ARTIFACTS;
const every = Number(process.env.SHOT_EVERY || 120) * 1000;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'xmod-demo-'));
const db = path.join(dir, 'demo.db');
const xmod = path.join(BIN, 'xmod');

function serve(args, pattern) {
  const child = spawn(xmod, args, { cwd: SRC, stdio: ['ignore', 'pipe', 'inherit'] });
  const address = new Promise((resolve) => {
    let out = '';
    child.stdout.on('data', (c) => { out += c; const m = out.match(pattern); if (m) resolve(`http://${m[1]}`); });
  });
  return { child, address, exited: new Promise((resolve) => child.on('exit', resolve)) };
}
const browser = await chromium.launch({
  executablePath: process.env.XMOD_CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-background-networking', '--disable-gpu'],
});
const page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });
async function shoot(url, name, settle = 2500) {
  await page.goto(url);
  await page.waitForTimeout(settle);
  await page.screenshot({ path: path.join(ART, `${name}.png`), fullPage: true });
}
try {
  const run = serve(['run', 'sweeps/demo.yaml', '--db', db, '--http', '127.0.0.1:0'], /dashboard on http:\/\/([\d.]+:\d+)\//);
  const base = await run.address;
  let done = false, k = 0;
  run.exited.then(() => { done = true; });
  while (!done) {
    await new Promise((r) => setTimeout(r, k === 0 ? 20000 : every));
    if (done) break;
    try {
      const sweeps = await (await fetch(`${base}/api/sweeps`)).json();
      const s = sweeps.find((x) => x.sweep === 'demo');
      const flying = s.in_flight.map((j) => `${j.job_id} step ${j.step}/${j.steps} at ${j.steps_per_s?.toFixed(1) ?? '?'} steps/s`);
      console.log(`shot ${k}: succeeded ${s.succeeded}/${s.total}, FLOPs ${(100 * s.progress).toFixed(1)}%, in flight: ${flying.join('; ')}`);
      await shoot(`${base}/#/`, `demo-${k}-sweeps`);
      await shoot(`${base}/#/sweep/demo`, `demo-${k}-sweep`);
      if (s.in_flight.length) await shoot(`${base}/#/job/${s.in_flight[0].job_id}`, `demo-${k}-job`);
    } catch (e) {
      if (!done) console.log(`shot ${k}: ${e.message}`);
    }
    k++;
  }
  const after = serve(['dashboard', '--db', db, '--http', '127.0.0.1:0'], /on http:\/\/([\d.]+:\d+)\//);
  const at = await after.address;
  await shoot(`${at}/#/sweep/demo`, 'demo-final-sweep', 4000);
  const fits = await (await fetch(`${at}/api/fits?sweep=demo`)).json();
  console.log(`final: ${fits.length} stored fits (${fits.map((f) => `${f.fit_id} ${f.law}`).join(', ')})`);
  after.child.kill('SIGTERM');
} finally {
  await browser.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
