// bench/loadgen.mjs - load generator for any OpenAI / llama.cpp-compatible
// server: aggregate decode tokens/s and time to first token with 1, 2, 4
// (or any list of) concurrent streaming clients.
//
//   node bench/loadgen.mjs --url http://127.0.0.1:8080 [options]
//     --api cmpl|chat|native  endpoint: /v1/completions (default),
//                             /v1/chat/completions, or /completion
//     --concurrency 1,2,4     client counts, one level after the other
//     --duration S            seconds per level (default 20)
//     --max-tokens N          tokens per request (default 128; EOS ignored)
//     --prompt-words N        words in each prompt (default 64)
//     --same-prompt           one prompt for all (prompt cache hits); by
//                             default each request's prompt is unique
//     --model NAME --api-key KEY --json
//
// Each client sends streaming requests back to back.  Per request: TTFT =
// first token's arrival - send; decode rate = (tokens - 1) / (last - first
// arrival).  Per level: aggregate decode tokens/s = tokens received / level
// wall time; TTFT p50 / p90; mean per-session decode rate.  The tokens of a
// request are counted from its usage (include_usage) or, for the native
// API, tokens_predicted; a stream chunk carrying no text still counts.
// Works unchanged against llama-server (same flags, same endpoints).
//
// Failed requests (HTTP errors, error events, connections closed early: a
// server may close a kept-alive connection between requests) bring no
// tokens but their time is in the level's wall time, so they lower its
// aggregate.  Each level reports how many failed, the client time they
// took and their distinct messages; a level with failures is flagged
// ("FAILED" in the text, "failed" > 0 in --json) so a comparison of two
// servers can tell lost requests from slow ones, and the last line sums the
// failures of the run (one server).

import { parseArgs } from 'node:util';

const { values: a } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' },
  api: { type: 'string', default: 'cmpl' },
  concurrency: { type: 'string', default: '1,2,4' },
  duration: { type: 'string', default: '20' },
  'max-tokens': { type: 'string', default: '128' },
  'prompt-words': { type: 'string', default: '64' },
  'same-prompt': { type: 'boolean', default: false },
  model: { type: 'string', default: 'default' },
  'api-key': { type: 'string' },
  json: { type: 'boolean', default: false },
} });

const url = a.url.replace(/\/$/, '');
const maxTokens = Number(a['max-tokens']);
const levels = a.concurrency.split(',').map(Number);
const duration = Number(a.duration) * 1000;
const words = 'the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches near old ' +
  'castle walls under bright winter stars and rivers run to the sea';
let nextId = 0;

function prompt() {
  const w = words.split(' ');
  const n = Number(a['prompt-words']);
  const text = Array.from({ length: n }, (_, i) => w[i % w.length]).join(' ');
  return a['same-prompt'] ? text : `Request ${nextId++}. ${text}`;
}

function request() {
  const common = { stream: true, temperature: 0, ignore_eos: true };
  if (a.api === 'native') return ['/completion', { ...common, prompt: prompt(), n_predict: maxTokens }];
  const oai = { ...common, model: a.model, max_tokens: maxTokens, stream_options: { include_usage: true } };
  if (a.api === 'chat') return ['/v1/chat/completions', { ...oai, messages: [{ role: 'user', content: prompt() }] }];
  return ['/v1/completions', { ...oai, prompt: prompt() }];
}

