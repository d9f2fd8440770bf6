// bench/llmd_route.mjs - polykv replicas behind llm-d's own prefix index
// (docs/kv-events.md, docs/benchmarks.md "Routing across replicas").
//
// Three polykv replicas on one machine (-t 1 each) publish KV events;
// llmd-scorer (bench/llmd/main.go, built beside the project against
// llm-d's llm-d-kv-cache by bench/llmd/build.sh) ingests them through
// llm-d's ZMQ subscriber and vLLM adapter and scores the replicas for a
// token list with llm-d's LongestPrefix scorer.  An agent workload runs
// twice on fresh replicas, one request at a time:
//
//   llm-d   each request goes to the replica llm-d scores highest (ties and
//           all-zero scores: the next in turn, as a load scorer would)
//   rr      round-robin
//
// The workload: 4 system prompts; agents on them, each a conversation
// whose next turn is its whole transcript (its earlier prompts and the
// replies, return_tokens) plus a new user message; every 5th request a
// sub-agent's one-shot task on a system prompt; every 7th a classifier
// that rewrites the end of an agent's transcript.  Two system prompts are
// pools made on replicas 0 and 1 at the start; the replicas' caches are
// small (-c, --cache-ram), so histories are parked, spilled to the RAM
// tier and evicted as it runs; twice a pool is released and a slot erased.
//
// In the llm-d run, before each request: the replica each replica's
// /polykv/lookup says holds the longest reusable prefix (ground truth,
// read-only), against llm-d's pick: right at once, or within 1 s (events
// are asynchronous).  After each release and erase: how long until
// llm-d's score for that replica falls to the truth.  Both runs: prompt
// tokens evaluated (timings.prompt_n) and time to first token (streamed,
// client side), p50.
//
//   LLMD_SCORER=build/llmd-scorer node bench/llmd_route.mjs [--model PATH] [--requests 200]
//   (LLMD_DEBUG=1: one line per request: kind, prompt tokens, reply tokens,
//   tokens evaluated, the running floor the lookups set)

import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({ options: {
  model: { type: 'string', default: '../shared/models/stories260K.gguf' },
  bin: { type: 'string', default: 'build/polykv' },
  scorer: { type: 'string', default: process.env.LLMD_SCORER || 'build/llmd-scorer' },
  requests: { type: 'string', default: '200' },
  agents: { type: 'string', default: '12' },
  'vocab-max': { type: 'string', default: '' },
  ctx: { type: 'string', default: '4096' },
  'cache-ram': { type: 'string', default: '16' },
  seed: { type: 'string', default: '1' },
  'max-prompt': { type: 'string', default: '900' },
  modes: { type: 'string', default: 'llm-d,rr' } } });
for (const f of [a.model, a.bin, a.scorer])
  if (!existsSync(f)) { console.error(`${f} is absent (bench/llmd/build.sh builds the scorer)`); process.exit(2); }

const N_REP = 3, BS = 16, BASE = 18500;
const MODEL_NAME = path.basename(a.model);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => { const s = [...xs].sort((x, y) => x - y); return s.length ? s[s.length >> 1] : NaN; };

function waitHealth(url, what) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const poll = async () => {
      try { if ((await fetch(url)).status === 200) return resolve(); } catch { /* not yet */ }
      if (Date.now() - t0 > 120000) return reject(new Error(`${what} did not start`));
      setTimeout(poll, 100);
    };
    poll();
  });
}
const stop = (p) => new Promise((r) => { if (p.exitCode !== null) return r(); p.on('exit', r); p.kill('SIGTERM'); });

async function post(url, body, method = 'POST') {
  const r = await fetch(url, { method, headers: { 'content-type': 'application/json' },
                               body: body === undefined ? undefined : JSON.stringify(body) });
  const t = await r.text();
  let j; try { j = JSON.parse(t); } catch { j = { text: t }; }
  if (r.status >= 300) throw new Error(`${url}: ${r.status} ${t}`);
  return j;
}

// One completion, streamed: time to the first token, then the end's
// timings and the generated tokens.
async function complete(port, prompt, n) {
  const t0 = performance.now();
  const r = await fetch(`http://127.0.0.1:${port}/completion`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, n_predict: n, temperature: 0, cache_prompt: true, stream: true,
                           return_tokens: true, ignore_eos: true }) });
  if (r.status !== 200) throw new Error(`completion: ${r.status} ${await r.text()}`);
  let ttft = 0, buf = '', last = null;
  const tokens = [];
  const dec = new TextDecoder();
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ')) continue;
      const j = JSON.parse(ev.slice(6));
      if (!ttft && (j.content || (j.tokens && j.tokens.length))) ttft = performance.now() - t0;
      if (j.tokens) tokens.push(...j.tokens);
      last = j;
    }
  }
  return { ttft, prompt_n: last?.timings?.prompt_n ?? NaN, tokens };
}

