// app.js - the monitor page (docs/monitor.md).
//
// Data: one SSE stream (/polykv/tps?stream=1, every 500 ms) drives the
// throughput chart and the sessions; one poll loop, at most twice a second
// and paused while the tab is hidden, reads /polykv/pools, /polykv/cache and
// /slots (the tree, the KV bar, the events), the selected pool's capacity,
// and the server's admission policy (the floor) every fourth turn.  The API
// key, when the server has one, is typed once and kept in sessionStorage.
//
// Rendering keeps the DOM: rows and canvases are made once per session or
// event and updated in place, so 64 sessions at 2 Hz cost a few
// milliseconds a second.
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import './style.css';

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const fmt = (x, d = 1) => (x == null || !isFinite(x) ? '–' : Number(x).toFixed(d));

const POLL_MS = 500;          // the JSON routes, at most twice a second
const SPARK_S = 300;          // sparkline window: the last five minutes
const CHART_S = 600;          // throughput chart window
const CHART_MIN_S = 120;      // its time axis spans at least this much
const DONE_KEEP_MS = 60000;   // a finished session's row stays at least this long
const MAX_EVENTS = 1000;

/* ---- API key and requests ---- */

const KEY = 'polykv.apikey';
let apiKey = sessionStorage.getItem(KEY) || '';
let keyEpoch = 0;             // bumped when the key changes: streams restart

class AuthError extends Error {}

function authHeaders(extra = {}) {
  return apiKey ? { ...extra, authorization: 'Bearer ' + apiKey } : extra;
}

function needKey(on) {
  const banner = $('key-needed');
  if (on && banner.hidden) $('key').focus();     // once, not on every refused poll
  banner.hidden = !on;
}

async function api(path, opts = {}) {
  const r = await fetch(path, { ...opts, headers: authHeaders(opts.headers) });
  if (r.status === 401) {
    needKey(true);
    throw new AuthError('API key needed');
  }
  const j = await r.json().catch(() => null);
  if (!r.ok) {
    const e = new Error((j && j.error && j.error.message) || `HTTP ${r.status}`);
    e.status = r.status;
    throw e;
  }
  return j;
}

$('key').value = apiKey;
$('key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  apiKey = $('key').value.trim();
  if (apiKey) sessionStorage.setItem(KEY, apiKey);
  else sessionStorage.removeItem(KEY);
  needKey(false);
  keyEpoch++;
  if (tpsAbort) tpsAbort.abort();
});

/* ---- theme ---- */

$('theme').addEventListener('click', () => {
  const t = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
  document.documentElement.dataset.theme = t;
  try { localStorage.setItem('polykv.theme', t); } catch {}
  makeChart();
  renderDecisionLegend();
  for (const s of sessions.values()) if (s.visible) drawSpark(s); else s.stale = true;
});
const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

/* ---- state ---- */

const tp = { t: [], agg: [], mean: [], floor: [] };   // the chart's columns (t in s)
const sessions = new Map();     // key -> { key, slot, row, cells, canvas, hist: [[t_s, tps, warming]], done_ms }
const events = new Map();       // key -> event, with its row
let pools = [];                 // the last /polykv/pools .pools
let floorServer = null;         // target tok/s of the server scope, null when none
let selectedPool = null;
let lastTps = null;
const decisions = [];           // [t_s, decision] from admission_decision events

/* The floor a session is held to: its pool's policy, else the server's. */
function floorOf(poolId) {
  const p = poolId != null && pools.find((x) => x.pool_id === poolId);
  if (p && p.admission && p.admission.set) return p.admission.target_tps_per_session;
  return floorServer;
}

/* ---- throughput chart ---- */

const DECISION_COLORS = { admit: '--ok', warn: '--warn', hold: '--accent2', queue: '--accent2', reject: '--floor',
                          overcommit: '--muted' };
let chart = null;

/* The time axis: the last minutes, from the oldest point kept (CHART_S at
 * most) to the newest, never under CHART_MIN_S.  Read from the points, not
 * from uPlot's lo and hi: for a lone point on a time scale uPlot makes hi
 * 86,400,000 units past lo, from this year to three years on in seconds. */
