// bench/page_overhead.mjs - what the monitor page at / costs the server:
// aggregate decode tok/s of N streamed sessions with the page closed and
// open (headless Chromium from Debian, through playwright-core of
// tests/e2e), in alternating windows so that both orders (closed then open,
// open then closed) are measured.
//
//   node bench/page_overhead.mjs --url http://127.0.0.1:8080 [--sessions 16] [--window-s 10] [--windows 6]
//                                [--warmup-s 15] [--mode browser|requests] [--json]
//
// --mode requests replaces the browser by the page's requests alone, made
// from here (the SSE stream, the three polls twice a second, the policy
// every 2 s): what the server pays, without Chromium's own CPU on the same
// cores.
//
// Tokens are counted as the clients receive them (one SSE event each);
// a session that ends (its context full) is started again at once.  The
// first window is "closed" (the browser on about:blank), then they
// alternate.  Reported: the median tok/s of each condition, their ratio,
// and the median over adjacent windows of open / closed (each closed->open
// and open->closed step once: slow drift of a shared machine cancels).
//
// --pid PID (of the server, started with --metrics) also accounts the page's
// cost directly, which other load on the machine does not blur: per window,
// the CPU of the server's threads other than the engine and compute ones
// (the HTTP threads: the process total from /proc/PID/stat, which keeps the
// time of exited connection threads, minus the threads named pk-engine and
// pk-compute), and the engine thread's time answering control messages and
// publishing (polykv:engine_control_seconds_total), during which no batch
// runs.  The page's cost bound is (open - closed) of
//   control ms/s / 1000 + HTTP CPU ms/s / (1000 x --cores)
// i.e. the share of the decode pipeline the engine spent on it plus the
// share of the compute cores the HTTP threads took.
import { parseArgs } from 'node:util';
import { readFileSync, readdirSync } from 'node:fs';

const { values: a } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' },
  sessions: { type: 'string', default: '16' },
  'window-s': { type: 'string', default: '10' },
  windows: { type: 'string', default: '6' },
  'warmup-s': { type: 'string', default: '15' },
  chromium: { type: 'string', default: '/usr/bin/chromium' },
  mode: { type: 'string', default: 'browser' },
  pid: { type: 'string' },
  cores: { type: 'string', default: '2' },
  json: { type: 'boolean', default: false },
} });
const url = a.url, nSess = Number(a.sessions), windowMs = Number(a['window-s']) * 1000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => { const s = [...xs].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const { chromium } = await import(new URL('../tests/e2e/node_modules/playwright-core/index.mjs', import.meta.url));

/* CPU ms (USER_HZ 100) of a /proc stat line: utime + stime. */
const ticks = (path) => { const f = readFileSync(path, 'utf8'); const x = f.slice(f.lastIndexOf(')') + 2).split(' '); return (Number(x[11]) + Number(x[12])) * 10; };
async function cost() {
  if (!a.pid) return null;
  let total = ticks(`/proc/${a.pid}/stat`), engine = 0;
  for (const tid of readdirSync(`/proc/${a.pid}/task`)) {
    try {
      const comm = readFileSync(`/proc/${a.pid}/task/${tid}/comm`, 'utf8').trim();
      if (comm === 'pk-engine' || comm === 'pk-compute') {
        const t = ticks(`/proc/${a.pid}/task/${tid}/stat`);
        total -= t;
        if (comm === 'pk-engine') engine += t;
      }
    } catch {}
  }
  const m = (await (await fetch(url + '/metrics')).text()).match(/^polykv:engine_control_seconds_total (\S+)$/m);
  return { http_ms: total, control_ms: m ? Number(m[1]) * 1000 : NaN, t: performance.now() };
}

let tokens = 0, stop = false;
async function session(k) {
  while (!stop) {
    try {
      const r = await fetch(url + '/completion', { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: `Page overhead bench, agent ${k}. ` + 'tool plan file '.repeat(20), n_predict: 100000,
                               ignore_eos: true, stream: true, session_id: `bench-${k}` }) });
      const dec = new TextDecoder();
      for await (const chunk of r.body) {
        const s = dec.decode(chunk, { stream: true });
        for (let i = s.indexOf('data: '); i >= 0; i = s.indexOf('data: ', i + 6)) tokens++;
        if (stop) break;
      }
    } catch { await sleep(100); }
  }
}
const workers = Array.from({ length: nSess }, (_, k) => session(k));
for (;;) {   /* until every session decodes */
  const t = await (await fetch(url + '/polykv/tps')).json();
  if (t.sessions.filter((s) => s.state === 'decode').length >= nSess) break;
  await sleep(200);
}
await sleep(Number(a['warmup-s']) * 1000);   /* past the weights' copy into huge pages */