// One streamed request; returns { ttft, first, last, tokens } (ms, ms, ms, n).
async function one() {
  const [path, body] = request();
  const headers = { 'content-type': 'application/json' };
  if (a['api-key']) headers.authorization = `Bearer ${a['api-key']}`;
  const t0 = performance.now();
  const res = await fetch(url + path, { method: 'POST', headers, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`${path}: HTTP ${res.status}: ${await res.text()}`);
  const dec = new TextDecoder();
  let buf = '', first = 0, last = 0, chunks = 0, tokens = 0;
  for await (const bytes of res.body) {
    const now = performance.now();
    buf += dec.decode(bytes, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 2);
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const e = JSON.parse(line.slice(6));
      if (e.error) throw new Error(JSON.stringify(e.error));
      if (e.usage) tokens = e.usage.completion_tokens;
      if (a.api === 'native' && e.stop) tokens = e.tokens_predicted;
      const isToken = a.api === 'native' ? !e.stop : e.choices?.length > 0 && e.choices[0].finish_reason == null &&
        !(e.choices[0].delta && e.choices[0].delta.role && !e.choices[0].delta.content);
      if (isToken) {
        if (!first) first = now;
        last = now;
        chunks++;
      }
    }
  }
  return { ttft: first - t0, first, last, tokens: tokens || chunks };
}

const pct = (xs, p) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

async function level(c) {
  const results = [];
  const t0 = performance.now();
  const end = t0 + duration;
  let errors = 0, lastError = '', failedMs = 0;
  const reasons = new Map();
  await Promise.all(Array.from({ length: c }, async () => {
    while (performance.now() < end) {
      // A server may close a kept-alive connection between requests
      // (llama-server does after a number of them); such a request is
      // counted as failed and the client goes on with a new connection.
      const t = performance.now();
      try {
        results.push(await one());
      } catch (e) {
        errors++;
        failedMs += performance.now() - t;
        lastError = e.cause?.message ?? e.message;
        reasons.set(lastError, (reasons.get(lastError) ?? 0) + 1);
        if (errors > 10 * c) throw new Error(`too many failed requests: ${lastError}`);
      }
    }
  }));
  const wall = (performance.now() - t0) / 1000;
  const tokens = results.reduce((s, r) => s + r.tokens, 0);
  const rates = results.filter((r) => r.tokens > 1 && r.last > r.first)
    .map((r) => (r.tokens - 1) * 1000 / (r.last - r.first));
  return {
    concurrency: c,
    requests: results.length,
    failed: errors,
    failed_client_s: +(failedMs / 1000).toFixed(2),
    failed_reasons: Object.fromEntries(reasons),
    tokens,
    seconds: +wall.toFixed(2),
    aggregate_tps: +(tokens / wall).toFixed(2),
    ttft_p50_ms: +pct(results.map((r) => r.ttft), 0.5).toFixed(1),
    ttft_p90_ms: +pct(results.map((r) => r.ttft), 0.9).toFixed(1),
    session_tps_mean: +(rates.reduce((s, x) => s + x, 0) / Math.max(rates.length, 1)).toFixed(2),
  };
}

const health = await fetch(url + '/health').catch((e) => ({ status: String(e) }));
if (health.status !== 200) {
  console.error(`loadgen: ${url}/health answered ${health.status}`);
  process.exit(1);
}
const out = [];
for (const c of levels) {
  const r = await level(c);
  out.push(r);
  if (!a.json)
    console.log(`clients ${String(c).padStart(2)}: ${String(r.requests).padStart(4)} requests, ` +
      `${r.aggregate_tps.toFixed(1).padStart(8)} tok/s aggregate, ${r.session_tps_mean.toFixed(1).padStart(7)} tok/s ` +
      `per session, TTFT p50 ${r.ttft_p50_ms.toFixed(1)} ms (p90 ${r.ttft_p90_ms.toFixed(1)} ms)` +
      (r.failed ? `; FAILED: ${r.failed} requests (${r.failed_client_s} s of client time, no tokens; ` +
        `${Object.entries(r.failed_reasons).map(([m, k]) => `${k}x ${m}`).join('; ')})` : ''));
}
const failed = out.reduce((s, r) => s + r.failed, 0);
if (a.json) console.log(JSON.stringify({ url, api: a.api, max_tokens: maxTokens, failed, levels: out }, null, 2));
else console.log(`${url}: ${failed} failed requests over ${out.length} levels` +
  (failed ? ` (levels ${out.filter((r) => r.failed).map((r) => r.concurrency).join(', ')} flagged)` : ''));