function timeRange() {
  const n = tp.t.length, hi = n ? tp.t[n - 1] : Date.now() / 1000, lo = n ? tp.t[0] : hi;
  return [Math.min(lo, hi - CHART_MIN_S), hi];
}

/* The drawn time span, for readers that cannot see the canvas (and tests). */
function noteRange(u) {
  const el = $('tp-chart'), x0 = u.scales.x.min, x1 = u.scales.x.max;
  if (x0 == null || x1 == null) return;
  el.dataset.xMin = x0;
  el.dataset.xMax = x1;
  const hm = (t) => new Date(t * 1000).toLocaleTimeString();
  el.setAttribute('aria-label', `decode tok/s from ${hm(x0)} to ${hm(x1)}`);
}

function makeChart() {
  const el = $('tp-chart');
  if (chart) chart.destroy();
  const axis = { stroke: css('--muted'), grid: { stroke: css('--line'), width: 1 }, ticks: { stroke: css('--line') } };
  chart = new uPlot({
    width: Math.max(el.clientWidth, 200),
    height: 200,
    legend: { show: false },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true, range: timeRange }, y: { range: (u, lo, hi) => [0, Math.max(hi * 1.1, 1)] } },
    axes: [axis, { ...axis, label: 'tok/s', size: 50 }],
    series: [
      {},
      { label: 'aggregate decode', stroke: css('--accent'), width: 2 },
      { label: 'mean session', stroke: css('--accent2'), width: 2 },
      { label: 'floor', stroke: css('--floor'), width: 1.5, dash: [6, 4], spanGaps: false },
    ],
    hooks: { draw: [drawDecisions, noteRange] },
  }, [tp.t, tp.agg, tp.mean, tp.floor], el);
}

/* Admission decisions as ticks on the time axis, coloured by kind. */
function drawDecisions(u) {
  const ctx = u.ctx, top = u.bbox.top, h = u.bbox.height, x0 = u.scales.x.min, x1 = u.scales.x.max;
  ctx.save();
  ctx.lineWidth = 2 * devicePixelRatio;
  for (const [t, d] of decisions) {
    if (t < x0 || t > x1) continue;
    const x = u.valToPos(t, 'x', true);
    ctx.strokeStyle = css(DECISION_COLORS[d] || '--muted');
    ctx.beginPath();
    ctx.moveTo(x, top + h);
    ctx.lineTo(x, top + h - (d === 'reject' ? 18 : 10) * devicePixelRatio);
    ctx.stroke();
  }
  ctx.restore();
}

new ResizeObserver(() => chart && chart.setSize({ width: Math.max($('tp-chart').clientWidth, 200), height: 200 }))
  .observe($('tp-chart'));

function renderDecisionLegend() {
  const n = {};
  for (const [, d] of decisions) n[d] = (n[d] || 0) + 1;
  const series = [['aggregate decode', '--accent'], ['mean session', '--accent2'], ['floor', '--floor']];
  $('tp-decisions').innerHTML = series.map(([n, c]) => `<span><i style="background:${css(c)}"></i>${n}</span>`).join('') +
    '<span>· admission decisions:</span>' + (Object.keys(DECISION_COLORS)
    .map((d) => `<span data-decision="${d}"><i style="background:${css(DECISION_COLORS[d])}"></i>${d} ${n[d] || 0}</span>`)
    .join(''));
}

/* ---- SSE: /polykv/tps ---- */

let tpsAbort = null;

async function streamTps() {
  for (;;) {
    const epoch = keyEpoch;
    tpsAbort = new AbortController();
    try {
      const r = await fetch('/polykv/tps?stream=1&interval_ms=500', { headers: authHeaders(), signal: tpsAbort.signal });
      if (r.status === 401) {
        needKey(true);
        setLive(false, 'needs key');
        while (epoch === keyEpoch) await sleep(200);
        continue;
      }
      if (!r.ok || !r.body) throw new Error(`HTTP ${r.status}`);
      setLive(true);
      const reader = r.body.getReader(), dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          for (const line of block.split('\n')) if (line.startsWith('data: ')) onTps(JSON.parse(line.slice(6)));
        }
      }
    } catch (e) {
      if (e.name !== 'AbortError') setLive(false, 'reconnecting');
    }
    if (epoch === keyEpoch) await sleep(1000);
  }
}

