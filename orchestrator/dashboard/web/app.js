// The xmod dashboard's pages (docs/dashboard.md): a hash router over the JSON
// endpoints, polling every 2 s with ETags (a 304 leaves the page as it is).
'use strict';

const POLL_MS = 2000;
const etags = new Map();   // url -> etag of the body last rendered
const bodies = new Map();  // url -> that body

// The JSON at `url`, and whether it changed since the last call.
async function getJson(url) {
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

// A line chart (SVG) of named series over one x column; nulls break nothing.
function chart(columns, x, names, opts = {}) {
  const W = opts.width || 720, H = opts.height || 260, P = 40;
  const xs = columns[x] || [];
  const series = names.filter((n) => columns[n] && columns[n].some((v) => v !== null));
  if (!xs.length || !series.length) return '<p>no points yet</p>';
  let ymin = Infinity, ymax = -Infinity;
  for (const n of series) for (const v of columns[n]) if (v !== null) { ymin = Math.min(ymin, v); ymax = Math.max(ymax, v); }
  const xmin = Math.min(...xs), xmax = Math.max(...xs);
  const sx = (v) => P + (W - 2 * P) * (xmax > xmin ? (v - xmin) / (xmax - xmin) : 0.5);
  const sy = (v) => H - P + (2 * P - H) * (ymax > ymin ? (v - ymin) / (ymax - ymin) : 0.5);
  const colours = ['#0969da', '#cf222e', '#8250df', '#1a7f37', '#bf8700'];
  const lines = series.map((n, i) => {
    const pts = [];
    columns[n].forEach((v, k) => { if (v !== null && xs[k] !== null) pts.push(`${sx(xs[k]).toFixed(1)},${sy(v).toFixed(1)}`); });
    return `<polyline fill="none" stroke="${colours[i % colours.length]}" stroke-width="1.5" points="${pts.join(' ')}" data-series="${esc(n)}"/>
      <text x="${W - P}" y="${14 + 14 * i}" fill="${colours[i % colours.length]}" text-anchor="end" font-size="12">${esc(n)}</text>`;
  }).join('');
  return `<svg class="curve" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">
    <text x="${P}" y="${H - 8}" font-size="11">${esc(x)} ${fmt(xmin)} – ${fmt(xmax)}</text>
    <text x="4" y="${P - 8}" font-size="11">${fmt(ymax)}</text><text x="4" y="${H - P}" font-size="11">${fmt(ymin)}</text>
    ${lines}</svg>`;
}

// A scatter plot (SVG) of points {x, y, label, group}, optionally log-x, with an
// optional y = x line. The <g> carries data-plot and data-count for scripts.
function scatter(name, points, opts = {}) {
  const W = 560, H = 320, P = 48;
  if (!points.length) return `<p>no points for ${esc(name)} yet</p>`;
  const fx = opts.logx ? Math.log10 : (v) => v;
  const xs = points.map((p) => fx(p.x)), ys = points.map((p) => p.y);
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (opts.diagonal) { x0 = y0 = Math.min(x0, y0); x1 = y1 = Math.max(x1, y1); }
  const sx = (v) => P + (W - 2 * P) * (x1 > x0 ? (v - x0) / (x1 - x0) : 0.5);
  const sy = (v) => H - P - (H - 2 * P) * (y1 > y0 ? (v - y0) / (y1 - y0) : 0.5);
  const groups = [...new Set(points.map((p) => p.group))];
  const colours = ['#0969da', '#cf222e', '#8250df', '#1a7f37', '#bf8700', '#57606a'];
  const dots = points.map((p, i) => `<circle cx="${sx(xs[i]).toFixed(1)}" cy="${sy(p.y).toFixed(1)}" r="4"
    fill="${colours[groups.indexOf(p.group) % colours.length]}" data-x="${p.x}" data-y="${p.y}"><title>${esc(p.label)}</title></circle>`).join('');
  const legend = groups.map((g, i) => `<text x="${W - P}" y="${14 + 14 * i}" text-anchor="end" font-size="12" fill="${colours[i % colours.length]}">${esc(g)}</text>`).join('');
  const diag = opts.diagonal ? `<line x1="${sx(x0)}" y1="${sy(y0)}" x2="${sx(x1)}" y2="${sy(y1)}" stroke="#999" stroke-dasharray="4"/>` : '';
  return `<svg class="curve" width="${W}" height="${H}"><g data-plot="${esc(name)}" data-count="${points.length}">${diag}${dots}</g>${legend}
    <text x="${P}" y="${H - 8}" font-size="11">${esc(opts.xlabel || '')} ${opts.logx ? `1e${x0.toFixed(1)} – 1e${x1.toFixed(1)}` : `${fmt(x0)} – ${fmt(x1)}`}</text>
    <text x="4" y="${P - 8}" font-size="11">${esc(opts.ylabel || '')} ${fmt(y1)}</text><text x="4" y="${H - P}" font-size="11">${fmt(y0)}</text></svg>`;
}

// The dense law L = E + A/N^alpha + B/D^beta at a job (N: non-embedding
// parameters, D: tokens trained), as the laws read them (docs/laws.md).
function denseLaw(p, n, d) { return p.E + p.A / Math.pow(n, p.alpha) + p.B / Math.pow(d, p.beta); }

// A job's final loss as the laws read it: causal for routed families.
function finalLoss(r) { return r.final_val_loss_causal ?? r.final_val_loss; }

const STATES = ['pending', 'leased', 'running', 'succeeded', 'failed', 'cancelled'];

async function sweepsPage(force) {
  const { data, changed } = await getJson('/api/sweeps');
  if (!changed && !force) return null;
  const rows = data.map((s) => ({ ...s, progress_pct: s.progress * 100 }));
  let html = '<h2>Sweeps</h2>';
  const failing = data.filter((s) => s.failed > 0);
  if (failing.length) {
    html += `<div class="failures">${failing.map((s) => `<a href="#/sweep/${encodeURIComponent(s.sweep)}">${esc(s.sweep)}</a>: ${s.failed} failed`).join('<br>')}</div>`;
  }
  html += table('sweeps', ['sweep', ...STATES, 'total', 'progress_pct', 'elapsed_s', 'eta_s', 'train_flops'], rows,
    { sweep: (r) => `#/sweep/${encodeURIComponent(r.sweep)}` });
  return html;
}

async function sweepPage(name, force) {
  const jobs = await getJson(`/api/jobs?sweep=${encodeURIComponent(name)}`);
  const fits = await getJson(`/api/fits?sweep=${encodeURIComponent(name)}`);
  if (!jobs.changed && !fits.changed && !force) return null;
  const rows = jobs.data;
  const failed = rows.filter((r) => r.status === 'failed');
  const inflight = rows.filter((r) => r.status === 'leased' || r.status === 'running');
  let html = `<h2>Sweep ${esc(name)}</h2>`;
  if (failed.length) {
    html += `<div class="failures">${failed.length} failed: ${failed.map((r) => `<a href="#/job/${r.job_id}">${r.job_id}</a>`).join(', ')}</div>`;
  }
  if (inflight.length) {
    html += '<h3>In flight</h3>' + table('inflight', ['job_id', 'family', 'scale', 'status', 'attempts', 'step', 'steps'], inflight,
      { job_id: (r) => `#/job/${r.job_id}` });
  }
  html += '<h3>Jobs</h3>' + table('jobs', ['job_id', 'family', 'scale', 'sparsity', 'stride', 'context', 'budget_value', 'seed',
    'n_params_active', 'train_flops', 'status', 'step', 'steps', 'final_val_loss', 'final_val_loss_causal'], rows,
  { job_id: (r) => `#/job/${r.job_id}` });
  const done = rows.filter((r) => r.status === 'succeeded' && finalLoss(r) !== null && finalLoss(r) !== undefined && r.role !== 'trunk');
  html += '<h3>Final loss against training FLOPs</h3>' + scatter('loss-vs-flops',
    done.map((r) => ({ x: r.train_flops, y: finalLoss(r), group: r.family, label: `${r.job_id} ${r.scale}` })),
    { logx: true, xlabel: 'training FLOPs', ylabel: 'loss' });
  const dense = fits.data.find((f) => f.law === 'dense' && f.params && f.params.E !== undefined);
  if (dense) {
    const pts = done.filter((r) => r.family === 'dense').map((r) => ({
      x: finalLoss(r), y: denseLaw(dense.params, r.n_params_active, r.tokens_trained ?? r.tokens),
      group: r.scale === dense.holdout_scale ? 'held out' : 'fitted', label: `${r.job_id} ${r.scale}` }));
    html += `<h3>Dense law (fit ${dense.fit_id}): predicted against observed</h3>` + scatter('predicted-vs-observed', pts,
      { diagonal: true, xlabel: 'observed', ylabel: 'predicted' });
  }
  html += `<h3>Fits</h3>` + (fits.data.length
    ? table('fits', ['fit_id', 'law', 'method', 'n_points', 'objective', 'rmse', 'holdout_scale'], fits.data)
      + fits.data.map((f) => `<details><summary>fit ${f.fit_id}: ${esc(f.law)} parameters and intervals</summary><pre>${esc(JSON.stringify({ params: f.params, intervals: f.intervals, on_bound: f.on_bound }, null, 2))}</pre></details>`).join('')
    : '<p>no stored fit (run <code>xmod fit</code>)</p>');
  return html;
}

async function jobPage(id, force) {
  const job = await getJson(`/api/job?id=${encodeURIComponent(id)}`);
  const curve = await getJson(`/api/curves?job=${encodeURIComponent(id)}&max_points=2000`);
  if (!job.changed && !curve.changed && !force) return null;
  const r = job.data.result || {};
  const c = curve.data.columns;
  let html = `<h2>Job ${esc(id)}</h2><p>${esc(r.family)} ${esc(r.scale)} · ${esc(r.status)} · step ${fmt(c.step?.[c.step.length - 1] ?? 0)} of ${fmt(r.steps)} · ${curve.data.rows} curve rows${curve.data.thinned ? ` (${curve.data.returned} shown)` : ''}</p>`;
  const x = jobPage.x;
  html += `<p>against <select id="xaxis">${['step', 'tokens', 'flops'].map((a) => `<option${a === x ? ' selected' : ''}>${a}</option>`).join('')}</select></p>`;
  html += '<h3>Loss</h3>' + chart(c, x, ['train_loss', 'val_loss', 'val_loss_causal']);
  html += '<h3>Learning rate</h3>' + chart(c, x, ['lr'], { height: 160 });
  html += '<h3>Attempts</h3>' + table('attempts', ['attempt', 'worker_id', 'status', 'resumed_from_step', 'started_at', 'ended_at', 'reason'], job.data.attempts);
  html += '<h3>Checkpoints</h3>' + table('checkpoints', ['step', 'attempt', 'path', 'created_at'], job.data.checkpoints);
  html += `<h3>Result</h3><pre>${esc(JSON.stringify(r, null, 2))}</pre><h3>Config</h3><pre>${esc(JSON.stringify(job.data.config, null, 2))}</pre>`;
  return html;
}

jobPage.x = 'step';  // the curves' x axis: step, tokens or flops

let route = '';
async function render(force) {
  const hash = location.hash || '#/';
  const parts = hash.slice(2).split('/').map(decodeURIComponent);
  if (hash !== route) { route = hash; force = true; }
  let html;
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
  const all = e.target.closest('button[data-all]');
  if (all) { table.state[all.dataset.all].all = true; render(true); return; }
  const th = e.target.closest('th[data-table]');
  if (!th) return;
  const s = table.state[th.dataset.table];
  if (s.key === th.dataset.key) s.asc = !s.asc; else { s.key = th.dataset.key; s.asc = true; }
  render(true);
});
document.addEventListener('change', (e) => {
  if (e.target.id !== 'xaxis') return;
  jobPage.x = e.target.value;
  render(true);
});
document.addEventListener('input', (e) => {
  if (!e.target.matches('input.filter')) return;
  table.state[e.target.dataset.table].filter = e.target.value;
  render(true);
});
window.addEventListener('hashchange', () => render(true));
render(true);
setInterval(() => render(false), POLL_MS);
