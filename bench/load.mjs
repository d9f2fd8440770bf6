// bench/load.mjs - a bounded load test of `polykv serve` on loopback: many
// concurrent clients (default 64) for a while (default 600 s) mixing
// streaming and whole chat and text completions, pool create / fork /
// attach / release, capacity polls and disconnects in the middle of
// streams; it starts its own server and stops by itself.
//
//   node bench/load.mjs [--model PATH] [--bin build/polykv] [--duration 600]
//                       [--clients 64] [--slots 16] [--disconnect 0.2]
//                       [--mem-tolerance 0.05] [--no-memcheck] [--json]
//
// Passes (exit 0) when:
//   - no 5xx and no status other than 200/201 (and 429 for a pool or an
//     admission refusal: the limits are small on purpose), every stream
//     ends with its last event, every whole response has its fields;
//   - the heap in use (polykv:heap_bytes_in_use in /metrics: what the
//     allocator handed out and did not get back, what a leak grows) after
//     warm-up (the first quarter, 10 s at least) grows less than
//     --mem-tolerance to the end (medians of 5 s windows, as bench/soak.mjs
//     explains), or else still grows in the second half of that time by
//     less than a quarter of it: a leak grows with the requests, all the
//     way.  Anonymous resident memory (RssAnon) is held to three times
//     that, for what the heap does not count (thread stacks, mappings):
//     it also counts the allocator's free arenas, which grow with how many
//     connections overlap, which a loaded machine raises and which then
//     levels off (make bench beside make test: +12.1% in 40 s, once in
//     five runs, while nothing leaked).  Where the server has no heap
//     gauge (not glibc), RssAnon is held to --mem-tolerance itself.  VmRSS
//     is reported beside them, not checked: it also counts file-backed
//     pages, which the kernel takes back when something beside the test
//     needs memory (make bench beside make test: -11.8%);
//   - the shared prefix is not corrupted: a greedy attach to a pool made
//     before the load gives the same tokens and the same top log-probs
//     after it;
//   - nothing leaks: once the pools are released and the slots erased,
//     /metrics shows 0 KV cells used, no parked history, and only the
//     slots' own sequence ids (/polykv/pools agrees), no request in flight.
// Prints a markdown table of the results and one line "load: ok" or
// "load: FAIL" with the reasons.

import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { rssKiB, startServer } from './serve.mjs';

const { values: a } = parseArgs({ options: {
  model: { type: 'string', default: '../shared/models/stories260K.gguf' },
  bin: { type: 'string', default: process.env.POLYKV_BIN || 'build/polykv' },
  duration: { type: 'string', default: '600' },
  clients: { type: 'string', default: '64' },
  slots: { type: 'string', default: '16' },
  disconnect: { type: 'string', default: '0.2' },
  'mem-tolerance': { type: 'string', default: '0.05' },
  'no-memcheck': { type: 'boolean', default: false },
  json: { type: 'boolean', default: false },
} });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rand = (n) => Math.floor(Math.random() * n);
const duration = Number(a.duration) * 1000;
const nSlots = Number(a.slots);
const errors = [];
const fail = (msg) => { if (errors.length < 30) errors.push(msg); };

if (!existsSync(a.model)) {
  console.log(`load: SKIP: ${a.model} not found`);
  process.exit(0);
}
const srv = await startServer(a.bin, ['-m', a.model, '--host', '127.0.0.1', '--port', '0', '-np', String(nSlots),
  '-c', String(1024 * nSlots), '-t', '1', '--metrics', '--pools', '16', '--max-connections', '512'], 'load', fail);
const { url, proc } = srv;
const rss = () => rssKiB(proc.pid), anon = () => rssKiB(proc.pid, 'RssAnon');
const json = async (path, body, method = body === undefined ? 'GET' : 'POST') => {
  const r = await fetch(url + path, { method, headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let j = null;
  try { j = JSON.parse(text); } catch {}
  return { status: r.status, j, text };
};

/* ---- what is counted ---- */
const st = { completed: 0, streams: 0, whole: 0, disconnects: 0, pool_ops: 0, capacity_polls: 0, tokens: 0 };
const byStatus = {};
const ttft = [], itl = [];
const count = (status) => { byStatus[status] = (byStatus[status] || 0) + 1; };
const OK = new Set([200, 201]);
function status(where, s, text) {
  count(s);
  if (OK.has(s) || s === 429) return OK.has(s);
  fail(`${where}: HTTP ${s}: ${String(text).slice(0, 200)}`);
  return false;
}

/* ---- the shared prefix checked before and after ---- */
const REF_PREFIX = 'Once upon a time there was a little girl named Lily. She liked to play in the park with her ' +
  'dog Max. Every day they ran and jumped and laughed.';
const ref = await json('/polykv/pools', { prompt: REF_PREFIX });
if (ref.status !== 201) { console.log(`load: FAIL: the reference pool: ${ref.status} ${ref.text}`); process.exit(1); }
const refPool = ref.j.pool_id;
const refAsk = { prompt: REF_PREFIX + ' One day', pool_id: refPool, n_predict: 24, temperature: 0, n_probs: 3,
  return_tokens: true };
const refBefore = await json('/completion', refAsk);

const words = 'Once upon a time there was a little girl named Lily who liked to play in the park with her dog';
const prompt = () => words.split(' ').slice(0, 3 + rand(15)).join(' ') + ` ${rand(1000)}`;

function body(kind, stream, extra = {}) {
  const max = 4 + rand(60);
  if (kind === 'native') return ['/completion', { prompt: prompt(), n_predict: max, stream, ...extra }];
  if (kind === 'cmpl') return ['/v1/completions', { prompt: prompt(), max_tokens: max, stream, ...extra }];
  return ['/v1/chat/completions', { messages: [{ role: 'user', content: prompt() }], max_tokens: max, stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}), ...extra }];
}