function setLive(on, why) {
  const el = $('live');
  el.className = 'live ' + (on ? 'on' : 'off');
  el.textContent = on ? 'live' : why || 'offline';
}

function onTps(s) {
  lastTps = s;
  const t = s.ts / 1000;
  tp.t.push(t);
  tp.agg.push(s.aggregate_tps);
  tp.mean.push(s.mean_active_tps);
  tp.floor.push(floorServer);
  while (tp.t.length && tp.t[0] < t - CHART_S) for (const k in tp) tp[k].shift();
  $('tp-agg').textContent = fmt(s.aggregate_tps);
  $('tp-mean').textContent = fmt(s.mean_active_tps);
  $('tp-floor').textContent = floorServer == null ? 'none' : `${fmt(floorServer)} tok/s`;
  $('tp-run').textContent = s.n_running;
  $('tp-wait').textContent = s.n_waiting;
  $('tp-warm').textContent = s.n_warming;
  if (chart) chart.setData([tp.t, tp.agg, tp.mean, tp.floor]);
  updateSessions(s, t);
}

/* ---- sessions ---- */

function sessionKey(x) {
  return x.session_id ? 's:' + x.session_id : 'slot:' + x.slot;
}

// DOM writes only when the value changed: no style or layout work for
// rows that stay the same.
function setText(el, v) {
  v = String(v);
  if (el.textContent !== v) el.textContent = v;
}
function setHtml(el, html) {
  if (el.dataset.html !== html) {
    el.innerHTML = html;
    el.dataset.html = html;
  }
}

// Sparklines are drawn only while their row is in view (the table scrolls:
// with 64 sessions most rows are hidden); a row coming into view catches up.
const sparkSeen = new IntersectionObserver((entries) => {
  for (const en of entries) {
    const e = sessions.get(en.target.dataset.key);
    if (!e) continue;
    e.visible = en.isIntersecting;
    if (e.visible && e.stale) drawSpark(e);
  }
}, { root: $('sess-body').closest('.scroll') });

function newSessionRow(key) {
  const row = document.createElement('tr');
  row.dataset.key = key;
  const cells = {};
  for (const name of ['slot', 'session', 'pool', 'state', 'ctx', 'tps', 'spark']) {
    const td = document.createElement('td');
    if (name === 'tps') td.className = 'num';
    td.dataset.col = name;
    cells[name] = td;
    row.appendChild(td);
  }
  const canvas = document.createElement('canvas');
  canvas.className = 'spark';
  canvas.width = 180 * devicePixelRatio;
  canvas.height = 28 * devicePixelRatio;
  canvas.setAttribute('role', 'img');
  cells.spark.appendChild(canvas);
  sparkSeen.observe(row);
  return { key, row, cells, canvas, hist: [], done_ms: 0, visible: false, stale: true };
}

/* Rows never move, so the table never shifts under the reader: a finished
 * row stays DONE_KEEP_MS, then a new session takes its place, or it goes
 * once nothing follows it; a new session with no such place goes last. */
