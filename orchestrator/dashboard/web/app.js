// The xmod dashboard's pages (docs/dashboard.md): a hash router over the JSON
// endpoints, polling every 2 s with ETags (a 304 leaves the page as it is).
'use strict';

const POLL_MS = 2000;
const etags = new Map();   // url -> etag of the body last rendered
const bodies = new Map();  // url -> that body
let cacheOnly = false;     // while set, getJson answers from `bodies` where it can

// The JSON at `url`, and whether it changed since the last call.
async function getJson(url) {
  if (cacheOnly && bodies.has(url)) return { data: bodies.get(url), changed: false };
  const headers = {};
  if (etags.has(url)) headers['If-None-Match'] = etags.get(url);
  const res = await fetch(url, { headers, cache: 'no-store' });
  if (res.status === 304) return { data: bodies.get(url), changed: false };
  const data = await res.json();
  if (!res.ok) throw new Error(data.error || res.statusText);
  etags.set(url, res.headers.get('ETag'));
  bodies.set(url, data);
  return { data, changed: true };
}

// getJson(url) if its answer is here at once (from the cache), else the body last
// rendered for `url` (data null before the first), with a redraw once a changed
// answer arrives: a page draws what it has and fills in the slow parts after.
async function later(url) {
  const pending = getJson(url);
  const WAITING = {};
  const first = await Promise.race([pending, Promise.resolve(WAITING)]);
  if (first !== WAITING) return first;
  pending.then(async (r) => {
    if (!r.changed) return;
    // Redraw from what is here: asking the server again would wait on the same
    // slow answers (a 304 costs the server the whole answer too).
    await redraw();
  }, () => {});
  return { data: bodies.get(url) ?? null, changed: false };
}

function esc(v) {
  return String(v).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}
function fmt(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'number') {
    if (Number.isInteger(v)) return String(v);
    return Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : v.toPrecision(5);
  }
  return String(v);
}
function duration(s) {
  if (s === null || s === undefined) return '–';
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
  return h ? `${h}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

// A sortable, filterable table of `rows` (objects) over `columns`. It draws the
// first PAGE_ROWS rows of the sorted, filtered list (a 10,000-row table takes
// seconds to lay out); "show all" draws the rest.
const PAGE_ROWS = 1000;
function table(id, columns, rows, link) {
  const state = (table.state[id] = table.state[id] || { key: null, asc: true, filter: '', all: false });
  let shown = rows.filter((r) => !state.filter ||
    columns.some((c) => String(r[c] ?? '').toLowerCase().includes(state.filter.toLowerCase())));
  if (state.key) {
    const k = state.key, sign = state.asc ? 1 : -1;
    shown = shown.slice().sort((a, b) => {
      const x = a[k], y = b[k];
      if (x === y) return 0;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * sign;
    });
  }
  const head = columns.map((c) => `<th class="${typeof rows[0]?.[c] === 'string' ? 'text' : ''}" data-table="${id}" data-key="${esc(c)}">${esc(c)}${state.key === c ? (state.asc ? ' ▲' : ' ▼') : ''}</th>`).join('');
  const total = shown.length;
  if (!state.all && shown.length > PAGE_ROWS) shown = shown.slice(0, PAGE_ROWS);
  const body = shown.map((r) => '<tr>' + columns.map((c) => {
    const v = r[c];
    const cls = typeof v === 'string' ? 'text' : '';
    // Times (seconds since the epoch, columns named *_at) as local date and time.
    const shown = c.endsWith('_at') && typeof v === 'number' ? new Date(v * 1000).toLocaleString() : fmt(v);
    const content = link && link[c] ? `<a href="${link[c](r)}">${esc(shown)}</a>` : esc(shown);
    return `<td class="${cls}" data-col="${esc(c)}">${content}</td>`;
  }).join('') + '</tr>').join('');
  return `<input class="filter" data-table="${id}" placeholder="filter" value="${esc(state.filter)}">
    <span class="count">${total} of ${rows.length}</span>
    ${shown.length < total ? `<span class="more">showing the first ${shown.length}: filter or sort to find others, or <button data-all="${id}">show all ${total}</button></span>` : ''}
    <table id="${id}"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}
table.state = {};