/* One completion; streams may leave after a few events. */
async function complete(kind, stream, extra = {}) {
  const [path, b] = body(kind, stream, extra);
  if (extra.prompt) b.prompt = extra.prompt;
  const leave = stream && Math.random() < Number(a.disconnect) ? 1 + rand(8) : 0;
  const ac = new AbortController();
  const t0 = performance.now();
  let res;
  try {
    res = await fetch(url + path, { method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
      body: JSON.stringify(b) });
  } catch (e) { return fail(`${kind}: ${e.message}`); }
  if (!stream) {
    const text = await res.text();
    if (!status(`${kind} whole`, res.status, text)) return;
    const j = JSON.parse(text);
    const n = kind === 'native' ? j.tokens_predicted : j.usage?.completion_tokens;
    if (typeof n !== 'number' || (kind === 'native' ? j.stop !== true : !j.choices?.[0]?.finish_reason))
      return fail(`${kind} whole: malformed ${text.slice(0, 200)}`);
    st.tokens += n;
    st.whole++;
    st.completed++;
    return;
  }
  if (!status(`${kind} stream`, res.status, '')) return void (await res.text());
  const dec = new TextDecoder();
  let buf = '', events = 0, last = null, tPrev = 0, ended = false, left = false;
  try {
    for await (const chunk of res.body) {
      buf += dec.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (block.startsWith(':')) continue;
        if (!block.startsWith('data: ')) return fail(`${kind}: not an SSE event: ${block.slice(0, 80)}`);
        const data = block.slice(6);
        if (data === '[DONE]') { ended = true; continue; }
        const e = JSON.parse(data);
        if (e.error) return fail(`${kind}: error event ${JSON.stringify(e.error)}`);
        const now = performance.now();
        const hasText = kind === 'native' ? e.content !== undefined && !e.stop
          : (e.choices?.[0]?.delta?.content ?? e.choices?.[0]?.text ?? '') !== '';
        if (hasText) {
          if (events === 0) ttft.push(now - t0);
          else itl.push(now - tPrev);
          tPrev = now;
          events++;
        }
        last = e;
        if (kind === 'native' && e.stop) ended = true;
        if (leave && events >= leave) { left = true; ac.abort(); st.disconnects++; return; }
      }
    }
  } catch (e) {
    if (left) return;                      /* the abort ending the loop, counted above */
    return fail(`${kind} stream: ${e.message}`);
  }
  if (!ended) return fail(`${kind} stream: no last event (${JSON.stringify(last)?.slice(0, 200)})`);
  st.tokens += events;
  st.streams++;
  st.completed++;
}

/* A pool's life: create, fork, attach (streamed or not), release. */
async function poolLife(c) {
  const base = `Tom and his friend ${c} went to the big forest to look for`;
  const p = await json('/polykv/pools', { prompt: base });
  st.pool_ops++;
  if (!status('pool create', p.status, p.text)) return;
  const id = p.j.pool_id;
  const f = await json(`/polykv/pools/${id}/fork`, { prompt: `${base} a red ball` });
  st.pool_ops++;
  if (status('pool fork', f.status, f.text)) {
    await complete(Math.random() < 0.5 ? 'native' : 'cmpl', Math.random() < 0.5,
      { pool_id: f.j.pool_id, prompt: `${base} a red ball and` });
  }
  await complete('native', Math.random() < 0.5, { pool_id: id, prompt: `${base} a cat` });
  const d = await json(`/polykv/pools/${id}?recursive=true`, undefined, 'DELETE');
  st.pool_ops++;
  status('pool release', d.status, d.text);
}

