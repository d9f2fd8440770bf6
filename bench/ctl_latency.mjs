// bench/ctl_latency.mjs - how fast control routes answer while sessions
// decode: GET /polykv/pools/{id}/capacity round trips, and how late the
// /polykv/tps SSE stream's events come against their schedule.
//
//   node bench/ctl_latency.mjs --url http://127.0.0.1:8080 [--sessions 8] [--n 200] [--json]
//
// --sessions streamed completions decode on one pool (ignore_eos, long)
// while --n capacity requests go one after the other; then an SSE stream
// with interval_ms=100 runs for 5 s and each event's lateness against
// start + k x 100 ms is taken.  Reported: p50 / p90 / max in ms.
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' },
  sessions: { type: 'string', default: '8' },
  n: { type: 'string', default: '200' },
  json: { type: 'boolean', default: false },
} });
const url = a.url;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const q = (xs, p) => { const s = [...xs].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };

const pool = (await (await fetch(url + '/polykv/pools', { method: 'POST', headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ prompt: 'Control latency bench. ' + 'tool plan file '.repeat(50) }) })).json()).pool_id;
const acs = [];
for (let k = 0; k < Number(a.sessions); k++) {
  const ac = new AbortController();
  acs.push(ac);
  fetch(url + '/completion', { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'Control latency bench. ' + 'tool plan file '.repeat(50) + ' agent ' + k, pool_id: pool,
                           n_predict: 100000, ignore_eos: true, stream: true }) })
    .then(async (r) => { for await (const _ of r.body); }).catch(() => {});
}
for (;;) {   /* until every session decodes */
  const t = await (await fetch(url + '/polykv/tps')).json();
  if (t.sessions.filter((s) => s.state === 'decode').length >= Number(a.sessions)) break;
  await sleep(100);
}
const cap = [];
for (let i = 0; i < Number(a.n); i++) {
  const t0 = performance.now();
  const r = await fetch(url + `/polykv/pools/${pool}/capacity?expected_tokens=200`);
  await r.json();
  cap.push(performance.now() - t0);
}
const late = [];
{
  const ac = new AbortController();
  const r = await fetch(url + '/polykv/tps?stream=1&interval_ms=100', { signal: ac.signal });
  const t0 = performance.now();
  let k = 0, buf = '';
  const dec = new TextDecoder();
  setTimeout(() => ac.abort(), 5000);
  try {
    for await (const chunk of r.body) {
      const now = performance.now();
      buf += dec.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        buf = buf.slice(i + 2);
        late.push(now - (t0 + k * 100));
        k++;
      }
    }
  } catch {}
}
const steps = await (await fetch(url + '/polykv/tps')).json();
for (const ac of acs) ac.abort();
const out = { sessions: Number(a.sessions), aggregate_tps: steps.aggregate_tps, mean_active_tps: steps.mean_active_tps,
  capacity_ms: { p50: q(cap, 0.5), p90: q(cap, 0.9), max: Math.max(...cap) },
  sse_late_ms: { p50: q(late, 0.5), p90: q(late, 0.9), max: Math.max(...late), n: late.length } };
if (a.json) console.log(JSON.stringify(out));
else console.log(`${out.sessions} sessions decoding (${out.mean_active_tps.toFixed(1)} tok/s each): capacity ` +
  `p50 ${out.capacity_ms.p50.toFixed(2)} ms, p90 ${out.capacity_ms.p90.toFixed(2)}, max ${out.capacity_ms.max.toFixed(1)}; ` +
  `SSE lateness p50 ${out.sse_late_ms.p50.toFixed(2)} ms, p90 ${out.sse_late_ms.p90.toFixed(2)} (${out.sse_late_ms.n} events)`);
await fetch(url + `/polykv/pools/${pool}`, { method: 'DELETE' });