// Charts: the page's HTML holds an empty <div class="chart"> per chart and
// charts.pending its spec; draw() fills them after the HTML is in place, through
// the uPlot bundle (charts.js), or says why a build has none.
const charts = { pending: [] };
function chartBox(kind, spec) {
  charts.pending.push({ kind, spec });
  return `<div class="chart" id="chart-${esc(spec.name)}"></div>`;
}
charts.draw = function () {
  const pending = charts.pending;
  charts.pending = [];
  if (!window.XmodCharts) {
    for (const { spec } of pending) {
      const el = document.getElementById(`chart-${spec.name}`);
      if (el) el.innerHTML = `<p class="nocharts">no chart: ${esc(window.XmodChartsMissing || 'the chart bundle did not load')}</p>`;
    }
    return;
  }
  XmodCharts.prune();
  for (const { kind, spec } of pending) {
    const el = document.getElementById(`chart-${spec.name}`);
    if (el) XmodCharts[kind](el, spec);
  }
};
// The colour of group value `v` among `values`, and an HTML legend for them.
function colourOf(values, v) {
  const palette = window.XmodCharts ? XmodCharts.colours : ['#0072B2'];
  return palette[values.indexOf(v) % palette.length];
}
// `values`: group names (coloured as colourOf does) or the series of a chart.
function legend(values) {
  const names = values.map((v) => (typeof v === 'string' ? v : v.label));
  return `<div class="legend">${values.map((v, i) => `<span><i style="background:${typeof v === 'string' ? colourOf(names, v) : v.colour}"></i>${esc(names[i])}</span>`).join('')}</div>`;
}

// A job's final loss as the laws read it: causal for routed families.
function finalLoss(r) { return r.final_val_loss_causal ?? r.final_val_loss; }
function present(v) { return v !== null && v !== undefined; }

const STATES = ['pending', 'leased', 'running', 'succeeded', 'failed', 'cancelled'];
const IN_FLIGHT = ['job_id', 'family', 'scale', 'status', 'attempt', 'step', 'steps', 'steps_per_s', 'tokens_per_s'];

// Failed jobs with their reasons, newest first (the first 20).
function failuresBox(failures, withSweep) {
  if (!failures.length) return '';
  const shown = failures.slice(0, 20).map((f) => `<li>${withSweep ? `${esc(f.sweep)}: ` : ''}<a href="#/job/${encodeURIComponent(f.job_id)}">${esc(f.job_id)}</a>
    (${esc(f.family)} ${esc(f.scale)}, ${f.attempts} attempt${f.attempts === 1 ? '' : 's'}): <span class="reason">${esc(f.reason || 'no reason recorded')}</span></li>`).join('');
  return `<div class="failures"><b>${failures.length} failed</b><ul>${shown}</ul>${failures.length > 20 ? `<p>and ${failures.length - 20} more (filter the job table by "failed")</p>` : ''}</div>`;
}

async function sweepsPage(force) {
  const { data, changed } = await getJson('/api/sweeps');
  if (!changed && !force) return null;
  const rows = data.map((s) => ({ ...s, progress_pct: s.progress * 100 }));
  let html = '<h2>Sweeps</h2>';
  html += failuresBox(data.flatMap((s) => s.failures), true);
  html += table('sweeps', ['sweep', ...STATES, 'total', 'progress_pct', 'elapsed_s', 'eta_s', 'train_flops'], rows,
    { sweep: (r) => `#/sweep/${encodeURIComponent(r.sweep)}` });
  const inflight = data.flatMap((s) => s.in_flight.map((j) => ({ sweep: s.sweep, ...j })));
  html += `<h3>In flight (${inflight.length})</h3>` + (inflight.length
    ? table('inflight-all', ['sweep', ...IN_FLIGHT], inflight, { job_id: (r) => `#/job/${encodeURIComponent(r.job_id)}` })
    : '<p>no job is running</p>');
  return html;
}

// The sweep page's chart settings (kept across polls and routes).
const view = { colour: 'family', metric: 'val_loss', x: 'tokens', fit: null };
const AXES = ['family', 'scale', 'sparsity', 'stride', 'context', 'budget_value', 'seed'];
function select(id, options, value) {
  return `<select id="${id}">${options.map((o) => `<option${o === value ? ' selected' : ''}>${esc(o)}</option>`).join('')}</select>`;
}