function updateSessions(s, t) {
  const now = Date.now();
  const body = $('sess-body');
  const seen = new Set();
  const fresh = [];
  for (const x of [...s.sessions].sort((a, b) => a.slot - b.slot)) {
    const key = sessionKey(x);
    seen.add(key);
    let e = sessions.get(key);
    if (!e) {
      e = newSessionRow(key);
      sessions.set(key, e);
      fresh.push(e);
    }
    const pool = s.pools.find((p) => p.pool_id === x.pool_id);
    e.slot = x.slot;
    e.pool = x.pool_id;
    e.done_ms = 0;
    e.settling = pool ? pool.settling : s.server_settling;
    e.hist.push([t, x.tps_ewma, x.warming]);
    while (e.hist.length && e.hist[0][0] < t - SPARK_S) e.hist.shift();
    const c = e.cells;
    if (e.row.className) e.row.className = '';
    if (e.row.dataset.state !== x.state) e.row.dataset.state = x.state;
    setText(c.slot, x.slot);
    setText(c.session, x.session_id || '–');
    setText(c.pool, x.pool_id == null ? '–' : '#' + x.pool_id);
    setHtml(c.state, `<span class="badge ${x.state}">${x.state}</span>` +
      (x.warming ? ' <span class="badge warm">warming</span>' : '') +
      (e.settling ? ' <span class="badge settling">settling</span>' : ''));
    setText(c.ctx, `${x.ctx_used} / ${x.ctx_total}`);
    setText(c.tps, fmt(x.tps_ewma));
    if (e.visible) drawSpark(e);
    else e.stale = true;
  }
  const finished = [];
  for (const [key, e] of sessions) {
    if (seen.has(key)) continue;
    if (!e.done_ms) {
      e.done_ms = now;
      e.row.className = 'done';
      e.row.dataset.state = 'done';
      setHtml(e.cells.state, '<span class="badge">done</span>');
    }
    if (now - e.done_ms > DONE_KEEP_MS) finished.push(e);
  }
  finished.sort((a, b) => a.done_ms - b.done_ms);
  const drop = (e) => {
    sparkSeen.unobserve(e.row);
    sessions.delete(e.key);
  };
  for (const e of fresh) {
    const old = finished.shift();
    if (old) {
      body.replaceChild(e.row, old.row);
      drop(old);
    } else {
      body.appendChild(e.row);
    }
  }
  for (let last = body.lastElementChild; last; last = body.lastElementChild) {
    const e = sessions.get(last.dataset.key);
    if (!e || !e.done_ms || now - e.done_ms <= DONE_KEEP_MS) break;
    last.remove();
    drop(e);
  }
  $('sess-empty').hidden = sessions.size > 0;
}

/* A session's tok/s over the last minutes: the line, warming stretches in
 * the warning colour, the floor dashed, settling as a tinted background. */
function drawSpark(e) {
  e.stale = false;
  const cv = e.canvas, ctx = cv.getContext('2d'), w = cv.width, h = cv.height, dpr = devicePixelRatio;
  ctx.clearRect(0, 0, w, h);
  const hist = e.hist;
  const floor = floorOf(e.pool);
  let top = 0;
  for (const p of hist) top = Math.max(top, p[1]);
  // A floor far above every sample is drawn on the top edge, not as a scale
  // that flattens the line.
  const max = (floor && floor < 3 * top ? Math.max(top, floor) : top) * 1.15 || 1;
  // The window grows with the session, from 15 s up to SPARK_S.
  const tEnd = hist.length ? hist[hist.length - 1][0] : 0;
  const span = Math.min(SPARK_S, Math.max(15, hist.length ? tEnd - hist[0][0] : 0)), t0 = tEnd - span;
  const X = (t) => ((t - t0) / span) * (w - 2) + 1, Y = (v) => Math.max(h - 2 - (v / max) * (h - 4), dpr);
  if (e.settling && !e.done_ms) {
    ctx.fillStyle = css('--warn') + '22';
    ctx.fillRect(0, 0, w, h);
  }
  if (floor) {
    ctx.strokeStyle = css('--floor');
    ctx.lineWidth = dpr;
    ctx.setLineDash([4 * dpr, 3 * dpr]);
    ctx.beginPath();
    ctx.moveTo(0, Y(floor));
    ctx.lineTo(w, Y(floor));
    ctx.stroke();
    ctx.setLineDash([]);
  }
  ctx.lineWidth = 1.5 * dpr;
  for (let i = 1; i < hist.length; i++) {
    ctx.strokeStyle = hist[i][2] ? css('--warn') : css('--accent');
    ctx.beginPath();
    ctx.moveTo(X(hist[i - 1][0]), Y(hist[i - 1][1]));
    ctx.lineTo(X(hist[i][0]), Y(hist[i][1]));
    ctx.stroke();
  }
  cv.dataset.points = hist.length;
  cv.dataset.last = hist.length ? hist[hist.length - 1][1] : 0;
  cv.dataset.floor = floor == null ? '' : floor;
  cv.setAttribute('aria-label', `tok/s over the last ${hist.length} samples, now ${fmt(cv.dataset.last)}` +
    (floor ? `, floor ${fmt(floor)}` : ''));
}