async function capacity() {
  const r = Math.random() < 0.5 ? await json('/polykv/capacity') : await json(`/polykv/pools/${refPool}/capacity`);
  st.capacity_polls++;
  status('capacity', r.status, r.text);
}

/* ---- the run ---- */
const memcheck = !a['no-memcheck'];
const t0 = Date.now();
const warm = Math.max(10000, duration / 4);
if (memcheck && duration < warm + 10000)
  fail(`--duration ${duration / 1000} s is too short for the memory check (or --no-memcheck)`);
const samples = [];
const gaugeIn = (text, name) => Number(text.match(new RegExp(`^${name} (\\S+)$`, 'm'))?.[1] ?? NaN);
const heap = async () =>
  gaugeIn(await fetch(url + '/metrics').then((r) => r.text()).catch(() => ''), 'polykv:heap_bytes_in_use') / 1024;
const sampler = setInterval(async () => {
  const t = Date.now() - t0, k = rss(), n = anon(), h = await heap();
  if (k > 0) samples.push([t, k, n, h]);
}, 500);
const median = (xs) => (xs.length ? [...xs].sort((x, y) => x - y)[xs.length >> 1] : 0);
const pct = (xs, q) => {
  if (!xs.length) return 0;
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

const KINDS = ['native', 'cmpl', 'chat'];
await Promise.all(Array.from({ length: Number(a.clients) }, async (_, c) => {
  while (Date.now() - t0 < duration && errors.length < 30) {
    const x = Math.random();
    if (x < 0.45) await complete(KINDS[rand(3)], true);
    else if (x < 0.70) await complete(KINDS[rand(3)], false);
    else if (x < 0.80) await complete(KINDS[rand(3)], true, { pool_id: refPool, prompt: REF_PREFIX + ' Then',
      temperature: 0.8 });
    else if (x < 0.90) await poolLife(c);
    else await capacity();
  }
}));
clearInterval(sampler);
const tEnd = Date.now() - t0;

/* ---- after: idle, the shared prefix, then nothing left ---- */
let idle = false;
for (let t = 0; t < 5000 && !idle; t += 50) {
  const sl = await json('/slots');
  idle = Array.isArray(sl.j) && sl.j.every((s) => s.state === 'idle');
  if (!idle) await sleep(50);
}
if (!idle) fail('slots still busy 5 s after the last client');
const refAfter = await json('/completion', refAsk);
const probsOf = (j) => JSON.stringify(j?.completion_probabilities ?? null);
const sameTokens = JSON.stringify(refAfter.j?.tokens) === JSON.stringify(refBefore.j?.tokens);
const sameProbs = probsOf(refAfter.j) === probsOf(refBefore.j);
if (refBefore.status !== 200 || refAfter.status !== 200) fail(`reference attach: ${refBefore.status} / ${refAfter.status}`);
if (!sameTokens) fail(`the shared prefix gives other tokens after the load: ${refBefore.j?.tokens} -> ${refAfter.j?.tokens}`);
if (!sameProbs) fail('the shared prefix gives other log-probs after the load');

await json(`/polykv/pools/${refPool}?recursive=true`, undefined, 'DELETE');
const left = await json('/polykv/pools');
for (const p of left.j?.pools ?? []) await json(`/polykv/pools/${p.pool_id}?recursive=true`, undefined, 'DELETE');
for (let i = 0; i < nSlots; i++) await json(`/slots/${i}?action=erase`, {});
const metrics = (await fetch(url + '/metrics').then((r) => r.text())) || '';
const gauge = (name) => gaugeIn(metrics, name);
const pools = (await json('/polykv/pools')).j;
const end = { kv_cells_used: gauge('polykv:kv_cells_used'), parked_histories: gauge('polykv:parked_histories'),
  seq_ids_used: gauge('polykv:seq_ids_used'), pools_left: pools?.pools?.length,
  pools_seq_ids_used: pools?.seq_ids_used, requests_processing: gauge('llamacpp:requests_processing'),
  requests_deferred: gauge('llamacpp:requests_deferred') };
if (end.kv_cells_used !== 0) fail(`${end.kv_cells_used} KV cells still used at the end`);
if (end.parked_histories !== 0) fail(`${end.parked_histories} parked histories at the end`);
if (end.seq_ids_used !== nSlots || end.pools_seq_ids_used !== nSlots)
  fail(`sequence ids used at the end: ${end.seq_ids_used} (/metrics), ${end.pools_seq_ids_used} (/polykv/pools); ` +
       `the ${nSlots} slots' own expected`);
if (end.pools_left !== 0) fail(`${end.pools_left} pools left`);
if (end.requests_processing !== 0 || end.requests_deferred !== 0) fail('requests still in flight at the end');

const sWarm = samples.filter(([t]) => t >= warm && t < warm + 5000);
const sEnd = samples.filter(([t]) => t >= Math.max(tEnd - 5000, warm + 5000));
const tMid = (warm + tEnd) / 2;
const sMid = samples.filter(([t]) => t >= tMid - 2500 && t < tMid + 2500);
/* warm -> middle -> end medians of sample column i, and the growth over
 * the whole and over the second half, relative to warm */
const course = (i) => {
  const w = median(sWarm.map((x) => x[i])), m = median(sMid.map((x) => x[i])), e = median(sEnd.map((x) => x[i]));
  return { w, m, e, growth: w ? (e - w) / w : 0, late: w ? (e - m) / w : 0 };
};
const rssC = course(1), anonC = course(2), heapC = course(3);
const rssWarm = rssC.w, rssEnd = rssC.e, drift = rssC.growth;
const hasHeap = samples.length > 0 && samples.every((x) => Number.isFinite(x[3]));
const tol = Number(a['mem-tolerance']);
const held = (c, t, what) => {
  if (c.growth > t && c.late > t / 4)
    fail(`${what} grew ${(100 * c.growth).toFixed(1)}% after warm-up (${c.w.toFixed(0)} -> ${c.e.toFixed(0)} KiB), ` +
         `${(100 * c.late).toFixed(1)}% of it in the second half (${c.m.toFixed(0)} -> ${c.e.toFixed(0)} KiB)`);
};
if (memcheck && (sWarm.length < 6 || sEnd.length < 6 || sMid.length < 6)) fail('too few memory samples for the check');
if (memcheck && hasHeap) held(heapC, tol, 'the heap in use');
if (memcheck) held(anonC, hasHeap ? 3 * tol : tol, 'anonymous resident memory');
const n5xx = Object.entries(byStatus).filter(([s]) => Number(s) >= 500).reduce((n, [, v]) => n + v, 0);
if (n5xx) fail(`${n5xx} responses with a 5xx status`);

const code = await srv.stop();
if (code !== 0) fail(`server exit status ${code} at shutdown; its log:\n${srv.log().slice(-3000)}`);

const ms = (x) => x.toFixed(1);
const rows = [
  ['duration', `${(tEnd / 1000).toFixed(0)} s, ${a.clients} clients, ${nSlots} slots`],
  ['requests completed', `${st.completed} (${st.streams} streamed, ${st.whole} whole), ${st.tokens} tokens`],
  ['disconnects mid-stream', st.disconnects],
  ['pool operations / capacity polls', `${st.pool_ops} / ${st.capacity_polls}`],
  ['time to first token p50 / p99', `${ms(pct(ttft, 0.5))} / ${ms(pct(ttft, 0.99))} ms (${ttft.length} streams)`],
  ['inter-token latency p50 / p99', `${ms(pct(itl, 0.5))} / ${ms(pct(itl, 0.99))} ms (${itl.length} gaps)`],
  ['responses by status', Object.entries(byStatus).map(([k, v]) => `${k}: ${v}`).join(', ')],
  ['5xx', n5xx],
  ['RSS after warm-up -> end', memcheck ? `${rssWarm} -> ${rssEnd} KiB (${(100 * drift).toFixed(2)}%)` : 'not checked'],
  ...[['heap in use', heapC, hasHeap], ['anonymous RSS', anonC, true]].map(([k, c, on]) =>
    [`${k} after warm-up -> middle -> end`, memcheck && on ? `${c.w.toFixed(0)} -> ${c.m.toFixed(0)} -> ` +
      `${c.e.toFixed(0)} KiB (${(100 * c.growth).toFixed(2)}%, second half ${(100 * c.late).toFixed(2)}%)`
      : 'not checked']),
  ['shared prefix after the load', sameTokens && sameProbs ? 'same tokens and log-probs' : 'DIFFERENT'],
  ['at the end', `${end.kv_cells_used} KV cells, ${end.parked_histories} parked, ${end.seq_ids_used} seq ids ` +
    `(the ${nSlots} slots'), ${end.pools_left} pools`],
];
if (a.json) console.log(JSON.stringify({ ...st, byStatus, ttft_p50: pct(ttft, 0.5), ttft_p99: pct(ttft, 0.99),
  itl_p50: pct(itl, 0.5), itl_p99: pct(itl, 0.99), rssWarm, rssEnd, drift, anon: anonC, heap: hasHeap ? heapC : null, end, errors }, null, 2));
console.log('| measure | value |\n|---|---|');
for (const [k, v] of rows) console.log(`| ${k} | ${v} |`);
console.log(`load: ${errors.length ? 'FAIL' : 'ok'}`);
for (const e of errors) console.log(`load: ${e}`);
process.exit(errors.length ? 1 : 0);
