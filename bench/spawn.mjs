// bench/spawn.mjs - the admission issue's spawn ramp against one polykv
// server (docs/admission.md): how three spawners keep agents above a speed
// floor on one pool.
//
//   node bench/spawn.mjs --url http://127.0.0.1:8080 [--floor F | --knee-from K [--floor-at F]] [--margin-scale X]
//                        [--knee-min 1] [--knee-max 6] [--knee-stagger [--knee-window-s 20]]
//                        [--agents 8] [--every-s 3]
//                        [--seed S] [--strategies naive,advisory,enforced] [--json] [--trace FILE]
//   (--floor skips the knee; FILE gets every sample and admit, as JSON,
//   and for enforced what /capacity said at each sample: the gate's inputs
//   as a reader sees them; --verbose logs every turn to stderr)
//
//   knee:      mean session tok/s with --knee-min..--knee-max agents at
//              work together (the agents below, turn prompts and pauses
//              included; --knee-stagger: in flight, staggered, knee() says
//              how): the curve
//              the floor is read from.  --floor defaults to the knee,
//              halfway down the step where one more agent costs most, so
//              the count before the step is above the floor and the one
//              after it below, each by half the step; --knee-from K takes
//              the steepest step from K agents on (the first step is
//              often the steepest: a floor between one agent and two
//              makes every gate run the agents one at a time), and
//              --floor-at F puts the floor F of the step above the lower
//              count instead of half (a gate keeps a margin of the
//              mean's spread under its projection, so with the floor
//              half a step under K agents' mean and a spread wider than
//              that, it holds K - 1; --margin-scale X sets the
//              policy's floor_margin_scale, the part of that margin it
//              keeps).
//   recheck:   after the strategies, the two counts the floor sits
//              between are read again: "floor stable" unless either moved
//              by more than its distance from the floor (then the run is
//              to discard)
//   naive:     a spawn every --every-s seconds up to --agents
//   advisory:  the same, but each spawn waits until GET /capacity says
//              can_admit (polling every 250 ms; "measurement settling" waits)
//   enforced:  the pool's policy is enforced + queue: the spawner just
//              sends, the server holds what it cannot take yet
//
// Each agent: --turns turns of --reply tokens with a --pause-ms pause
// between them (a tool call), continuing its own session (session_id).
// /polykv/tps is sampled every 100 ms: time with the mean under the floor,
// deep time (under half of it), work done (tokens), and for every admit the
// projected mean (the capacity answer just before; for enforced, the one
// the server's gate compared, from its admission events) against the
// realized one (the mean 3-4 s after, and 3-8 s after: strategy() says why).
import { parseArgs } from 'node:util';

import { SYSTEM as system, words } from './spawn_workload.mjs';

const { values: a } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' },
  floor: { type: 'string' },
  agents: { type: 'string', default: '8' },
  'every-s': { type: 'string', default: '3' },
  turns: { type: 'string', default: '5' },
  reply: { type: 'string', default: '96' },
  'pause-ms': { type: 'string', default: '1500' },
  'knee-max': { type: 'string', default: '6' },
  'knee-from': { type: 'string', default: '1' },
  'knee-min': { type: 'string', default: '1' },
  'knee-window-s': { type: 'string', default: '20' },
  'knee-stagger': { type: 'boolean', default: false },
  'floor-at': { type: 'string', default: '0.5' },
  'margin-scale': { type: 'string', default: '1' },
  seed: { type: 'string' },
  trace: { type: 'string' },
  strategies: { type: 'string', default: 'naive,advisory,enforced' },
  verbose: { type: 'boolean', default: false },
  json: { type: 'boolean', default: false },
} });
const url = a.url, N = Number(a.agents), TURNS = Number(a.turns), REPLY = Number(a.reply);
const PAUSE = Number(a['pause-ms']), EVERY = Number(a['every-s']) * 1000;
const KNEE_WINDOW = Number(a['knee-window-s']) * 1000;
/* Every run's agents are new to the server: their session ids and prompts
 * carry the run's seed.  With the same ones, a second run against the same
 * server finds every turn cached from the first (1 prompt token a turn
 * instead of 40-130) and every agent a known session, never gated. */