/* ---- pools ---- */

const mib = (b) => (b >= 1073741824 ? (b / 1073741824).toFixed(2) + ' GiB' : b >= 1048576 ? (b / 1048576).toFixed(1) + ' MiB'
  : b >= 1024 ? (b / 1024).toFixed(1) + ' KiB' : Math.round(b) + ' B');

function renderPools(list) {
  pools = list;
  const kids = new Map();
  for (const p of list) {
    const parent = list.some((q) => q.pool_id === p.parent) ? p.parent : 0;
    if (!kids.has(parent)) kids.set(parent, []);
    kids.get(parent).push(p);
  }
  const byId = new Map(list.map((p) => [p.pool_id, p]));
  // root (D = 0), extend (D = the parent's length), branch (D shorter): docs/pools.md
  const edge = (p) => {
    const up = byId.get(p.parent);
    if (!up) return 'root · ';
    return `${p.branch_pos >= up.prefix_len ? 'extend' : 'branch at ' + p.branch_pos} of #${p.parent} · `;
  };
  const node = (p) => {
    const sess = p.sessions.map((s) => esc(s.session_id || 'slot ' + s.slot)).join(', ');
    const badges = (p.pinned ? `<span class="badge pin">${p.auto_pinned ? 'auto-pinned' : 'pinned'}</span>` : '') +
      (p.orphaned_pin ? '<span class="badge orphan" title="pinned, but no session has used it">⚠ orphaned pin</span>' : '') +
      (p.settling ? '<span class="badge settling">settling</span>' : '');
    const sub = kids.get(p.pool_id) || [];
    return `<li role="treeitem" aria-expanded="${sub.length ? 'true' : 'false'}" data-pool="${p.pool_id}">` +
      `<button type="button" class="pool-btn" data-pool="${p.pool_id}" aria-selected="${p.pool_id === selectedPool}">` +
      `<b>#${p.pool_id}</b><span>${edge(p)}` +
      `${p.prefix_len} tokens (own ${p.own_tokens})</span>` +
      `<span>own ${mib(p.own_kv_bytes)} · subtree ${mib(p.subtree_kv_bytes)}</span>` +
      `<span>${esc(p.residency)}</span>${badges}` +
      `<span class="sess">${p.sessions.length} session${p.sessions.length === 1 ? '' : 's'}${sess ? ': ' + sess : ''}</span>` +
      `</button>${sub.length ? `<ul role="group">${sub.map(node).join('')}</ul>` : ''}</li>`;
  };
  const html = (kids.get(0) || []).map(node).join('');
  const tree = $('pool-tree');
  if (tree.dataset.html !== html) {
    const focused = document.activeElement && document.activeElement.dataset && document.activeElement.dataset.pool;
    tree.innerHTML = html;
    tree.dataset.html = html;
    if (focused) {
      const b = tree.querySelector(`button[data-pool="${focused}"]`);
      if (b) b.focus();
    }
  }
  $('pool-empty').hidden = list.length > 0;
  const sel = $('chat-pool'), have = [...sel.options].map((o) => o.value).join(','),
    want = ['', ...list.map((p) => String(p.pool_id))].join(',');
  if (have !== want) {
    const v = sel.value;
    sel.innerHTML = '<option value="">none</option>' + list.map((p) => `<option value="${p.pool_id}">#${p.pool_id} (${p.prefix_len} tokens)</option>`).join('');
    sel.value = list.some((p) => String(p.pool_id) === v) ? v : '';
  }
  if (selectedPool != null && !list.some((p) => p.pool_id === selectedPool)) {
    selectedPool = null;
    $('pool-detail').innerHTML = '<p class="muted">The pool was released.</p>';
  }
}

$('pool-tree').addEventListener('click', (ev) => {
  const b = ev.target.closest('button[data-pool]');
  if (!b) return;
  selectedPool = Number(b.dataset.pool);
  for (const x of $('pool-tree').querySelectorAll('button[data-pool]'))
    x.setAttribute('aria-selected', String(Number(x.dataset.pool) === selectedPool));
  $('pool-tree').dataset.html = '';
  refreshDetail().catch(() => {});
});