// Curves of every job overlaid, one colour per value of the chosen axis.
function overlaySection(jobs, curves) {
  const byId = new Map(jobs.map((r) => [r.job_id, r]));
  // A family evaluated with causal routing reports val_loss_causal (the laws read it); the others val_loss only.
  const metric = view.metric === 'val_loss' ? (c) => ((c.columns.val_loss_causal || []).some(present) ? 'val_loss_causal' : 'val_loss') : () => 'train_loss';
  const groups = [...new Set(curves.jobs.map((c) => String(byId.get(c.job_id)?.[view.colour] ?? '')))].sort((a, b) => (isNaN(a) || isNaN(b) ? a.localeCompare(b) : a - b));
  const series = [];
  for (const c of curves.jobs) {
    const r = byId.get(c.job_id);
    if (!r) continue;
    const ys = c.columns[metric(c)] || [], xs = c.columns[view.x] || [];
    const x = [], y = [];
    ys.forEach((v, i) => { if (present(v) && present(xs[i]) && xs[i] > 0) { x.push(xs[i]); y.push(v); } });
    if (!x.length) continue;
    const g = String(r[view.colour] ?? '');
    series.push({ label: `${c.job_id} (${g})`, x, y, colour: colourOf(groups, g), kind: x.length > 1 ? 'line' : 'points', width: 1.2 });
  }
  return `<p>colour by ${select('colour', AXES, view.colour)} · ${select('metric', ['val_loss', 'train_loss'], view.metric)} against ${select('overlay-x', ['tokens', 'flops'], view.x)}
    <span class="note">validation loss: causal (threshold-routed) for X-MoD and MoD runs, as the laws read it</span></p>`
    + legend(groups) + chartBox('facets', { name: 'overlay', series, legend: false, logx: true, logy: true, xlabel: view.x, ylabel: view.metric, height: 360 });
}

// Final loss against training FLOPs by family, with the stored dense law's line at
// each dense N; the law's isoFLOP profiles beside.
function lawSection(done, compare) {
  const families = [...new Set(done.map((r) => r.family))].sort();
  const series = families.map((f) => {
    const rows = done.filter((r) => r.family === f);
    return { label: f, x: rows.map((r) => r.train_flops), y: rows.map(finalLoss), colour: colourOf(families, f), kind: 'points' };
  });
  for (const line of compare.law_lines) {
    series.push({ label: `dense law, N=${fmt(line.n)}`, x: line.flops, y: line.loss, colour: '#555555', kind: 'line', dash: [6, 4], width: 1 });
  }
  let html = `<h3>Final loss against training FLOPs</h3><p class="note">${compare.law
    ? `dashed: the dense law of fit ${compare.law.fit_id} (E=${fmt(compare.law.params.E)}, A=${fmt(compare.law.params.A)}, B=${fmt(compare.law.params.B)}, α=${fmt(compare.law.params.alpha)}, β=${fmt(compare.law.params.beta)}) at each dense N`
    : `no law line: ${esc(compare.law_missing || '')}`}</p>` + legend(families)
    + chartBox('facets', { name: 'loss-vs-flops', series, legend: false, logx: true, logy: true, xlabel: 'training FLOPs', ylabel: 'final validation loss' });
  if (compare.isoflop.length) {
    const budgets = compare.isoflop.map((p) => `C = ${fmt(p.flops)}`);
    const iso = compare.isoflop.map((p, i) => ({ label: budgets[i], x: p.n, y: p.loss, colour: colourOf(budgets, budgets[i]), kind: 'line', width: 2 }));
    iso.push({ label: 'lowest', x: compare.isoflop.map((p) => p.lowest.n), y: compare.isoflop.map((p) => p.lowest.loss), colour: '#000000', kind: 'points', size: 9 });
    html += '<h3>IsoFLOP profiles of the dense law</h3><p class="note">predicted loss against N at four training budgets; black: the lowest point of each on the plotted range</p>'
      + legend(budgets) + chartBox('facets', { name: 'isoflop', series: iso, legend: false, logx: true, logy: true, xlabel: 'non-embedding parameters N', ylabel: 'predicted loss' });
  }
  return html;
}