const SEED = a.seed ? Number(a.seed) : Date.now() % 1000000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* node:http, not fetch: a request the enforced gate holds for minutes
 * must not meet fetch's 300 s headers timeout. */
const http = await import('node:http');
function req(method, path, body) {
  return new Promise((resolve, reject) => {
    const data = body ? JSON.stringify(body) : undefined;
    const r = http.request(url + path, { method, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(text); } catch {}
        resolve({ status: res.statusCode, json, text, headers: { get: (k) => res.headers[k.toLowerCase()] } });
      });
    });
    r.on('error', reject);
    r.end(data);
  });
}

async function complete(prompt, pool, session, n) {
  for (;;) {
    const r = await req('POST', '/completion', { prompt, pool_id: pool, session_id: session, n_predict: n,
                                                 ignore_eos: true, temperature: 0 });
    if (r.status === 200) return r.json;
    if (r.status !== 429) throw new Error(`/completion: ${r.status} ${r.text}`);
    await sleep(1000 * Number(r.headers.get('retry-after') || 1));
  }
}

/* Agents in flight: placed by the server (their session seen running)
 * and not finished, pausing between turns included.  The knee's n-agent
 * points are n agents in flight with their turns and pauses, and a gate
 * admits agents, not turns: this is the count a gate holds.  An agent
 * placed and finished between two samples is not counted. */
const live = new Set(), finishedIds = new Set();

/* /polykv/tps every 100 ms until stop(): the mean session speed over
 * time.  For enforced, the server's admits (its admission events carry the
 * time and the projection the gate compared; the ring is short, so it is
 * read as it goes). */
function sampler(pool, t0wall, admitsOf, prefix) {
  const samples = [], seen = new Set(), placed = new Set();
  let stop = false;
  const done = (async () => {
    while (!stop) {
      const t = (await req('GET', '/polykv/tps')).json;
      /* n: the sessions in the mean (decoding and warm).  Where the only
       * decoding ones are in their first tokens the mean is undefined, not
       * 0 (a lone agent's every turn start was counted as deep time). */
      const sample = { t: performance.now(), mean: t.mean_active_tps,
                       n: t.sessions.filter((s) => s.state === 'decode' && !s.warming).length,
                       w: t.sessions.filter((s) => s.state === 'decode' && s.warming).length,
                       pre: t.sessions.filter((s) => s.state === 'prefill').length };
      for (const s of t.sessions) {
        if (s.session_id && !finishedIds.has(s.session_id)) live.add(s.session_id);
        if (prefix && s.session_id?.startsWith(prefix)) placed.add(s.session_id);
      }
      sample.live = live.size;
      sample.placed = placed.size;
      if (a.trace && admitsOf) {   /* what a reader is told at each sample: the gate's inputs, for the trace */
        const c = (await req('GET', `/polykv/pools/${pool}/capacity`)).json;
        sample.cap = { proj: c.projected_mean_tps_if_admitted, basis: c.projection_basis, M: c.mean_active_tps,
                       Ml: c.mean_long_tps, d: c.decoding_share, p: c.prompt_share, x: c.decoders_if_admitted,
                       m: c.floor_margin_tps, n: c.n_active, paused: c.n_paused, settling: c.settling,
                       curve: c.load_curve, knee: c.knee, kl: c.knee_level, ksd: c.knee_low_sd };
      }
      samples.push(sample);
      if (admitsOf) {
        for (const e of (await req('GET', '/polykv/cache')).json.events) {
          const key = `${e.ts}/${e.id_task}/${e.kind}/${e.decision}`;
          if (e.kind !== 'admission_decision' || e.decision !== 'admit' || e.pool_id !== pool || seen.has(key)) continue;
          seen.add(key);
          if (e.ts >= t0wall) admitsOf.push({ t: e.ts - performance.timeOrigin, projected: e.projected_tps });
        }
      }
      await sleep(100);
    }
  })();
  return { samples, stop: async () => { stop = true; await done; } };
}

/* Time-weighted over the samples where someone decodes: busy time, the
 * mean speed over it, the time under a floor and under half of it, and
 * the mean count of sessions decoding (warm), of those running at all
 * (decoding, warming up or reading a turn's prompt) and of agents in
 * flight (above). */
