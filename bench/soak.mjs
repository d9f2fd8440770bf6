// bench/soak.mjs - a soak test of `polykv serve`: N concurrent streaming
// clients (default 8) for a while (default 120 s), a share of them
// disconnecting at random moments, with bad requests mixed in.
//
//   node bench/soak.mjs [--model PATH] [--bin build/polykv] [--duration 120]
//                       [--clients 8] [--slots 4] [--disconnect 0.3]
//                       [--mem-tolerance 0.05] [--no-memcheck]
//   node bench/soak.mjs --url URL [--pid PID] ...   (an already running server)
//
// Passes (exit 0) when:
//   - the server never dies and answers /health at the end;
//   - every response that completed is well formed: every SSE event is
//     JSON, OpenAI streams end with a finish_reason and `data: [DONE]`,
//     native streams end with a stop event whose tokens_predicted counts
//     the token events, whole responses parse and have their fields;
//   - bad requests get their 4xx and nothing else changes;
//   - no slot leaks: within 3 s of the last client, /slots shows every slot
//     idle and /metrics (when enabled) no request processing or deferred;
//   - memory is stable: the anonymous resident size (RssAnon, what a leak
//     grows; not the file-backed pages the kernel takes back when another
//     process needs memory) at the end at most 5% (--mem-tolerance) above
//     its size after warm-up (the first quarter of the run, 10 s at least).  Each is the median of the samples (every 0.5 s)
//     in a 5 s window: with a thread per connection, glibc's per-thread
//     malloc arenas make a small server's resident size wander by a few
//     percent from second to second without any trend, and one sample would
//     measure that wander.  Short runs still need a looser bound.  Each
//     window must hold at least 6 samples and the two must not overlap: a
//     run too short for that (under warm-up + 10 s), or an --url server
//     without --pid, fails the check rather than skipping it (pass
//     --no-memcheck to leave it out, said so in the summary).
// Prints one summary line; --json prints the numbers.

import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { rssKiB, startServer } from './serve.mjs';

const { values: a } = parseArgs({ options: {
  url: { type: 'string' },
  pid: { type: 'string' },
  model: { type: 'string', default: '../shared/models/stories260K.gguf' },
  bin: { type: 'string', default: process.env.POLYKV_BIN || 'build/polykv' },
  duration: { type: 'string', default: '120' },
  clients: { type: 'string', default: '8' },
  slots: { type: 'string', default: '4' },
  disconnect: { type: 'string', default: '0.3' },
  'mem-tolerance': { type: 'string', default: '0.05' },
  'no-memcheck': { type: 'boolean', default: false },
  json: { type: 'boolean', default: false },
} });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const duration = Number(a.duration) * 1000;
const pDisconnect = Number(a.disconnect);
const errors = [];
const fail = (msg) => {
  if (errors.length < 20) errors.push(msg);
};

let url = a.url, pid = a.pid ? Number(a.pid) : 0, proc = null, srv = null;
if (!url) {
  if (!existsSync(a.model)) {
    console.log(`soak: SKIP: ${a.model} not found`);
    process.exit(0);
  }
  srv = await startServer(a.bin, ['-m', a.model, '--port', '0', '-np', a.slots, '-c', String(1024 * Number(a.slots)),
    '-t', '1', '--metrics'], 'soak', fail);
  url = srv.url;
  proc = srv.proc;
  pid = proc.pid;
}

const rss = () => rssKiB(pid, 'RssAnon');

const words = 'Once upon a time there was a little girl named Lily who liked to play in the park with her dog';
const rand = (n) => Math.floor(Math.random() * n);
const stats = { completed: 0, disconnected: 0, bad: 0, tokens: 0, by: {} };

function makeRequest() {
  const prompt = words.split(' ').slice(0, 3 + rand(15)).join(' ') + (Math.random() < 0.5 ? ` ${rand(1000)}` : '');
  const max = 4 + rand(120);
  const stream = Math.random() < 0.85;
  switch (rand(3)) {
    case 0: return { kind: 'native', path: '/completion', stream,
      body: { prompt, n_predict: max, stream, n_probs: rand(3), ignore_eos: Math.random() < 0.5 } };
    case 1: return { kind: 'chat', path: '/v1/chat/completions', stream,
      body: { messages: [{ role: 'user', content: prompt }], max_tokens: max, stream,
        stream_options: stream ? { include_usage: true } : undefined, logprobs: Math.random() < 0.3 } };
    default: return { kind: 'cmpl', path: '/v1/completions', stream,
      body: { prompt, max_tokens: max, stream, stop: Math.random() < 0.3 ? ['.'] : undefined } };
  }
}

