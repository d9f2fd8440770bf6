// bench/page_frames.mjs - what the monitor page costs the browser with many
// sessions: N streamed sessions decode (ignore_eos, restarted when their
// context fills) while the page is open in headless Chromium (Debian's,
// through playwright-core of tests/e2e); over --window-s seconds it takes
// the main thread's busy time (CDP Performance.getMetrics TaskDuration,
// ScriptDuration, LayoutDuration), the frames drawn (requestAnimationFrame)
// and the gaps between them, and the long tasks (> 50 ms).
//
//   node bench/page_frames.mjs --url http://127.0.0.1:8080 [--sessions 64] [--window-s 10] [--json]
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' },
  sessions: { type: 'string', default: '64' },
  'window-s': { type: 'string', default: '10' },
  chromium: { type: 'string', default: '/usr/bin/chromium' },
  json: { type: 'boolean', default: false },
} });
const url = a.url, nSess = Number(a.sessions), windowMs = Number(a['window-s']) * 1000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const { chromium } = await import(new URL('../tests/e2e/node_modules/playwright-core/index.mjs', import.meta.url));

let stop = false;
async function session(k) {
  while (!stop) {
    try {
      const r = await fetch(url + '/completion', { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: `Frames bench, agent ${k}.`, n_predict: 100000, ignore_eos: true, stream: true,
                               session_id: `frames-${k}` }) });
      for await (const _ of r.body) if (stop) break;
    } catch { await sleep(100); }
  }
}
for (let k = 0; k < nSess; k++) session(k);
for (;;) {
  const t = await (await fetch(url + '/polykv/tps')).json();
  if (t.sessions.length >= nSess) break;
  await sleep(200);
}

const browser = await chromium.launch({ executablePath: a.chromium, headless: true, args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
await page.goto(url + '/');
await page.waitForSelector('#live.on');
await sleep(2000);
const cdp = await page.context().newCDPSession(page);
await cdp.send('Performance.enable');
const metrics = async () => Object.fromEntries((await cdp.send('Performance.getMetrics')).metrics.map((m) => [m.name, m.value]));
const m0 = await metrics();
const frames = await page.evaluate((ms) => new Promise((resolve) => {
  const gaps = [], long = [];
  new PerformanceObserver((l) => { for (const e of l.getEntries()) long.push(e.duration); }).observe({ type: 'longtask' });
  let last = performance.now();
  const t0 = last;
  const tick = (t) => {
    gaps.push(t - last);
    last = t;
    if (t - t0 < ms) requestAnimationFrame(tick);
    else resolve({ gaps, long, rows: document.querySelectorAll('#sess-body tr').length });
  };
  requestAnimationFrame(tick);
}), windowMs);
const m1 = await metrics();
stop = true;
await browser.close();
const s = windowMs / 1000, g = [...frames.gaps].sort((x, y) => x - y);
const out = {
  sessions: nSess, rows: frames.rows, window_s: s,
  busy_ms_per_s: ((m1.TaskDuration - m0.TaskDuration) * 1000) / s,
  script_ms_per_s: ((m1.ScriptDuration - m0.ScriptDuration) * 1000) / s,
  layout_ms_per_s: ((m1.LayoutDuration - m0.LayoutDuration) * 1000) / s,
  frames_per_s: frames.gaps.length / s,
  frame_gap_p50_ms: g[g.length >> 1], frame_gap_p99_ms: g[Math.floor(g.length * 0.99)], frame_gap_max_ms: g[g.length - 1],
  frames_over_50ms: g.filter((x) => x > 50).length, long_tasks: frames.long.length,
  long_task_max_ms: frames.long.length ? Math.max(...frames.long) : 0,
};
console.log(a.json ? JSON.stringify(out) : Object.entries(out).map(([k, v]) => `${k} ${typeof v === 'number' ? +v.toFixed(2) : v}`).join('\n'));
process.exit(0);