function summarize(samples, floor) {
  let under = 0, deep = 0, busy = 0, area = 0, agents = 0, running = 0, inflight = 0;
  for (let i = 1; i < samples.length; i++) {
    const dt = samples[i].t - samples[i - 1].t, s = samples[i - 1];
    if (s.n === 0) continue;
    busy += dt;
    area += s.mean * dt;
    agents += s.n * dt;
    running += (s.n + (s.w || 0) + (s.pre || 0)) * dt;
    inflight += (s.live || 0) * dt;
    if (s.mean < floor) under += dt;
    if (s.mean < floor / 2) deep += dt;
  }
  return { busy, under, deep, mean: busy ? area / busy : 0, agents: busy ? agents / busy : 0,
           running: busy ? running / busy : 0, inflight: busy ? inflight / busy : 0 };
}

/* One agent: TURNS turns of REPLY tokens, a PAUSE (a tool call) between
 * them, continuing its own session. */
const T0 = performance.now();
const log = (msg) => { if (a.verbose) console.error(`${((performance.now() - T0) / 1000).toFixed(1)} s: ${msg}`); };
async function agent(pool, id, k) {
  let ctx = system + `\nAgent ${id}: ` + words(40, SEED + 100 + k);
  let tokens = 0;
  for (let turn = 0; turn < TURNS; turn++) {
    log(`${id} turn ${turn} sent`);
    const j = await complete(ctx, pool, id, REPLY);
    log(`${id} turn ${turn} done (${j.timings.prompt_n} prompt tokens, ${j.timings.predicted_per_second.toFixed(1)} tok/s)`);
    tokens += j.tokens_predicted;
    ctx += j.content + '\nTool result: ' + words(20, SEED + 1000 * k + turn);
    if (turn + 1 < TURNS) await sleep(PAUSE);
  }
  finishedIds.add(id);
  live.delete(id);
  return tokens;
}

/* ---- the knee ----
 * The curve the floor is read from, on the workload itself: n agents
 * started together, the mean session speed over the time anyone decodes
 * (turn prompts and pauses included, as in the strategies below).
 * Started together, they decode together: the curve is that of n
 * sessions decoding at once, the count the controller charges.  (Spread
 * over a turn's cycle, as once tried, two agents rarely decoded at once
 * and read 35.7 tok/s beside one's 36.1: the floor landed on a lone
 * agent's speed.)
 *
 * --knee-stagger measures the regime a gate runs instead: n agents in
 * flight with their turns staggered as a ramp leaves them.  n loops run
 * agents back to back, loop i starting i/n of an agent's life after the
 * first (the life is measured once, one agent alone); the mean is taken
 * over --knee-window-s seconds from half a life after the last loop
 * started, then the loops finish the agents they run.  In step, n
 * agents read their prompts in one batch and pause together: three read
 * 40.7 tok/s where a gate holding three staggered ones measured 38.1 (a
 * Xeon run, 200-token turns), and each agent's prompt slows the others. */
let LIFE = 0;
async function knee(pool, maxN, minN, tag) {
  const curve = [];
  if (a['knee-stagger'] && !LIFE) {
    const t = performance.now();
    await agent(pool, `${tag}-${SEED}-life`, 0);
    LIFE = performance.now() - t;
  }
  for (let n = minN; n <= maxN; n++) {
    const sm = sampler(pool, 0, null);
    let from = 0, to = Infinity;
    if (a['knee-stagger']) {
      from = performance.now() + LIFE * ((n - 1) / n + 0.5);
      to = from + KNEE_WINDOW;
      await Promise.all([...Array(n).keys()].map(async (k) => {
        await sleep(LIFE * k / n);
        for (let it = 0; performance.now() < to; it++) await agent(pool, `${tag}-${SEED}-${n}-${k}-${it}`, k + 10 * it);
      }));
    } else {
      await Promise.all([...Array(n).keys()].map((k) => agent(pool, `${tag}-${SEED}-${n}-${k}`, k)));
    }
    await sm.stop();
    const sum = summarize(sm.samples.filter((x) => x.t >= from && x.t <= to), 0);
    curve.push({ n, mean_tps: sum.mean, decoding: sum.agents, inflight: sum.inflight });
  }
  return curve;
}