// Predicted against observed for a stored fit (the newest by default), its
// held-out runs marked.
function predictedSection(fits, byId) {
  const usable = fits.filter((f) => Array.isArray(f.fitted));
  if (!usable.length) return `<h3>Predicted against observed</h3><p>${fits.length ? 'the stored fits predate per-point predictions: run <code>xmod fit</code> again' : 'no stored fit (run <code>xmod fit</code>)'}</p>`;
  const fit = usable.find((f) => String(f.fit_id) === view.fit) || usable[0];
  const held = (fit.holdout?.points || []);
  const families = [...new Set(fit.fitted.map((p) => byId.get(p.job_id)?.family ?? '?'))].sort();
  const series = families.map((f) => {
    const pts = fit.fitted.filter((p) => (byId.get(p.job_id)?.family ?? '?') === f && present(p.predicted));
    return { label: `${f} (fitted)`, x: pts.map((p) => p.observed), y: pts.map((p) => p.predicted), colour: colourOf(families, f), kind: 'points' };
  });
  if (held.length) series.push({ label: `held out: ${fit.holdout.scale}`, x: held.map((p) => p.observed), y: held.map((p) => p.predicted), colour: '#E41A1C', kind: 'points', size: 11 });
  const all = [...fit.fitted.map((p) => p.observed), ...fit.fitted.map((p) => p.predicted), ...held.map((p) => p.observed), ...held.map((p) => p.predicted)].filter(present);
  const lo = Math.min(...all), hi = Math.max(...all);
  series.unshift({ label: 'predicted = observed', x: [lo, hi], y: [lo, hi], colour: '#999999', kind: 'line', dash: [4, 4], width: 1 });
  return `<h3>Predicted against observed</h3><p>fit ${select('fit', usable.map((f) => String(f.fit_id)), String(fit.fit_id))}
    ${esc(fit.law)} law (${esc(fit.method)}), ${fit.n_points} points, RMSE of log-loss ${fmt(fit.rmse)}${held.length ? `; held out: scale ${esc(fit.holdout.scale)} (RMSE ${fmt(fit.holdout.rmse)})` : ''}</p>`
    + legend(series) + chartBox('facets', { name: 'predicted-vs-observed', series, legend: false, xlabel: 'observed final loss', ylabel: 'predicted', width: 560 });
}

// Each sparse run relative to its FLOP-matched dense run, by sparsity, one series
// per stride and baseline, with the mean per sparsity.
function relativeSection(compare) {
  const pts = compare.relative_to_dense;
  if (!pts.length) return '<h3>Sparse runs against FLOP-matched dense</h3><p>no sparse run has a finished dense run of the same scale, context, budget and seed yet</p>';
  const names = [...new Set(pts.map((p) => p.series))].sort();
  const series = [];
  for (const n of names) {
    const mine = pts.filter((p) => p.series === n);
    series.push({ label: `${n}: each run`, x: mine.map((p) => p.sparsity), y: mine.map((p) => p.relative_pct), colour: colourOf(names, n), kind: 'points', size: 5 });
    const xs = [...new Set(mine.map((p) => p.sparsity))].sort((a, b) => a - b);
    const mean = xs.map((x) => { const v = mine.filter((p) => p.sparsity === x).map((p) => p.relative_pct); return v.reduce((a, b) => a + b, 0) / v.length; });
    series.push({ label: `${n}: mean`, x: xs, y: mean, colour: colourOf(names, n), kind: 'both', width: 2, size: 9 });
  }
  return '<h3>Sparse runs against FLOP-matched dense</h3><p class="note">100 (L / L<sub>dense</sub> − 1) against the dense run of the same scale, context, budget and seed; below 0: better than dense</p>'
    + legend(names) + chartBox('facets', { name: 'relative-to-dense', series, legend: false, xlabel: 'sparsity', ylabel: 'loss vs dense (%)' })
    + table('relative', ['series', 'job_id', 'dense_job_id', 'sparsity', 'stride', 'relative_pct'], pts, { job_id: (r) => `#/job/${encodeURIComponent(r.job_id)}` });
}

// Compute-matched pairs (xmod results --pairs): each routed configuration, seeds
// together, minus the dense runs of its scale, context and budget. One chart per
// family, on that family's own sparsity axis (skipped tokens for X-MoD and MoD,
// idle experts for MoE and DECO), each bar the 95% interval from the pooled seed sd.
const PAIR_COLUMNS = ['family', 'scale', 'context', 'budget', 'sparsity', 'stride', 'experts', 'seeds',
  'dense_seeds', 'loss', 'dense_loss', 'difference', 'diff_pct', 'low_95', 'high_95', 'flops_ratio',
  'matched', 'params_ratio', 'capacity', 'capacity_realised', 'capacity_flag'];