async function refreshDetail() {
  if (selectedPool == null) return;
  const id = selectedPool;
  const cap = await api(`/polykv/pools/${id}/capacity`);
  if (id !== selectedPool) return;
  const p = cap.policy || {};
  const row = (k, v) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`;
  $('pool-detail').innerHTML = `<h3>Pool #${id}</h3>` +
    `<p><span class="badge ${cap.can_admit ? 'decode' : 'reject'}">${cap.can_admit ? 'can admit' : 'cannot admit'}</span> ` +
    `<span data-field="reason">${esc(cap.reason)}</span></p><dl>` +
    row('projected mean tok/s', fmt(cap.projected_mean_tps_if_admitted)) +
    row('mean active tok/s', fmt(cap.mean_active_tps)) +
    row('active / warming', `${cap.n_active} / ${cap.n_warming}`) +
    row('headroom sessions', cap.headroom_sessions) +
    row('KV headroom', `${fmt(cap.kv_headroom_pct)} % (${cap.kv_free_cells} cells)`) +
    row('settling', cap.settling ? `yes, ${fmt(cap.settle_remaining_ms, 0)} ms left` : 'no') +
    row('retry after', `${fmt(cap.retry_after_s)} s`) +
    `</dl><h3>Admission policy${p.set ? '' : ' (not set: the defaults)'}</h3><dl>` +
    row('floor (target tok/s per session)', fmt(p.target_tps_per_session)) +
    row('mode', p.mode) + row('on saturation', p.on_saturation) +
    row('guaranteed sessions', p.guarantee_min_sessions) +
    row('settle', `${p.settle_tokens} tokens, at most ${p.settle_max_ms} ms`) +
    row('queue at most', `${p.queue_max_ms} ms`) + '</dl>';
}

/* ---- KV cache ---- */

function renderKv(poolsJson, cache, slots) {
  const cellBytes = cache.kv_total > 0 ? poolsJson.kv_bytes_total / cache.kv_total : 0;
  const cells = (b) => (cellBytes > 0 ? Math.round(b / cellBytes) : 0);
  const segs = [];
  for (const p of poolsJson.pools) if (p.own_kv_bytes > 0) segs.push({ cls: 'pool', name: `pool #${p.pool_id}`, bytes: p.own_kv_bytes });
  if (slots) {
    for (const s of slots) if (s.kv_owned_bytes > 0)
      segs.push({ cls: 'slot', name: `slot ${s.id}${s.session_id ? ' (' + s.session_id + ')' : ''}${s.pool_id ? ' on #' + s.pool_id : ''}`, bytes: s.kv_owned_bytes });
  } else {
    for (const p of poolsJson.pools) for (const s of p.sessions) if (s.marginal_kv_bytes > 0)
      segs.push({ cls: 'slot', name: `slot ${s.slot}`, bytes: s.marginal_kv_bytes });
  }
  if (poolsJson.parked_kv_bytes > 0) segs.push({ cls: 'parked', name: `parked histories (${cache.parked})`, bytes: poolsJson.parked_kv_bytes });
  const used = cache.kv_used, total = cache.kv_total;
  let sum = 0;
  for (const s of segs) sum += (s.cells = cells(s.bytes));
  segs.push({ cls: 'free', name: 'free', cells: Math.max(total - used, 0), bytes: Math.max(total - used, 0) * cellBytes });
  const bar = $('kv-bar');
  bar.dataset.used = used;
  bar.dataset.total = total;
  bar.dataset.owned = sum;
  setHtml(bar, segs.map((s) => `<div class="${s.cls}" data-cells="${s.cells}" style="width:${total ? (100 * s.cells) / total : 0}%" ` +
    `title="${esc(s.name)}: ${s.cells} cells, ${mib(s.bytes)}"></div>`).join(''));
  setHtml($('kv-legend'), segs.map((s) => `<li><i class="kvbar-${s.cls}" style="background:var(--seg-${s.cls === 'parked' ? 'park' : s.cls})"></i>` +
    `${esc(s.name)}: ${s.cells} cells, ${mib(s.bytes)}</li>`).join(''));
  setText($('kv-summary'), `${used} of ${total} cells used (${mib(used * cellBytes)} of ${mib(total * cellBytes)}); ` +
    `owners hold ${sum} cells`);
  setText($('kv-ram'), `RAM tier: ${cache.spilled} histor${cache.spilled === 1 ? 'y' : 'ies'}, ${cache.spilled_tokens} tokens, ` +
    `${fmt(cache.spilled_mib)} MiB · reused ${cache.tokens_reused} of ${cache.tokens_reused + cache.tokens_read} prompt tokens, ` +
    `restored ${cache.tokens_restored}`);
}

