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
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' },
  sessions: { type: 'string', default: '16' },
  'window-s': { type: 'string', default: '10' },
  windows: { type: 'string', default: '6' },
  'warmup-s': { type: 'string', default: '15' },
  chromium: { type: 'string', default: '/usr/bin/chromium' },
  mode: { type: 'string', default: 'browser' },
  json: { type: 'boolean', default: false },
} });
const url = a.url, nSess = Number(a.sessions), windowMs = Number(a['window-s']) * 1000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => { const s = [...xs].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const { chromium } = await import(new URL('../tests/e2e/node_modules/playwright-core/index.mjs', import.meta.url));

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
const res = { closed: [], open: [] }, ratios = [];
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
  const t0 = performance.now(), n0 = tokens;
  await sleep(windowMs);
  const tps = ((tokens - n0) * 1000) / (performance.now() - t0);
  res[open ? 'open' : 'closed'].push(tps);
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
console.log(a.json ? JSON.stringify(out) :
  `median closed ${out.closed_median.toFixed(1)} tok/s, open ${out.open_median.toFixed(1)} tok/s, ` +
  `open/closed ${out.ratio.toFixed(4)}; median of ${ratios.length} adjacent-window ratios open/closed ${out.pair_ratio_median.toFixed(4)}`);
process.exit(0);
