// bench/grammar.mjs URL NAME SESSIONS N_PREDICT - decode speed with and
// without a JSON Schema constraint against a running server (polykv or
// llama-server: both take /completion with json_schema and report
// timings).  SESSIONS requests at a time, 3 rounds each way, alternating
// constrained and unconstrained rounds so drift hits both.  Like work: a
// constrained request ends where its grammar completes, so each
// unconstrained request asks for exactly the tokens its constrained twin
// (the same prompt) wrote, EOS ignored.  Prints one JSON line:
// per-request decode tok/s medians and aggregate tok/s (tokens / wall time
// of a round, median over rounds).
const [url, name, sessionsArg, nArg] = process.argv.slice(2);
const sessions = Number(sessionsArg || 1), nPredict = Number(nArg || 64);
export const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    age: { type: 'integer' },
    tags: { type: 'array', items: { type: 'string' } },
    address: { type: 'object', properties: { city: { type: 'string' }, zip: { type: 'string' } }, required: ['city', 'zip'] },
  },
  required: ['name', 'age', 'tags', 'address'],
};

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[(s.length - 1) >> 1] : 0; };

async function one(i, constrained, n = nPredict) {
  const body = { prompt: `Person ${i}:`, n_predict: n, temperature: 0.8, seed: 1000 + i, cache_prompt: false };
  if (constrained) body.json_schema = SCHEMA;
  else body.ignore_eos = true;
  const r = await fetch(url + '/completion', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const j = await r.json();
  if (r.status !== 200) throw new Error(JSON.stringify(j));
  return { tps: j.timings.predicted_per_second, n: j.timings.predicted_n, content: j.content };
}

async function round(constrained, k, ns) {
  const t0 = performance.now();
  const res = await Promise.all(Array.from({ length: sessions }, (_, i) => one(k * 100 + i, constrained, ns ? ns[i] : nPredict)));
  const wall = (performance.now() - t0) / 1000;
  return { per: res.map((x) => x.tps), agg: res.reduce((s, x) => s + x.n, 0) / wall, n: res.map((x) => x.n) };
}

await one(0, true);     // warm: mmap, vocabulary tables, caches
await one(0, false);
const out = { free: [], json: [] };
for (let k = 0; k < 3; k++) {
  const c = await round(true, k);
  out.json.push(c);
  out.free.push(await round(false, k, c.n));
  if (out.free.at(-1).n.some((n, i) => n !== c.n[i])) throw new Error(`unequal work: ${out.free.at(-1).n} vs ${c.n}`);
}
const sum = (rs) => ({
  per_request_tps_median: +median(rs.flatMap((r) => r.per)).toFixed(2),
  aggregate_tps_median: +median(rs.map((r) => r.agg)).toFixed(2),
  tokens_median: median(rs.flatMap((r) => r.n)),
});
const f = sum(out.free), c = sum(out.json);
console.log(JSON.stringify({ server: name, sessions, n_predict: nPredict, unconstrained: f, json_schema: c,
  ratio_per_request: +(c.per_request_tps_median / f.per_request_tps_median).toFixed(3),
  ratio_aggregate: +(c.aggregate_tps_median / f.aggregate_tps_median).toFixed(3) }));