/* ---- events ---- */

const KIND_NAMES = { placement: 'placement', admission: 'prompt reuse', park: 'park', drop: 'drop',
                     admission_decision: 'admission' };

function eventText(e) {
  switch (e.kind) {
  case 'placement': return `placed: ${e.reason}`;
  case 'admission': return `reused ${e.tokens_reused} tokens from seq ${e.source_seq}, read ${e.tokens_read}` +
                           (e.reason ? ` (${e.reason})` : '');
  case 'park': return `parked seq ${e.seq}: ${e.tokens} tokens, value ${fmt(e.value, 2)}` + (e.reason ? ` (${e.reason})` : '');
  case 'drop': return `dropped seq ${e.seq}: ${e.tokens} tokens, value ${fmt(e.value, 2)}` + (e.reason ? ` (${e.reason})` : '');
  case 'admission_decision': return `${e.decision} on ${e.pool_id == null ? 'the server scope' : 'pool #' + e.pool_id}: ${e.reason}`;
  default: return e.reason || '';
  }
}

function addEvents(list) {
  const body = $('ev-body');
  let added = false;
  for (const e of list) {
    const key = [e.ts, e.kind, e.id_task, e.slot, e.seq, e.decision, e.reason].join('|');
    if (events.has(key)) continue;
    const tr = document.createElement('tr');
    tr.dataset.kind = e.kind;
    if (e.decision) tr.dataset.decision = e.decision;
    const what = eventText(e);
    const badge = e.kind === 'admission_decision' ? `<span class="badge ${e.decision === 'reject' ? 'reject' : ''}">${esc(e.decision)}</span> ` : '';
    tr.innerHTML = `<td>${new Date(e.ts).toLocaleTimeString()}</td><td>${esc(KIND_NAMES[e.kind] || e.kind)}</td>` +
      `<td>${e.id_task || '–'}</td><td>${e.slot >= 0 ? e.slot : '–'}</td><td class="what">${badge}${esc(what)}</td>`;
    tr.dataset.text = `${e.kind} ${KIND_NAMES[e.kind] || ''} task ${e.id_task} slot ${e.slot} ${what}`.toLowerCase();
    events.set(key, tr);
    // newest first; events arrive oldest first
    body.insertBefore(tr, body.firstChild);
    applyFilter(tr);
    if (e.kind === 'admission_decision') decisions.push([e.ts / 1000, e.decision]);
    added = true;
  }
  while (events.size > MAX_EVENTS) {
    const [k, tr] = events.entries().next().value;
    tr.remove();
    events.delete(k);
  }
  if (added) {
    decisions.sort((a, b) => a[0] - b[0]);
    while (decisions.length > MAX_EVENTS) decisions.shift();
    renderDecisionLegend();
    if (chart) chart.redraw(false, false);
  }
}

const kindsShown = () => new Set([...$('ev-filters').querySelectorAll('input[type=checkbox]:checked')].map((c) => c.value));
let shown = kindsShown(), text = '';
function applyFilter(tr) {
  tr.hidden = !shown.has(tr.dataset.kind) || (text && !tr.dataset.text.includes(text));
}
function refilter() {
  shown = kindsShown();
  text = $('ev-text').value.trim().toLowerCase();
  for (const tr of events.values()) applyFilter(tr);
}
$('ev-filters').addEventListener('change', refilter);
$('ev-text').addEventListener('input', refilter);

/* ---- the poll loop ---- */