function pairsSection(compare) {
  const rows = compare.pairs || [];
  const title = '<h3>Compute-matched pairs</h3>';
  if (!rows.length) return `${title}<p>no routed configuration has finished dense runs of the same scale, context and budget yet</p>`;
  let html = `${title}<p class="note">100 (L − L<sub>dense</sub>) / L<sub>dense</sub> on the causal metric for routed runs; the bar is the 95% interval (1.96 × the pooled seed sd of the difference); below 0: better than dense. A capacity flag marks a run whose realised capacity exceeds the nominal one by more than 5%.</p>`;
  const setting = (r) => (r.experts ?? `stride ${r.stride}`);
  for (const family of [...new Set(rows.map((r) => r.family))].sort()) {
    const mine = rows.filter((r) => r.family === family);
    const kind = mine[0].sparsity_kind;
    const matched = [...new Set(mine.map((r) => r.matched))].join(', ');
    const settings = [...new Set(mine.map(setting))].sort();
    const series = [];
    for (const g of settings) {
      const pts = mine.filter((r) => setting(r) === g);
      series.push({ label: `${family} ${g}`, x: pts.map((r) => r.sparsity), y: pts.map((r) => r.diff_pct), colour: colourOf(settings, g), kind: 'points', size: 7 });
      for (const r of pts) {
        if (!present(r.low_95)) continue;
        series.push({ label: `${family} ${g} 95%`, x: [r.sparsity, r.sparsity], y: [100 * r.low_95 / r.dense_loss, 100 * r.high_95 / r.dense_loss], colour: colourOf(settings, g), kind: 'line', width: 1.5 });
      }
    }
    const flagged = mine.filter((r) => r.capacity_flag).length;
    html += `<h4>${esc(family)}: sparsity = ${esc(kind)}; matched: ${esc(matched)}${flagged ? `; <span class="flag">${flagged} capacity flag(s)</span>` : ''}</h4>`
      + legend(settings) + chartBox('facets', { name: `pairs-${family}`, series, legend: false, xlabel: `sparsity (${kind})`, ylabel: 'loss − dense (%)' });
  }
  return html + table('pairs', PAIR_COLUMNS, rows);
}