const children = new Set();
process.on('exit', () => { for (const p of children) p.kill('SIGKILL'); });

async function startAll(mode) {
  const reps = [];
  for (let i = 0; i < N_REP; i++) {
    const port = BASE + i, ev = BASE + 10 + i;
    const p = spawn(a.bin, ['serve', '-m', a.model, '--port', String(port), '-t', '1', '-np', '4', '-c', a.ctx,
                            '--cache-ram', a['cache-ram'], '--metrics', '--kv-events-endpoint', `tcp://*:${ev}`,
                            '--kv-events-topic', `kv@replica-${i}@${MODEL_NAME}`], { stdio: ['ignore', 'ignore', 'pipe'] });
    p.stderr.on('data', () => {});
    children.add(p);
    reps.push({ p, port, ev, name: `replica-${i}` });
  }
  await Promise.all(reps.map((r) => waitHealth(`http://127.0.0.1:${r.port}/health`, r.name)));
  let scorer = null;
  if (mode === 'llm-d') {
    scorer = spawn(a.scorer, ['-listen', `127.0.0.1:${BASE + 90}`, '-model', MODEL_NAME,
                              ...reps.flatMap((r) => ['-pod', `${r.name}=tcp://127.0.0.1:${r.ev}`])],
                   { stdio: ['ignore', 'ignore', 'pipe'] });
    scorer.stderr.on('data', () => {});
    children.add(scorer);
    await waitHealth(`http://127.0.0.1:${BASE + 90}/healthz`, 'llmd-scorer');
    await sleep(1000);                          // subscriptions reach the publishers
  }
  return { reps, scorer };
}

async function scores(tokens) {
  return (await post(`http://127.0.0.1:${BASE + 90}/score`, { tokens })).scores;
}
async function lookups(reps, tokens) {
  return Promise.all(reps.map((r) => post(`http://127.0.0.1:${r.port}/polykv/lookup`, { tokens })));
}
async function truth(reps, tokens) {
  return (await lookups(reps, tokens)).map((l) => l.n_blocks);
}
// The replica a router picks from scores: the highest, ties to the next in turn.
function pick(vals, turn) {
  const best = Math.max(...vals);
  if (best <= 0) return { i: turn % N_REP, cold: true };
  for (let k = 0; k < N_REP; k++) { const i = (turn + k) % N_REP; if (vals[i] === best) return { i, cold: false }; }
}

// ---- the workload, the same in both runs ----
function makeWorkload() {
  let s = Number(a.seed) >>> 0;
  const rnd = (n) => { s = (s * 1103515245 + 12345) >>> 0; return (s >>> 8) % n; };
  const vmax = Number(a['vocab-max'] || (/stories/.test(a.model) ? 500 : 20000));
  const toks = (n) => Array.from({ length: n }, () => 3 + rnd(vmax - 3));
  const systems = [0, 1, 2, 3].map(() => [1, ...toks(250)]);
  const agents = Array.from({ length: Number(a.agents) }, (_, i) => ({ sys: i % 4, transcript: null }));
  const steps = [];
  for (let k = 0; k < Number(a.requests); k++) {
    if (k === Math.floor(a.requests / 3) || k === Math.floor(2 * a.requests / 3)) steps.push({ kind: 'drop' });
    if (k % 5 === 4) steps.push({ kind: 'subagent', sys: rnd(4), task: toks(40) });
    else if (k % 7 === 6) steps.push({ kind: 'classifier', agent: rnd(agents.length), cut: 8 + rnd(24), tail: toks(12) });
    else steps.push({ kind: 'turn', agent: rnd(agents.length), user: toks(24) });
  }
  return { systems, agents, steps };
}