async function poll() {
  for (let turn = 0; ; turn++) {
    const t0 = performance.now();
    if (!document.hidden) {
      try {
        if (turn % 4 === 0) {
          const adm = await api('/polykv/admission');
          floorServer = adm.set ? adm.target_tps_per_session : null;
        }
        const [pj, cache, slots] = await Promise.all([
          api('/polykv/pools'), api('/polykv/cache'), api('/slots').catch((e) => (e.status === 501 ? null : Promise.reject(e))),
        ]);
        renderPools(pj.pools);
        renderKv(pj, cache, slots);
        addEvents(cache.events);
        await refreshDetail();
        needKey(false);
      } catch {
        // shown by the stream's state (live / reconnecting); the next turn retries
      }
    }
    await sleep(Math.max(POLL_MS - (performance.now() - t0), 50));
  }
}

/* ---- Try it: a streaming chat ---- */

let chatMsgs = [];
let chatAbort = null;

function chatLine(role, content) {
  const p = document.createElement('p');
  p.className = 'msg ' + role;
  p.textContent = content;
  $('chat-log').appendChild(p);
  $('chat-log').scrollTop = $('chat-log').scrollHeight;
  return p;
}

async function sendChat() {
  const content = $('chat-input').value.trim();
  if (!content || chatAbort) return;
  $('chat-input').value = '';
  chatMsgs.push({ role: 'user', content });
  chatLine('user', content);
  const out = chatLine('assistant', '');
  const body = { model: 'polykv', messages: chatMsgs, stream: true, max_tokens: Number($('chat-max').value) || 64 };
  const pool = $('chat-pool').value;
  if (pool) body.pool_id = Number(pool);
  chatAbort = new AbortController();
  $('chat-send').textContent = 'Stop';
  const t0 = performance.now();
  let n = 0, reply = '', first = 0;
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', body: JSON.stringify(body), signal: chatAbort.signal,
      headers: authHeaders({ 'content-type': 'application/json' }),
    });
    if (r.status === 401) needKey(true);
    if (!r.ok) {
      const j = await r.json().catch(() => null);
      throw new Error((j && j.error && j.error.message) || `HTTP ${r.status}`);
    }
    const cached = r.headers.get('x-cached-prefix-tokens'), poolId = r.headers.get('x-pool-id');
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = '';
    outer: for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const line of block.split('\n')) {
          if (!line.startsWith('data: ')) continue;
          const data = line.slice(6);
          if (data === '[DONE]') break outer;
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message);
          const d = j.choices && j.choices[0] && j.choices[0].delta;
          if (d && d.content) {
            if (!first) first = performance.now();
            reply += d.content;
            n++;
            out.textContent = reply;
            out.dataset.chunks = n;
            $('chat-log').scrollTop = $('chat-log').scrollHeight;
          }
        }
      }
    }
    chatMsgs.push({ role: 'assistant', content: reply });
    const secs = (performance.now() - (first || t0)) / 1000;
    $('chat-status').textContent = `${n} chunks, first after ${fmt((first || performance.now()) - t0, 0)} ms, ` +
      `${fmt(n > 1 ? (n - 1) / secs : 0)} chunks/s` + (poolId ? ` · pool #${poolId}` : '') +
      (cached != null ? ` · ${cached} prompt tokens from the cache` : '');
  } catch (e) {
    if (e.name !== 'AbortError') {
      out.className = 'msg error';
      out.textContent = 'error: ' + e.message;
      chatMsgs.pop();
    } else {
      chatMsgs.push({ role: 'assistant', content: reply });
    }
  } finally {
    chatAbort = null;
    $('chat-send').textContent = 'Send';
  }
}

$('chat-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  if (chatAbort) chatAbort.abort();
  else sendChat();
});
$('chat-input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
    ev.preventDefault();
    sendChat();
  }
});
$('chat-clear').addEventListener('click', () => {
  if (chatAbort) chatAbort.abort();
  chatMsgs = [];
  $('chat-log').textContent = '';
  $('chat-status').textContent = '–';
});

/* ---- start ---- */

api('/v1/models').then((j) => {
  $('model').textContent = $('model').title = (j.data && j.data[0] && j.data[0].id) || '';
}).catch(() => {});
makeChart();
renderDecisionLegend();
streamTps();
poll();