// The decision (xmod advise) at a compute and context, asked for on request or
// once the sweep has nothing left to run: it refits the laws with their bootstrap
// (seconds to a minute), so a running sweep does not recompute it at every poll.
const advise = { sweep: null, url: null, compute: '', context: '', calibrate: '', requested: false, answer: null };
function adviseUrl(name) {
  const q = [`sweep=${encodeURIComponent(name)}`];
  if (advise.compute) q.push(`compute=${encodeURIComponent(advise.compute)}`);
  if (advise.context) q.push(`context=${encodeURIComponent(advise.context)}`);
  if (advise.calibrate) q.push(`calibrate=${encodeURIComponent(advise.calibrate)}`);
  return `/api/advise?${q.join('&')}`;
}
// The calibration (xmod advise --calibrate): one row per truth.
function calibrationSection(c) {
  if (!c) return '';
  if (c.error) return `<p id="advise-calibration" class="note">calibration: ${esc(c.error)}</p>`;
  const share = (k, n) => (n ? `${k} of ${n} (${Math.round(100 * k / n)}%)` : '-');
  const rows = c.cases.map((k) => ({
    truth: k.truth === 'law' ? 'the fitted law' : `the law + an N x D misfit of ${fmt(100 * k.misfit_rms)}%`,
    'truth best': k.truth_best,
    'hit rate': share(k.hits, k.advised),
    'mean P(best)': k.mean_p_best,
    'P(best)': k.p_best_verdict ?? '',
    'loss coverage': share(k.covered, k.intervals),
    intervals: k.coverage_verdict ?? '',
    'hold-out caught': share(k.caught, k.wrong),
    'lack of fit rejects': share(k.lack_of_fit_rejected, k.lack_of_fit_tested),
    'said uncalibrated': share(k.uncalibrated, k.advised),
  }));
  return `<h4>Calibration at this design (${c.cases[0]?.sweeps ?? 0} simulated sweeps per truth, ${fmt(100 * c.noise)}% seed noise)</h4>`
    + `<div id="advise-calibration">${table('advise-calibration-table', Object.keys(rows[0] || { truth: '' }), rows)}</div>`;
}
// Asks once per press (or once per finished sweep and request): not at every
// poll, since a running sweep's data change at every poll.
function askAdvice(url) {
  advise.url = url;
  advise.answer = null;
  getJson(url).then((r) => { if (advise.url === url) advise.answer = r.data; },
    (err) => { if (advise.url === url) advise.answer = { error: err.message }; })
    .finally(() => { if (advise.url === url) redraw(); });
}
function adviseSection(name, answer, finished) {
  const form = `<p>C <input id="advise-compute" size="10" placeholder="largest run" value="${esc(advise.compute)}"> FLOPs, T <input id="advise-context" size="6" placeholder="largest" value="${esc(advise.context)}"> <button id="advise-go">advise</button> <input id="advise-calibrate-n" size="4" placeholder="20" value="${esc(advise.calibrate)}"> sweeps <button id="advise-calibrate">calibrate</button></p>`;
  let html = '<h3>Which configuration to train</h3>' + form;
  if (!advise.requested && !finished) return html + '<p class="note">the sweep is still running: press advise to refit now</p>';
  if (!answer) return html + '<p class="note">refitting the laws…</p>';
  if (answer.error) return html + `<div class="failures">${esc(answer.error)}</div>`;
  const a = answer;
  const pct = Math.round(100 * a.confidence);
  html += `<p id="advise-verdict"><b>${esc(a.verdict)}</b></p><p class="note">C = ${fmt(a.compute)} FLOPs, T = ${fmt(a.context)}; X-MoD form ${esc(a.form || 'none')}; ${a.refits} bootstrap refits; laws ${esc(a.laws.join(', '))}${a.extrapolation ? `; EXTRAPOLATING: ${esc(a.extrapolation)}` : ''}</p>`;
  const rows = a.configurations.map((r) => ({
    configuration: r.configuration, law: r.law, N_active: r.N_active, D: r.D, loss: r.loss,
    [`loss ${pct}%`]: a.refits ? `[${fmt(r.loss_interval[0])}, ${fmt(r.loss_interval[1])}]` : '',
    gain_vs_dense: r.gain_vs_dense,
    [`gain ${pct}%`]: a.refits ? `[${fmt(r.gain_interval[0])}, ${fmt(r.gain_interval[1])}]` : '',
    'P(best)': a.refits ? r.p_best : null,
  }));
  html += table('advise', Object.keys(rows[0] || { configuration: '' }), rows);
  const forms = [...a.forms, ...(a.dense_forms || [])].map((f) => ({
    form: f.law, AIC: f.aic ?? null, params: f.parameters ?? null,
    'lack of fit p': f.lack_of_fit?.available ? f.lack_of_fit.p : null,
    verdict: !f.fitted ? `not fitted: ${f.error}` : !f.lack_of_fit?.available ? 'untestable' : f.lack_of_fit.rejected ? 'REJECTED' : 'not rejected',
    'held-out RMSE': f.holdout_rmse ?? null, picks: f.best ?? '',
  }));
  html += '<h4>Competing forms (lower AIC is better)</h4>' + table('advise-forms', ['form', 'AIC', 'params', 'lack of fit p', 'verdict', 'held-out RMSE', 'picks'], forms);
  const h = a.decision_holdout;
  html += h.available
    ? `<p id="advise-holdout">decision hold-out at scale ${esc(h.scale)} among ${esc((h.compared || []).join(', '))}: chosen ${esc(h.chosen)}, best observed ${esc(h.observed_best)}: ${h.holds ? 'the decision holds' : h.fails ? 'the decision FAILS' : 'the hold-out cannot tell'}</p>`
    : `<p id="advise-holdout">decision hold-out: ${esc(h.why)}</p>`;
  return html + calibrationSection(a.calibration);
}