/* ---- one strategy ---- */
async function strategy(name, pool, floor) {
  const admits = [];
  let tokens = 0, finished = 0;
  const t0 = performance.now();
  const sm = sampler(pool, performance.timeOrigin + t0, name === 'enforced' ? admits : null, `${name}-${SEED}-`);
  const agents = [];
  for (let k = 0; k < N; k++) {
    if (name === 'advisory') {
      for (;;) {
        const c = (await req('GET', `/polykv/pools/${pool}/capacity?expected_tokens=${REPLY * TURNS + 200}`)).json;
        if (c.can_admit) {
          admits.push({ t: performance.now(), projected: c.projected_mean_tps_if_admitted, cap: c });
          break;
        }
        await sleep(c.settling ? Math.max(100, c.settle_remaining_ms) : 250);
      }
    } else if (name === 'naive') {
      const c = (await req('GET', `/polykv/pools/${pool}/capacity`)).json;
      admits.push({ t: performance.now(), projected: c.projected_mean_tps_if_admitted, cap: c });
    }
    agents.push(agent(pool, `${name}-${SEED}-${k}`, k).then((t) => { tokens += t; finished++; }));
    if (name !== 'advisory') await sleep(EVERY);
    else await sleep(500);   /* the first capacity poll after a spawn sees it settling */
  }
  await Promise.all(agents);
  await sm.stop();
  const samples = sm.samples, wall = performance.now() - t0;
  const { under, deep, busy, agents: mean_agents, running: mean_running, inflight } = summarize(samples, floor);
  /* While agents wait: up to the sample where the last agent was placed.
   * After it the run drains (fewer agents left than a gate would hold),
   * which says nothing about the gate. */
  const tAll = samples.find((s) => s.placed >= N)?.t ?? Infinity;
  const waiting = summarize(samples.filter((s) => s.t <= tAll), floor);
  /* The realized mean after an admit: over 3-4 s after it (once the
   * admit is absorbed), and over 3-8 s: an agent's turn cycle here is
   * 5-6 s (96 tokens, a 1.5 s pause, its next prompt), and one second of
   * it is one phase of the cycle (admitted as the others' turns begin, a
   * gate's agents run in step, and 3 s later the new one may decode
   * alone), where the projection is of the load. */
  const realized = (ad, to) => {
    const later = samples.filter((s) => s.t >= ad.t + 3000 && s.t <= ad.t + to && s.n > 0);
    return later.length ? later.reduce((s, x) => s + x.mean, 0) / later.length : null;
  };
  const median = (to) => {
    const errs = [];
    for (const ad of admits) {
      const real = ad.projected == null ? null : realized(ad, to);
      if (real) errs.push(Math.abs(ad.projected - real) / real);
    }
    errs.sort((x, y) => x - y);
    return { err: errs.length ? errs[Math.floor(errs.length / 2)] : null, n: errs.length };
  };
  const e4 = median(4000), e8 = median(8000);
  if (a.trace) traces.push({ name, t0, samples, admits });
  return { name, wall_s: wall / 1000, tokens, finished, under_floor_s: under / 1000, deep_s: deep / 1000,
           busy_s: busy / 1000, mean_decoding_agents: mean_agents, mean_running_agents: mean_running,
           mean_agents_in_flight: inflight, waiting_s: waiting.busy / 1000,
           mean_agents_in_flight_waiting: waiting.inflight, mean_running_agents_waiting: waiting.running,
           median_projection_error: e4.err, n_projection_samples: e4.n,
           median_projection_error_3_8s: e8.err, n_projection_samples_3_8s: e8.n };
}

