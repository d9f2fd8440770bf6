// bench/http.mjs - HTTP + JSON overhead of the server: p50 / p90 round trip
// of /health, /tokenize, a 1-token /completion and a 1-token chat
// completion on one kept-alive loopback connection, and the model compute
// inside the completions (the server's own predicted_ms + prompt_ms).
//
// Usage: node bench/http.mjs [BUILD_DIR] [N]     (default build, 300)
// env: MODEL (default ../shared/models/stories260K.gguf), THREADS (1)
//
// One server, one client, requests one after another; the first 20 of each
// kind are a warm-up and not counted.
import { spawn } from 'node:child_process';
import http from 'node:http';
import { join } from 'node:path';

const build = process.argv[2] || 'build';
const n = Number(process.argv[3] || '300');
const model = process.env.MODEL || '../shared/models/stories260K.gguf';
const threads = process.env.THREADS || '1';

const proc = spawn(join(build, 'polykv'), ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0',
  '-np', '1', '-c', '512', '-t', threads], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
const base = await new Promise((resolve, reject) => {
  proc.stderr.on('data', (d) => {
    log += d;
    const m = log.match(/listening on http:\/\/([^:]+):(\d+)/);
    if (m) resolve({ host: m[1], port: Number(m[2]) });
  });
  proc.on('exit', (code) => reject(new Error(`server exited (${code}):\n${log}`)));
});

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
function request(method, path, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const t0 = process.hrtime.bigint();
    const req = http.request({ ...base, method, path, agent,
      headers: data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {} },
    (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, ms: Number(process.hrtime.bigint() - t0) / 1e6, text }));
    });
    req.on('error', reject);
    if (data) req.end(data); else req.end();
  });
}

for (let i = 0; ; i++) {   /* the model loads behind /health's 503 */
  if ((await request('GET', '/health').catch(() => ({ status: 0 }))).status === 200) break;
  if (i > 3000) throw new Error('server not healthy');
  await new Promise((r) => setTimeout(r, 10));
}

const cases = [
  ['/health', 'GET', '/health', undefined],
  ['/tokenize', 'POST', '/tokenize', { content: 'Once upon a time there was a little girl' }],
  ['1-token /completion', 'POST', '/completion', { prompt: 'Once upon a time', n_predict: 1, temperature: 0,
    cache_prompt: false }],
  ['1-token chat completion', 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 1, temperature: 0 }],
];
const pct = (v, p) => { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
console.log(`${n} requests each after 20 warm-up, one kept-alive loopback connection, ${model}, -t ${threads}`);
for (const [name, method, path, body] of cases) {
  const ms = [], compute = [];
  for (let i = 0; i < n + 20; i++) {
    const r = await request(method, path, body);
    if (r.status !== 200) throw new Error(`${name}: ${r.status} ${r.text}`);
    if (i < 20) continue;
    ms.push(r.ms);
    const t = JSON.parse(r.text).timings;
    if (t) compute.push(t.prompt_ms + t.predicted_ms);
  }
  console.log(`${name.padEnd(24)} p50 ${pct(ms, 0.5).toFixed(3)} ms  p90 ${pct(ms, 0.9).toFixed(3)} ms` +
    (compute.length ? `  (model compute p50 ${pct(compute, 0.5).toFixed(3)} ms)` : ''));
}
agent.destroy();
proc.kill('SIGTERM');