// Checks one finished stream's events; returns the tokens it carried.
function checkStream(req, events) {
  const where = `${req.kind} ${JSON.stringify(req.body).slice(0, 80)}`;
  if (req.kind === 'native') {
    const last = events[events.length - 1];
    if (!last || last.stop !== true) return fail(`${where}: no final stop event`), 0;
    const n = events.length - 1;
    if (last.tokens_predicted !== n) fail(`${where}: tokens_predicted ${last.tokens_predicted} != ${n} events`);
    if (typeof last.timings?.predicted_n !== 'number') fail(`${where}: no timings`);
    return n;
  }
  if (events[events.length - 1] !== '[DONE]') return fail(`${where}: no [DONE]`), 0;
  const objs = events.slice(0, -1);
  const finish = objs.flatMap((e) => e.choices ?? []).filter((c) => c.finish_reason);
  if (finish.length !== 1) fail(`${where}: ${finish.length} finish reasons`);
  const usage = objs.find((e) => e.usage)?.usage;
  if (req.body.stream_options && !usage) fail(`${where}: no usage chunk`);
  if (usage && usage.completion_tokens > req.body.max_tokens) fail(`${where}: more tokens than max_tokens`);
  for (const e of objs) if (!e.id || !e.object || !Array.isArray(e.choices)) fail(`${where}: malformed chunk`);
  return usage?.completion_tokens ?? 0;
}

function checkWhole(req, j) {
  const where = `${req.kind} (whole)`;
  if (req.kind === 'native') {
    if (j.stop !== true || typeof j.content !== 'string' || typeof j.tokens_predicted !== 'number')
      fail(`${where}: malformed ${JSON.stringify(j).slice(0, 200)}`);
    return j.tokens_predicted ?? 0;
  }
  if (!j.choices?.[0]?.finish_reason || !j.usage) fail(`${where}: malformed ${JSON.stringify(j).slice(0, 200)}`);
  return j.usage?.completion_tokens ?? 0;
}

async function oneRequest() {
  const req = makeRequest();
  const ac = new AbortController();
  const leave = Math.random() < pDisconnect;
  if (leave) setTimeout(() => ac.abort(), rand(200));
  try {
    const res = await fetch(url + req.path, { method: 'POST', signal: ac.signal,
      headers: { 'content-type': 'application/json' }, body: JSON.stringify(req.body) });
    if (res.status !== 200) return fail(`${req.kind}: HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`);
    if (!req.stream) {
      stats.tokens += checkWhole(req, JSON.parse(await res.text()));
    } else {
      const dec = new TextDecoder();
      let buf = '';
      const events = [];
      for await (const chunk of res.body) {
        buf += dec.decode(chunk, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (block.startsWith(':')) continue;                     /* a keep-alive comment */
          if (!block.startsWith('data: ')) return fail(`${req.kind}: not an SSE event: ${block.slice(0, 80)}`);
          const data = block.slice(6);
          if (data === '[DONE]') events.push(data);
          else {
            const e = JSON.parse(data);
            if (e.error) return fail(`${req.kind}: error event ${JSON.stringify(e.error)}`);
            events.push(e);
          }
        }
      }
      if (buf.trim()) fail(`${req.kind}: trailing bytes after the last event`);
      stats.tokens += checkStream(req, events);
    }
    stats.completed++;
    stats.by[req.kind] = (stats.by[req.kind] ?? 0) + 1;
  } catch (e) {
    if (leave && e.name === 'AbortError') stats.disconnected++;
    else if (leave && ac.signal.aborted) stats.disconnected++;
    else fail(`${req.kind}: ${e.message}`);
  }
}

const badRequests = [
  ['/completion', '{"prompt": "x",'],
  ['/v1/chat/completions', JSON.stringify({ messages: 'hi' })],
  ['/v1/completions', JSON.stringify({ prompt: 'x', n: 40 })],
  ['/completion', JSON.stringify({ prompt: [1, 2, 1e9] })],
  ['/completion', JSON.stringify({ prompt: 'x', temperature: 'warm' })],
];

async function badRequest() {
  const [path, body] = badRequests[rand(badRequests.length)];
  const r = await fetch(url + path, { method: 'POST', body }).catch((e) => ({ status: String(e) }));
  if (r.status !== 400) fail(`bad request ${path} ${body}: ${r.status}`);
  else stats.bad++;
  await r.text?.();
}

