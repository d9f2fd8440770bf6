// tps.test.mjs - the per-session speed the server reports (tps_ewma, from
// the engine's inter-token times) agrees within 5% with the rate a client
// measures from token arrival times, on one steady streamed session of a
// model slow enough (>= 8 ms a token) for the network to be noise.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { skipReason, genModel, startServer, readSSE, get } from './lib.mjs';

const skip = skipReason();
let srv;

after(async () => {
  if (srv) await srv.stop();
});

test('tps_ewma matches the client-side token rate within 5%', { skip }, async () => {
  const model = genModel('tps-qwen2-e1024-l16-q8_0.gguf', ['--arch', 'qwen2', '--n-embd', '1024', '--n-layer', '16',
    '--n-head', '16', '--n-head-kv', '4', '--n-ff', '4096', '--type', 'q8_0', '--seed', '1']);
  srv = await startServer(model, ['-c', '1024', '-np', '1', '-t', '1']);

  const N = 400, SNAP_AT = 340;
  const res = await fetch(srv.url + '/completion', { method: 'POST',
    body: JSON.stringify({ prompt: 'Hello', n_predict: N, ignore_eos: true, stream: true, temperature: 0 }) });
  const arrivals = [];
  let snap = null;
  await readSSE(res, (data, t) => {
    const e = JSON.parse(data);
    if (e.stop) return;
    arrivals.push(t);
    if (arrivals.length === SNAP_AT)
      snap = get(srv.url + '/polykv/tps').then((r) => ({ ...r.json, t: performance.now() }));
  });
  assert.equal(arrivals.length, N);
  const s = await snap;
  assert.equal(s.sessions.length, 1, JSON.stringify(s));
  const ewma = s.sessions[0].tps_ewma;

  // The client's measure of the same quantity: an EWMA of the gaps
  // between token arrivals, over the window eng.h defines (the last 128
  // tokens or 2 s, whichever is shorter; the engine's defaults).  Decode
  // speed is not constant over a stream (attention grows with the context,
  // and the machine is shared), so a flat average over a different window
  // would measure something else; it is printed for information.  The
  // first gap is the engine's first: token 0 comes with the prompt's batch.
  // Aligned by count: the snapshot says how many tokens the session had
  // decoded, so the client's EWMA covers exactly those arrivals.
  const before = arrivals.slice(0, Math.min(s.sessions[0].n_decoded, arrivals.length));
  const last = before.length - 1;
  let ewmaMs = 0;
  for (let i = 1; i <= last; i++) {
    const dt = before[i] - before[i - 1];
    const a = 1 - Math.exp(-Math.max(1 / 128, dt / 2000));
    ewmaMs = ewmaMs ? ewmaMs + a * (dt - ewmaMs) : dt;
  }
  const client = 1000 / ewmaMs;
  const flat = 128 * 1000 / (before[last] - before[last - 128]);
  const msPerToken = ewmaMs;
  const diff = Math.abs(ewma - client) / client;
  console.log(`# tps: server tps_ewma ${ewma.toFixed(1)}, client ${client.toFixed(1)} tok/s ` +
    `(${msPerToken.toFixed(2)} ms/token; flat mean of the last 128: ${flat.toFixed(1)}), ` +
    `difference ${(100 * diff).toFixed(2)}%`);
  assert.ok(msPerToken >= 8, `the model is too fast for this test: ${msPerToken.toFixed(2)} ms/token`);
  assert.ok(diff < 0.05, `tps_ewma ${ewma} vs client ${client}`);
});