// Overlaid curves load with the page up to this many jobs; beyond, on request.
const OVERLAY_JOBS = 500;
async function sweepPage(name, force) {
  const q = encodeURIComponent(name);
  const compareUrl = `/api/compare?sweep=${q}`, curvesUrl = `/api/curves?sweep=${q}&max_points=200`;
  // The views' answers are the dear ones on a big sweep: they are asked for once
  // the table's are in (so as not to slow them down), and the table does not wait
  // for them (see later()).
  const [sweeps, jobs, fits] = await Promise.all([getJson('/api/sweeps'), getJson(`/api/jobs?sweep=${q}`),
    getJson(`/api/fits?sweep=${q}`)]);
  const rows = jobs.data;
  const overlay = rows.length <= OVERLAY_JOBS || sweepPage.overlay === name;
  const compare = await later(compareUrl);
  const curves = overlay ? await later(curvesUrl) : { changed: false, data: null };
  if (![sweeps, jobs, fits, compare, curves].some((r) => r.changed) && !force) return null;
  const summary = sweeps.data.find((s) => s.sweep === name) || { failures: [], in_flight: [] };
  let html = `<h2>Sweep ${esc(name)}</h2>`;
  if (summary.total) html += `<p>${STATES.map((s) => `${s} ${summary[s]}`).join(' · ')} · FLOPs done <span class="bar"><span style="width:${(100 * summary.progress).toFixed(1)}%"></span></span> ${(100 * summary.progress).toFixed(1)}% · elapsed ${duration(summary.elapsed_s)} · ETA ${duration(summary.eta_s)}</p>`;
  html += failuresBox(summary.failures, false);
  if (summary.in_flight.length) {
    html += '<h3>In flight</h3>' + table('inflight', IN_FLIGHT, summary.in_flight, { job_id: (r) => `#/job/${encodeURIComponent(r.job_id)}` });
  }
  html += '<h3>Jobs</h3>' + table('jobs', ['job_id', 'family', 'scale', 'sparsity', 'stride', 'context', 'budget_value', 'seed',
    'n_params_active', 'train_flops', 'status', 'step', 'steps', 'final_val_loss', 'final_val_loss_causal'], rows,
  { job_id: (r) => `#/job/${encodeURIComponent(r.job_id)}` });
  const loading = '<p class="note">loading…</p>';
  html += '<h3>Curves</h3>' + (!overlay ? `<p>${rows.length} jobs: <button id="load-overlay">overlay their curves</button></p>`
    : curves.data ? overlaySection(rows, curves.data) : loading);
  const done = rows.filter((r) => r.status === 'succeeded' && present(finalLoss(r)) && r.role !== 'trunk');
  const byId = new Map(rows.map((r) => [r.job_id, r]));
  html += (compare.data ? lawSection(done, compare.data) : `<h3>Final loss against training FLOPs</h3>${loading}`)
    + predictedSection(fits.data, byId)
    + (compare.data ? relativeSection(compare.data) + pairsSection(compare.data) : `<h3>Sparse runs against FLOP-matched dense</h3>${loading}`);
  const finished = summary.total > 0 && ['pending', 'leased', 'running'].every((k) => !summary[k]);
  if (advise.sweep !== name) Object.assign(advise, { sweep: name, url: null, compute: '', context: '', calibrate: '', requested: false, answer: null });
  if (finished && !advise.requested && advise.url !== adviseUrl(name)) askAdvice(adviseUrl(name));
  html += adviseSection(name, advise.answer, finished);
  html += `<h3>Fits</h3>` + (fits.data.length
    ? table('fits', ['fit_id', 'law', 'method', 'n_points', 'objective', 'rmse', 'holdout_scale'], fits.data)
      + fits.data.map((f) => `<details><summary>fit ${f.fit_id}: ${esc(f.law)} parameters and intervals</summary><pre>${esc(JSON.stringify({ params: f.params, intervals: f.intervals, on_bound: f.on_bound }, null, 2))}</pre></details>`).join('')
    : '<p>no stored fit (run <code>xmod fit</code>)</p>');
  return html;
}

async function jobPage(id, force) {
  const job = await getJson(`/api/job?id=${encodeURIComponent(id)}`);
  const curve = await getJson(`/api/curves?job=${encodeURIComponent(id)}&max_points=${jobPage.points}`);
  if (!job.changed && !curve.changed && !force) return null;
  const r = job.data.result || {};
  const c = curve.data.columns;
  let html = `<h2>Job ${esc(id)}</h2><p>${esc(r.family)} ${esc(r.scale)} · ${esc(r.status)} · step ${fmt(c.step?.[c.step.length - 1] ?? 0)} of ${fmt(r.steps)} · ${curve.data.rows} curve rows${curve.data.thinned ? ` (${curve.data.returned} shown)` : ''}</p>`;
  const x = jobPage.x;
  html += `<p>against ${select('xaxis', ['step', 'tokens', 'flops'], x)} · points ${select('points', ['2000', '20000', 'all'], jobPage.points === '0' ? 'all' : jobPage.points)}
    <span class="note">thinned curves keep every evaluation and the train loss's shape (largest-triangle-three-buckets)</span></p>`;
  const xs = c[x] || [];
  const lossSeries = ['train_loss', 'val_loss', 'val_loss_causal'].filter((n) => c[n]?.some(present)).map((n) => ({ label: n, values: c[n] }));
  html += '<h3>Loss</h3>' + (xs.length && lossSeries.length ? chartBox('line', { name: 'loss', x: xs, series: lossSeries, xlabel: x, ylabel: 'loss (nats per token)' }) : '<p>no points yet</p>');
  html += '<h3>Learning rate</h3>' + (xs.length && c.lr?.some(present) ? chartBox('line', { name: 'lr', x: xs, series: [{ label: 'lr', values: c.lr }], xlabel: x, ylabel: 'learning rate', height: 180 }) : '<p>no points yet</p>');
  html += '<h3>Attempts</h3>' + table('attempts', ['attempt', 'worker_id', 'status', 'resumed_from_step', 'started_at', 'ended_at', 'reason'], job.data.attempts);
  html += '<h3>Checkpoints</h3>' + table('checkpoints', ['step', 'attempt', 'path', 'created_at'], job.data.checkpoints);
  html += `<h3>Result</h3><pre>${esc(JSON.stringify(r, null, 2))}</pre><h3>Config</h3><pre>${esc(JSON.stringify(job.data.config, null, 2))}</pre>`;
  return html;
}