const traces = [];
const root = await req('POST', '/polykv/pools', { prompt: system });
if (root.status !== 201) throw new Error(root.text);
const pool = root.json.pool_id;
const curve = a.floor ? [] : await knee(pool, Number(a['knee-max']), Number(a['knee-min']), 'knee');
let floor = Number(a.floor), best = 0;
if (!a.floor) {   /* the knee: --floor-at of the way up the step where one more session costs the most */
  /* step i is from curve[i - 1] to curve[i] */
  const from = Math.min(Math.max(1, curve.findIndex((c) => c.n >= Number(a['knee-from'])) + 1), curve.length - 1);
  best = from;
  for (let i = from; i < curve.length; i++)
    if (curve[i - 1].mean_tps - curve[i].mean_tps > curve[best - 1].mean_tps - curve[best].mean_tps) best = i;
  const at = Math.min(Math.max(Number(a['floor-at']), 0.05), 0.95);
  floor = Math.round((curve[best].mean_tps + at * (curve[best - 1].mean_tps - curve[best].mean_tps)) * 10) / 10;
}
const rows = [];
for (const name of a.strategies.split(',')) {
  const policy = name === 'enforced' ? { mode: 'enforced', on_saturation: 'queue', queue_max_ms: 600000 } : { mode: 'advisory' };
  await req('POST', `/polykv/pools/${pool}/admission`, { target_tps_per_session: floor,
                                                          floor_margin_scale: Number(a['margin-scale']), ...policy });
  rows.push(await strategy(name, pool, floor));
}
/* The two counts the floor sits between, read again after the
 * strategies: the machine's speed moves between phases (a lone agent at
 * 52-96 tok/s from one run to the next on a 2-core AMD EPYC VM), and a
 * floor is only where the knee is while the knee stays there.  A count
 * that moved by more than half the step (the floor's distance from it)
 * says the floor was on the other side of it for part of the run: the
 * run compares the gates on a floor that was not where it was set. */
let recheck = null;
if (best > 0) {
  await req('POST', `/polykv/pools/${pool}/admission`, { target_tps_per_session: 0, mode: 'advisory' });
  const again = await knee(pool, curve[best].n, curve[best - 1].n, 'recheck');
  /* each count may move as far as it stood from the floor, either way */
  const room = [curve[best - 1].mean_tps - floor, floor - curve[best].mean_tps];
  const moved = again.map((c, i) => c.mean_tps - curve[best - 1 + i].mean_tps);
  recheck = { curve: again, room, moved, stable: moved.every((m, i) => Math.abs(m) <= room[i]) };
}
if (a.trace) (await import('node:fs')).writeFileSync(a.trace, JSON.stringify({ seed: SEED, curve, floor, recheck, traces }));
if (a.json) console.log(JSON.stringify({ seed: SEED, curve, floor, recheck, rows }));
else {
  console.log(`seed ${SEED}; knee: ` + (curve.length ? '' : 'not measured') + curve.map((c) => `${c.n}: ${c.mean_tps.toFixed(1)}`).join(', ') + ` tok/s; floor ${floor}`);
  if (curve.length)
    console.log(`knee agents in flight / decoding: ` + curve.map((c) => `${c.n}: ${c.inflight.toFixed(2)} / ${c.decoding.toFixed(2)}`).join(', '));
  if (recheck)
    console.log(`knee after: ` + recheck.curve.map((c, i) => `${c.n}: ${c.mean_tps.toFixed(1)} (${recheck.moved[i] >= 0 ? '+' : ''}${recheck.moved[i].toFixed(1)})`).join(', ') +
                ` tok/s; room ${recheck.room.map((r) => r.toFixed(1)).join(' / ')}: ` + (recheck.stable ? 'floor stable' : 'FLOOR MOVED: the machine changed speed during the run'));
  const pct = (x) => x == null ? '-' : (100 * x).toFixed(1) + '%';
  for (const r of rows)
    console.log(`${r.name.padEnd(9)} wall ${r.wall_s.toFixed(1)} s, tokens ${r.tokens}, finished ${r.finished}/${N}, ` +
                `under floor ${r.under_floor_s.toFixed(1)} s, deep ${r.deep_s.toFixed(1)} s of ${r.busy_s.toFixed(1)} s busy ` +
                `(agents on average: ${r.mean_agents_in_flight.toFixed(2)} in flight, ${r.mean_decoding_agents.toFixed(2)} decoding, ` +
                `${r.mean_running_agents.toFixed(2)} decoding or reading a prompt; while agents wait, the first ` +
                `${r.waiting_s.toFixed(1)} s: ${r.mean_agents_in_flight_waiting.toFixed(2)} in flight, ` +
                `${r.mean_running_agents_waiting.toFixed(2)} running), ` +
                `median |projected - realized| ${pct(r.median_projection_error)} (3-4 s), ${pct(r.median_projection_error_3_8s)} (3-8 s)`);
}
