// bench/lone.mjs - one agent's decode speed alone on a polykv server, in
// five states of the server (is a lone agent under the spawn ramp's floor
// the server's doing or the machine's?): fresh; after 60 other agents' histories (spilled, parked,
// fragmenting the cache); with an admission policy on the pool; with 7 new
// sessions held in its enforced queue; with /polykv/tps and /polykv/cache
// read every 100 ms (what bench/spawn.mjs's sampler does).  Each is the
// median of 5 turns' `timings.predicted_per_second`.
//
//   node bench/lone.mjs --url http://127.0.0.1:8080
import http from 'node:http';
import { parseArgs } from 'node:util';

import { SYSTEM as system, words } from './spawn_workload.mjs';

const { values: a } = parseArgs({ options: { url: { type: 'string', default: 'http://127.0.0.1:8080' } } });
function req(method, path, body, signal) {
  return new Promise((resolve, reject) => {
    const r = http.request(a.url + path, { method, signal, headers: { 'content-type': 'application/json' } }, (res) => {
      let t = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { t += c; });
      res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(t) }));
    });
    r.on('error', reject);
    r.end(body ? JSON.stringify(body) : undefined);
  });
}
const pool = (await req('POST', '/polykv/pools', { prompt: system })).json.pool_id;
const run = Date.now() % 1000000;   /* new sessions and prompts on every run */

async function agent(id, turns, n) {
  let ctx = system + `\nAgent ${run}-${id}: ` + words(40, run + id.length);
  const tps = [];
  for (let t = 0; t < turns; t++) {
    const r = await req('POST', '/completion', { prompt: ctx, pool_id: pool, session_id: `${run}-${id}`, n_predict: n,
                                                 ignore_eos: true, temperature: 0 });
    if (r.status !== 200) throw new Error(`/completion: ${r.status}`);
    tps.push(r.json.timings.predicted_per_second);
    ctx += r.json.content + '\nTool result: ' + words(20, run + t);
  }
  return tps;
}
const median = (x) => [...x].sort((p, q) => p - q)[x.length >> 1];
const rows = [['fresh', await agent('fresh', 5, 96)]];
for (let k = 0; k < 60; k += 2) await Promise.all([agent(`other-${k}`, 2, 16), agent(`other-${k + 1}`, 2, 16)]);
const c = (await req('GET', '/polykv/cache')).json;
rows.push([`after 60 agents (${c.spilled} in RAM, ${c.kv_used} cells used)`, await agent('after', 5, 96)]);
await req('POST', `/polykv/pools/${pool}/admission`, { target_tps_per_session: 30, mode: 'advisory' });
rows.push(['with a policy', await agent('policy', 5, 96)]);
/* The lone agent is a known session (its own first turn ran before the
 * policy), so it is never gated; the seven behind it are new and wait. */
await req('POST', `/polykv/pools/${pool}/admission`, { target_tps_per_session: 1e5, mode: 'enforced',
                                                      on_saturation: 'queue', queue_max_ms: 600000 });
const stop = new AbortController();
const lead = agent('held', 1, 16);
await lead;
const held = [...Array(7).keys()].map((k) =>
  req('POST', '/completion', { prompt: system + `\nAgent ${run}-new-${k}: ` + words(40, k), pool_id: pool,
                               session_id: `${run}-new-${k}`, n_predict: 1 }, stop.signal).catch(() => null));
rows.push(['with 7 new sessions held', await agent('held', 5, 96)]);
stop.abort();
await Promise.all(held);
await req('POST', `/polykv/pools/${pool}/admission`, { target_tps_per_session: 30, mode: 'advisory' });
let polling = true;
const poller = (async () => {
  while (polling) {
    await req('GET', '/polykv/tps');
    await req('GET', '/polykv/cache');
    await new Promise((r) => setTimeout(r, 100));
  }
})();
rows.push(['with the sampler reading', await agent('sampled', 5, 96)]);
polling = false;
await poller;
for (const [name, v] of rows)
  console.log(`${name}: median ${median(v).toFixed(1)} tok/s (${v.map((x) => x.toFixed(1)).join(', ')})`);
