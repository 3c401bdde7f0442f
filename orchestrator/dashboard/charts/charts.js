// The dashboard's charts over uPlot (canvas; draws 10^5-point curves in
// milliseconds). esbuild bundles this file with uPlot and its stylesheet into
// charts.js and charts.css, which the xmod binary embeds and serves; app.js draws
// through window.XmodCharts and says so when a build has no such bundle.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

// Okabe-Ito (colour-blind safe), then a few more: the palette of `xmod plot`.
const COLOURS = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#000000',
  '#F0E442', '#7F7F7F', '#8C564B', '#17BECF', '#BCBD22'];

// Every chart drawn, by name, so that scripts and the browser tests can read what
// a chart holds (its uPlot instance: series labels and data).
const instances = new Map();

// A spec's size: its own width, else the page's up to 960 px.
function sizeOf(el, spec, height) {
  const page = el.parentElement ? el.parentElement.clientWidth - 16 : 720;
  return { width: spec.width || Math.max(320, Math.min(page, 960)), height: spec.height || height };
}

function tickFormat(log) {
  return (u, values) => values.map((v) => (v === null || v === undefined ? '' :
    (log || Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0)) ? Number(v).toExponential(1) :
      String(Number(v.toPrecision(4)))));
}

function axes(spec) {
  return [
    { label: spec.xlabel || '', values: tickFormat(spec.logx), size: 40 },
    { label: spec.ylabel || '', values: tickFormat(false), size: 64 },
  ];
}

function register(el, name, u) {
  if (instances.has(name)) instances.get(name).destroy();
  instances.set(name, u);
  el.dataset.chart = name;
}

// Curves that share one x column (a job's curves): spec = {name, x: [...],
// series: [{label, values}], xlabel, ylabel, logx, logy, width, height}. Nulls are gaps
// that the line spans (evaluations sit on few rows of the curve).
function line(el, spec) {
  const opts = {
    ...sizeOf(el, spec, 260),
    scales: { x: { time: false, distr: spec.logx ? 3 : 1 }, y: { distr: spec.logy ? 3 : 1 } },
    axes: axes(spec),
    series: [{ label: spec.xlabel || 'x' }, ...spec.series.map((s, i) => ({
      label: s.label, stroke: s.colour || COLOURS[i % COLOURS.length], width: 1.5, spanGaps: true,
      // Sparse series (evaluations: a few rows of the curve) get dots as well.
      points: { show: s.values.filter((v) => v !== null && v !== undefined).length <= 100, size: 6 },
    }))],
    legend: { live: true },
  };
  const u = new uPlot(opts, [spec.x, ...spec.series.map((s) => s.values)], el);
  register(el, spec.name, u);
  return u;
}

// A linear scale's range over [min, max] with 5% to spare; a single value
// (every run at one sparsity) gets 20% of itself on each side.
function padded(u, min, max) {
  if (min === null || max === null) return [0, 1];
  if (min === max) {
    const pad = Math.abs(min) * 0.2 || 1;
    return [min - pad, max + pad];
  }
  const pad = 0.05 * (max - min);
  return [min - pad, max + pad];
}

// A paths builder that draws series `si` as filled dots of `size` px (uPlot's
// faceted mode draws no points of its own); dots outside the scales are skipped.
function dots(colour, size) {
  return (u, si) => {
    const [xs, ys] = u.data[si];
    const sx = u.scales.x, sy = u.scales.y;
    const r = (size / 2) * devicePixelRatio;
    const path = new Path2D();
    for (let i = 0; i < xs.length; i++) {
      const x = xs[i], y = ys[i];
      if (x === null || y === null || x < sx.min || x > sx.max || y < sy.min || y > sy.max) continue;
      const cx = u.valToPos(x, 'x', true), cy = u.valToPos(y, 'y', true);
      path.moveTo(cx + r, cy);
      path.arc(cx, cy, r, 0, 2 * Math.PI);
    }
    u.ctx.save();
    u.ctx.fillStyle = colour;
    u.ctx.fill(path);
    u.ctx.restore();
    return null;
  };
}

// Series each with its own x values (overlaid curves, scatter plots, law lines):
// spec = {name, series: [{label, x, y, colour, kind: 'line'|'points'|'both',
// dash, size, width}], xlabel, ylabel, logx, logy, width, height, legend} (legend:
// false when the page draws its own). uPlot's faceted mode.
function facets(el, spec) {
  const series = spec.series.filter((s) => s.x.length);
  if (!series.length) {
    el.innerHTML = '<p class="nocharts">no points yet</p>';
    return null;
  }
  const opts = {
    mode: 2,
    ...sizeOf(el, spec, 320),
    scales: { x: { time: false, distr: spec.logx ? 3 : 1, range: spec.logx ? undefined : padded },
      y: { distr: spec.logy ? 3 : 1, range: spec.logy ? undefined : padded } },
    axes: axes(spec),
    legend: { show: spec.legend !== false, live: false },
    series: [{}, ...series.map((s, i) => {
      const colour = s.colour || COLOURS[i % COLOURS.length];
      const line = uPlot.paths.linear(), dot = dots(colour, s.size || 7);
      const paths = s.kind === 'points' ? dot
        : s.kind === 'both' ? (u, si, i0, i1) => { dot(u, si); return line(u, si, i0, i1); } : line;
      return {
        label: s.label,
        stroke: colour,
        width: s.kind === 'points' ? 0 : (s.width || 1.5),
        dash: s.dash,
        facets: [{ scale: 'x', auto: true }, { scale: 'y', auto: true }],
        paths,
        points: { show: false },
      };
    })],
  };
  const u = new uPlot(opts, [null, ...series.map((s) => [s.x, s.y])], el);
  register(el, spec.name, u);
  return u;
}

// The data of the chart `name` as plain arrays: {labels, data} where data[i] is
// series i's [x, y] (faceted) or its y column with data[0] the shared x.
function read(name) {
  const u = instances.get(name);
  if (!u) return null;
  return { mode: u.mode || 1, labels: u.series.map((s) => s.label), data: u.data };
}

// Charts whose element left the page (a new route) are freed.
function prune() {
  for (const [name, u] of instances) {
    if (!document.body.contains(u.root)) {
      u.destroy();
      instances.delete(name);
    }
  }
}

window.XmodCharts = { line, facets, read, prune, colours: COLOURS };
