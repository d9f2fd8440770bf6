// bench/together.mjs - decode speed per session against sessions decoding
// at once, on the spawn ramp's workload (bench/spawn_workload.mjs): the
// load curve's raw material, measured from outside.  n completions start
// together on one pool, each 200 tokens after its own suffix of --words
// words; each reports its own decode speed (timings.predicted_per_second).
// Run twice, the second time with every prompt cached (one prompt token).
//
// --spec T sends speculative.type T with each request (docs/speculative.md:
// the curves with and without speculation).
//
//   node bench/together.mjs --url http://127.0.0.1:18097 [--words 40] [--max 4] [--spec ngram-cache]

import { parseArgs } from 'node:util';
import { SYSTEM, words } from './spawn_workload.mjs';

const { values: a } = parseArgs({ options: { url: { type: 'string', default: 'http://127.0.0.1:18097' },
                                              words: { type: 'string', default: '40' },
                                              max: { type: 'string', default: '4' },
                                              spec: { type: 'string' } } });
const post = async (path, body) => (await fetch(a.url + path, { method: 'POST', body: JSON.stringify(body),
                                                                headers: { 'content-type': 'application/json' } })).json();
const pool = (await post('/polykv/pools', { prompt: SYSTEM })).pool_id;
const max = Number(a.max), counts = [...Array(max).keys()].map((i) => i + 1);
for (const n of [...counts, ...counts.slice(0, -1).reverse()]) {
  const rs = await Promise.all([...Array(n).keys()].map((k) => post('/completion', {
    prompt: SYSTEM + '\nAgent ' + k + ': ' + words(Number(a.words), n * 10 + k), pool_id: pool, n_predict: 200,
    ignore_eos: true, temperature: 0, ...(a.spec ? { 'speculative.type': a.spec } : {}) })));
  const tps = rs.map((r) => r.timings.predicted_per_second);
  console.log(`${n} decoding: ${tps.map((x) => x.toFixed(1)).join(' ')} tok/s each (prompt tokens ` +
              `${rs.map((r) => r.timings.prompt_n).join(' ')}, prompt ${rs[0].tokens_evaluated} tokens)`);
}
