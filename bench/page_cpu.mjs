// bench/page_cpu.mjs - the server CPU the monitor page's requests take:
// with nothing decoding (compute threads asleep), the server process's CPU
// seconds (/proc/PID/stat, user + system) over --window-s seconds with the
// page open in headless Chromium (Debian's, through playwright-core of
// tests/e2e) against the same window with it on about:blank, alternating.
//
//   node bench/page_cpu.mjs --url http://127.0.0.1:8080 --pid PID [--window-s 10] [--windows 6] [--json]
//
// Reported: the server's CPU milliseconds per second in each condition
// (medians) and the difference, the page's share of 2 cores.
import { parseArgs } from 'node:util';
import { readFileSync } from 'node:fs';

const { values: a } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' },
  pid: { type: 'string' },
  'window-s': { type: 'string', default: '10' },
  windows: { type: 'string', default: '6' },
  chromium: { type: 'string', default: '/usr/bin/chromium' },
  json: { type: 'boolean', default: false },
} });
if (!a.pid) {
  console.error('--pid PID (of the polykv serve process) is required');
  process.exit(2);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => { const s = [...xs].sort((x, y) => x - y); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const cpu = () => {
  const f = readFileSync(`/proc/${a.pid}/stat`, 'utf8');
  const x = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(x[11]) + Number(x[12])) * 10;   // ms (USER_HZ 100)
};
const { chromium } = await import(new URL('../tests/e2e/node_modules/playwright-core/index.mjs', import.meta.url));
const browser = await chromium.launch({ executablePath: a.chromium, headless: true, args: ['--no-sandbox'] });
const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
const res = { closed: [], open: [] };
for (let w = 0; w < Number(a.windows); w++) {
  const open = w % 2 === 1;
  if (open) {
    await page.goto(a.url + '/');
    await page.waitForSelector('#live.on');
  } else {
    await page.goto('about:blank');
  }
  await sleep(1000);
  const t0 = performance.now(), c0 = cpu();
  await sleep(Number(a['window-s']) * 1000);
  const msPerS = ((cpu() - c0) * 1000) / (performance.now() - t0);
  res[open ? 'open' : 'closed'].push(msPerS);
  if (!a.json) console.log(`window ${w + 1} page ${open ? 'open  ' : 'closed'}: server ${msPerS.toFixed(2)} ms CPU / s`);
}
await browser.close();
const out = { closed_ms_per_s: median(res.closed), open_ms_per_s: median(res.open) };
out.page_ms_per_s = out.open_ms_per_s - out.closed_ms_per_s;
out.share_of_2_cores = out.page_ms_per_s / 2000;
console.log(a.json ? JSON.stringify(out) :
  `server CPU: closed ${out.closed_ms_per_s.toFixed(2)} ms/s, open ${out.open_ms_per_s.toFixed(2)} ms/s; ` +
  `the page ${out.page_ms_per_s.toFixed(2)} ms/s = ${(100 * out.share_of_2_cores).toFixed(3)} % of 2 cores`);
process.exit(0);