async function run(mode) {
  const { reps, scorer } = await startAll(mode);
  const W = makeWorkload();
  const agents = W.agents.map((g) => ({ ...g }));
  const res = { mode, ttft: [], prompt_n: 0, n: 0, right: 0, right_1s: 0, warm: 0, cold_llmd: 0, drops: [], where: {},
                floor: 0 };
  const pools = {};
  for (const [s, r] of [[0, 0], [1, 1]]) {
    const j = await post(`http://127.0.0.1:${reps[r].port}/polykv/pools`, { tokens: W.systems[s] });
    pools[s] = { rep: r, id: j.pool_id };
  }
  let turn = 0;
  for (const st of W.steps) {
    if (st.kind === 'drop') {
      // A pool released and a slot erased: how long until llm-d's score
      // for the replica falls to what it holds.
      const s = Object.keys(pools)[0];
      if (s === undefined) continue;
      const { rep, id } = pools[s];
      delete pools[s];
      await post(`http://127.0.0.1:${reps[rep].port}/polykv/pools/${id}`, undefined, 'DELETE');
      await post(`http://127.0.0.1:${reps[(rep + 1) % N_REP].port}/slots/0?action=erase`, {});
      if (!scorer) continue;
      const probe = W.systems[s], t0 = performance.now();
      for (;;) {
        const [sc, tr] = await Promise.all([scores(probe), truth(reps, probe)]);
        const got = sc[reps[rep].name] ?? 0;
        if (got <= tr[rep] + 1e-9) { res.drops.push(performance.now() - t0); break; }
        if (performance.now() - t0 > 5000) { res.drops.push(Infinity); break; }
        await sleep(20);
      }
      continue;
    }
    let prompt, n = 16, agent = null;
    if (st.kind === 'turn') {
      agent = agents[st.agent];
      // A transcript near the context's end: the agent starts its next task.
      if (agent.transcript && agent.transcript.length + st.user.length + n > Number(a['max-prompt']))
        agent.transcript = null;
      prompt = [...(agent.transcript ?? W.systems[agent.sys]), ...st.user];
    } else if (st.kind === 'subagent') {
      prompt = [...W.systems[st.sys], ...st.task];
    } else {
      const t = agents[st.agent].transcript ?? W.systems[agents[st.agent].sys];
      prompt = [...t.slice(0, Math.max(t.length - st.cut, 1)), ...st.tail];
      n = 4;
    }
    let target;
    if (scorer) {
      const ls = await lookups(reps, prompt), tr = ls.map((l) => l.n_blocks);
      const best = Math.max(...tr);
      if (best > 0) {
        const w = ls[tr.indexOf(best)].where;
        res.where[w] = (res.where[w] ?? 0) + 1;
      }
      let sc = await scores(prompt), p = pick(reps.map((r) => sc[r.name] ?? 0), turn);
      const ok = () => best === 0 ? p.cold : tr[p.i] === best;
      const atOnce = ok();
      const t0 = performance.now();
      while (!ok() && performance.now() - t0 < 1000) {
        await sleep(25);
        sc = await scores(prompt);
        p = pick(reps.map((r) => sc[r.name] ?? 0), turn);
      }
      res.right += atOnce;
      res.right_1s += ok();
      res.warm += best > 0;
      res.cold_llmd += p.cold;
      target = p.i;
      res.floor += prompt.length - ls[target].n_cached;   /* what the picked replica must evaluate at least */
    } else {
      target = turn % N_REP;
    }
    turn++;
    const out = await complete(reps[target].port, prompt, n);
    if (agent) agent.transcript = [...prompt, ...out.tokens];
    res.ttft.push(out.ttft);
    res.prompt_n += out.prompt_n;
    if (process.env.LLMD_DEBUG) console.log(st.kind, prompt.length, out.tokens.length, out.prompt_n, scorer ? res.floor : "");
    res.n++;
  }
  await Promise.all(reps.map((r) => stop(r.p)));
  if (scorer) await stop(scorer);
  return res;
}

const results = [];
for (const m of a.modes.split(',')) results.push(await run(m));
console.log(`model ${a.model}; ${N_REP} replicas (-t 1 -np 4 -c ${a.ctx} --cache-ram ${a['cache-ram']}); ` +
            `${a.requests} requests, ${a.agents} agents, seed ${a.seed}`);
for (const r of results) {
  console.log(`${r.mode}: prompt tokens evaluated ${r.prompt_n}, time to first token p50 ${median(r.ttft).toFixed(1)} ms` +
              (r.mode === 'llm-d'
                ? ` (the picked replicas' lookups said ${r.floor} at least)` +
                  `; llm-d picked the replica with the longest cached prefix for ${r.right}/${r.n} at once, ` +
                  `${r.right_1s}/${r.n} within 1 s (${r.warm} with a cached prefix somewhere, held in ` +
                  `${Object.entries(r.where).map(([k, v]) => `${k} ${v}`).join(', ')}; ${r.cold_llmd} scored 0 everywhere); ` +
                  `blocks dropped from llm-d's index after a release/erase in ${r.drops.map((d) => d.toFixed(0)).join(', ')} ms`
                : ''));
}
const L = results.find((r) => r.mode === 'llm-d'), R = results.find((r) => r.mode === 'rr');
if (L && R)
  console.log(`llm-d / round-robin: prompt tokens ${(L.prompt_n / R.prompt_n).toFixed(3)}, ` +
              `time to first token p50 ${(median(L.ttft) / median(R.ttft)).toFixed(3)}`);