jobPage.points = '2000';  // rows of the job's curve to fetch: 2000, 20000 or 0 (all)
jobPage.x = 'step';  // the curves' x axis: step, tokens or flops

// Draws the page again from the answers already here (fetching only what is
// not): for sorting, filtering, a selector, or a slow answer that arrived.
async function redraw() {
  cacheOnly = true;
  try { await render(true); } finally { cacheOnly = false; }
}

let route = '';
async function render(force) {
  const hash = location.hash || '#/';
  const parts = hash.slice(2).split('/').map(decodeURIComponent);
  if (hash !== route) { route = hash; force = true; }
  let html;
  charts.pending = [];
  try {
    if (parts[0] === 'sweep' && parts[1]) html = await sweepPage(parts[1], force);
    else if (parts[0] === 'job' && parts[1]) html = await jobPage(parts[1], force);
    else html = await sweepsPage(force);
  } catch (e) {
    html = `<div class="failures">${esc(e.message)}</div>`;
  }
  if (html !== null) {
    const focused = document.activeElement?.dataset?.table;
    document.getElementById('page').innerHTML = html;
    charts.draw();
    if (focused) {
      const input = document.querySelector(`input.filter[data-table="${focused}"]`);
      if (input) { input.focus(); input.setSelectionRange(input.value.length, input.value.length); }
    }
  }
  document.getElementById('where').textContent = hash === '#/' ? '' : `› ${parts.join(' ')}`;
  document.getElementById('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
  document.body.dataset.rendered = String(Date.now());
}

document.addEventListener('click', (e) => {
  if (e.target.id === 'advise-go' || e.target.id === 'advise-calibrate') {
    advise.compute = document.getElementById('advise-compute').value.trim();
    advise.context = document.getElementById('advise-context').value.trim();
    advise.calibrate = e.target.id === 'advise-calibrate'
      ? (document.getElementById('advise-calibrate-n').value.trim() || '20') : '';
    advise.requested = true;
    askAdvice(adviseUrl(advise.sweep));
    return;
  }
  if (e.target.id === 'load-overlay') { sweepPage.overlay = decodeURIComponent(location.hash.split('/')[2] || ''); redraw(); return; }
  const all = e.target.closest('button[data-all]');
  if (all) { table.state[all.dataset.all].all = true; redraw(); return; }
  const th = e.target.closest('th[data-table]');
  if (!th) return;
  const s = table.state[th.dataset.table];
  if (s.key === th.dataset.key) s.asc = !s.asc; else { s.key = th.dataset.key; s.asc = true; }
  redraw();
});
document.addEventListener('change', (e) => {
  const v = e.target.value;
  if (e.target.id === 'xaxis') jobPage.x = v;
  else if (e.target.id === 'points') jobPage.points = v === 'all' ? '0' : v;
  else if (e.target.id === 'colour') view.colour = v;
  else if (e.target.id === 'metric') view.metric = v;
  else if (e.target.id === 'overlay-x') view.x = v;
  else if (e.target.id === 'fit') view.fit = v;
  else return;
  redraw();
});
document.addEventListener('input', (e) => {
  if (!e.target.matches('input.filter')) return;
  table.state[e.target.dataset.table].filter = e.target.value;
  redraw();
});
window.addEventListener('hashchange', () => render(true));
if (!window.XmodCharts) {
  document.getElementById('nocharts').textContent = `Charts are off: ${window.XmodChartsMissing || 'the chart bundle did not load'}. Tables and the JSON endpoints work as usual.`;
  document.getElementById('nocharts').hidden = false;
}
render(true);
// Polls every POLL_MS, or, where answers are slow (a 10,000-job sweep), every
// three times the last render's duration, so that a page left open does not keep
// the server busy.
async function poll() {
  const t0 = performance.now();
  try { await render(false); } finally {
    setTimeout(poll, Math.max(POLL_MS, 3 * (performance.now() - t0)));
  }
}
setTimeout(poll, POLL_MS);