// The page's own requests, as app.js makes them (mode requests).
function pageRequests() {
  const ac = new AbortController();
  const loop = async () => {
    const r = await fetch(url + '/polykv/tps?stream=1&interval_ms=500', { signal: ac.signal });
    (async () => { for await (const _ of r.body); })().catch(() => {});
    for (let turn = 0; !ac.signal.aborted; turn++) {
      const t0 = performance.now();
      if (turn % 4 === 0) await (await fetch(url + '/polykv/admission', { signal: ac.signal })).json();
      await Promise.all(['/polykv/pools', '/polykv/cache', '/slots'].map(async (p) => (await fetch(url + p, { signal: ac.signal })).json()));
      await sleep(Math.max(500 - (performance.now() - t0), 50));
    }
  };
  loop().catch(() => {});
  return ac;
}
const browser = a.mode === 'browser' ? await chromium.launch({ executablePath: a.chromium, headless: true, args: ['--no-sandbox'] }) : null;
const page = browser ? await browser.newPage({ viewport: { width: 1280, height: 1000 } }) : null;
let client = null;
const res = { closed: [], open: [] }, ratios = [], acct = { closed: [], open: [] };
let prev = null;
for (let w = 0; w < Number(a.windows); w++) {
  const open = w % 2 === 1;
  if (page && open) {
    await page.goto(url + '/');
    await page.waitForSelector('#live.on');
  } else if (page) {
    await page.goto('about:blank');
  } else if (open) {
    client = pageRequests();
  } else if (client) {
    client.abort();
  }
  await sleep(500);   /* its first polls and renders, or its connections closing */
  const c0 = await cost(), t0 = performance.now(), n0 = tokens;
  await sleep(windowMs);
  const tps = ((tokens - n0) * 1000) / (performance.now() - t0);
  const c1 = await cost();
  res[open ? 'open' : 'closed'].push(tps);
  if (c0) {
    const dt = (c1.t - c0.t) / 1000;
    acct[open ? 'open' : 'closed'].push({ http: (c1.http_ms - c0.http_ms) / dt, control: (c1.control_ms - c0.control_ms) / dt });
  }
  // each window against the one before: open/closed and closed/open pairs
  if (prev != null) ratios.push(open ? tps / prev : prev / tps);
  prev = tps;
  if (!a.json) console.log(`window ${w + 1} page ${open ? 'open  ' : 'closed'}: ${tps.toFixed(1)} tok/s`);
}
stop = true;
if (browser) await browser.close();
if (client) client.abort();
const out = { mode: a.mode, sessions: nSess, window_s: windowMs / 1000, closed_tps: res.closed, open_tps: res.open,
              closed_median: median(res.closed), open_median: median(res.open), pair_ratio_median: median(ratios),
              n_pairs: ratios.length };
out.ratio = out.open_median / out.closed_median;
if (a.pid) {
  const m = (c, k) => median(acct[c].map((x) => x[k]));
  out.http_ms_per_s = { closed: m('closed', 'http'), open: m('open', 'http') };
  out.control_ms_per_s = { closed: m('closed', 'control'), open: m('open', 'control') };
  out.page_cost_bound = (out.control_ms_per_s.open - out.control_ms_per_s.closed) / 1000 +
                        (out.http_ms_per_s.open - out.http_ms_per_s.closed) / (1000 * Number(a.cores));
}
console.log(a.json ? JSON.stringify(out) :
  `median closed ${out.closed_median.toFixed(1)} tok/s, open ${out.open_median.toFixed(1)} tok/s, ` +
  `open/closed ${out.ratio.toFixed(4)}; median of ${ratios.length} adjacent-window ratios open/closed ${out.pair_ratio_median.toFixed(4)}` +
  (a.pid ? `\nHTTP threads ${out.http_ms_per_s.closed.toFixed(1)} -> ${out.http_ms_per_s.open.toFixed(1)} ms CPU/s, ` +
           `engine control ${out.control_ms_per_s.closed.toFixed(2)} -> ${out.control_ms_per_s.open.toFixed(2)} ms/s: ` +
           `the page costs at most ${(100 * out.page_cost_bound).toFixed(3)} % of decode` : ''));
process.exit(0);