const memcheck = !a['no-memcheck'];
const t0 = Date.now();
const warm = Math.max(10000, duration / 4);
const MIN_SAMPLES = 6;   /* per 5 s window, sampled every 0.5 s */
if (memcheck && !pid) fail('the memory check needs the server\'s --pid (or --no-memcheck)');
if (memcheck && duration < warm + 10000)
  fail(`--duration ${duration / 1000} s is too short for the memory check: it needs ${(warm + 10000) / 1000} s ` +
       '(a 5 s window after the warm-up and another at the end), or --no-memcheck');
const samples = [];   // [ms since start, KiB]
const sampler = setInterval(() => {
  const k = rss();
  if (k > 0) samples.push([Date.now() - t0, k]);
}, 500);
const median = (xs) => (xs.length ? [...xs].sort((x, y) => x - y)[xs.length >> 1] : 0);

await Promise.all(Array.from({ length: Number(a.clients) }, async (_, c) => {
  while (Date.now() - t0 < duration) {
    if (c === 0 && Math.random() < 0.2) await badRequest();
    else await oneRequest();
  }
}));
clearInterval(sampler);
const tEnd = Date.now() - t0;
const inWarm = samples.filter(([t]) => t >= warm && t < warm + 5000).map(([, k]) => k);
const inEnd = samples.filter(([t]) => t >= Math.max(tEnd - 5000, warm + 5000)).map(([, k]) => k);
if (memcheck && pid && (inWarm.length < MIN_SAMPLES || inEnd.length < MIN_SAMPLES))
  fail(`memory check: ${inWarm.length} samples after warm-up and ${inEnd.length} at the end, ` +
       `${MIN_SAMPLES} needed in each (of ${samples.length} taken every 0.5 s)`);
const rssWarm = median(inWarm);
const rssEnd = median(inEnd);
const rssMax = Math.max(0, ...samples.filter(([t]) => t >= warm).map(([, k]) => k));

// No leaked slot.
let idle = false;
for (let t = 0; t < 3000 && !idle; t += 50) {
  const sl = await fetch(url + '/slots').then((r) => r.json()).catch(() => null);
  idle = Array.isArray(sl) && sl.every((s) => s.state === 'idle');
  if (!idle) await sleep(50);
}
if (!idle) fail('slots still busy 3 s after the last client');
const metrics = await fetch(url + '/metrics').then((r) => (r.status === 200 ? r.text() : '')).catch(() => '');
const gauge = (name) => Number(metrics.match(new RegExp(`^${name} (\\S+)$`, 'm'))?.[1] ?? 0);
if (gauge('llamacpp:requests_processing') !== 0 || gauge('llamacpp:requests_deferred') !== 0)
  fail('metrics still show requests in flight');
const h = await fetch(url + '/health').catch(() => null);
if (h?.status !== 200) fail('the server does not answer /health after the soak');

const growth = rssWarm ? (rssEnd - rssWarm) / rssWarm : 0;
if (memcheck && rssWarm && rssEnd && growth > Number(a['mem-tolerance']))
  fail(`anonymous resident memory grew ${(100 * growth).toFixed(1)}% after warm-up (${rssWarm} -> ${rssEnd} KiB)`);

if (proc && proc.exitCode === null && proc.signalCode === null) {
  const code = await srv.stop();
  if (code !== 0) fail(`server exit status ${code} at shutdown; its log:\n${srv.log().slice(-3000)}`);
}

const secs = (Date.now() - t0) / 1000;
const summary = { seconds: +secs.toFixed(1), clients: Number(a.clients), ...stats,
  rss_warm_kib: rssWarm, rss_max_kib: rssMax, rss_end_kib: rssEnd, rss_growth: +growth.toFixed(4), errors };
if (a.json) console.log(JSON.stringify(summary, null, 2));
console.log(`soak: ${errors.length ? 'FAIL' : 'ok'}: ${secs.toFixed(0)} s, ${a.clients} clients, ` +
  `${stats.completed} completed (${Object.entries(stats.by).map(([k, v]) => `${k} ${v}`).join(', ')}), ` +
  `${stats.disconnected} disconnected, ${stats.bad} bad requests refused, ${stats.tokens} tokens; ` +
  (memcheck ? `anonymous RSS ${rssWarm} -> ${rssEnd} KiB (${(100 * growth).toFixed(2)}%, medians of ${inWarm.length} and ` +
   `${inEnd.length} samples)` : 'memory check not run (--no-memcheck)'));
for (const e of errors) console.log(`soak: ${e}`);
process.exit(errors.length ? 1 : 0);
