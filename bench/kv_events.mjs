// bench/kv_events.mjs - what KV events cost (docs/kv-events.md): two polykv
// servers on one model, one with events off and one publishing them to a
// subscriber that decodes every batch (pyzmq + msgpack from make test's
// venv), driven in interleaved rounds with the same work:
//   prefill  a new 512-token prompt, 1 token out: timings.prompt_per_second
//   decode   one session, 128 tokens: timings.predicted_per_second
//   agents   4 sessions at once on one 256-token prefix, 64 tokens each:
//            their summed tokens over the wall time
// Medians over --rounds, and the median of each round's on/off ratio (the
// machine's speed drifts between rounds more than events cost).  Only one
// server works at a time (the other's threads sleep).  Then the engine
// thread's own time in events (polykv:kv_events_engine_seconds_total) as a
// share of its prompt and decode time: the cost without the noise.
//
//   node bench/kv_events.mjs [--rounds 7] [--model models/bench/qwen2-0.5b-shape-q8_0.gguf] [-t 2]

import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({ options: {
  rounds: { type: 'string', default: '7' },
  model: { type: 'string', default: 'models/bench/qwen2-0.5b-shape-q8_0.gguf' },
  bin: { type: 'string', default: 'build/polykv' },
  python: { type: 'string', default: 'build/venv/bin/python' },   // make bench installs pyzmq and msgpack there
  threads: { type: 'string', short: 't', default: '2' } } });
if (!existsSync(a.model)) {
  console.error(`${a.model} is absent: bench/run.mjs makes it (or --model PATH)`);
  process.exit(2);
}

const SUB = `
import sys, zmq, msgpack
s = zmq.Context().socket(zmq.SUB); s.setsockopt(zmq.SUBSCRIBE, b""); s.connect(sys.argv[1])
n = e = 0
while True:
    t, q, p = s.recv_multipart()
    e += len(msgpack.unpackb(p)[1]); n += 1
    if n % 100 == 0: print(n, e, flush=True)
`;

function start(args, port) {
  const p = spawn(a.bin, ['serve', '-m', a.model, '--port', String(port), '-t', a.threads, '-np', '4', '-c', '8192',
                          '--metrics', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  p.stderr.on('data', () => {});
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const poll = async () => {
      try {
        if ((await fetch(`http://127.0.0.1:${port}/health`)).status === 200) return resolve(p);
      } catch { /* not yet */ }
      if (Date.now() - t0 > 120000) return reject(new Error('polykv did not start'));
      setTimeout(poll, 100);
    };
    poll();
  });
}
const stop = (p) => new Promise((r) => { p.on('exit', r); p.kill('SIGTERM'); });
async function complete(port, prompt, n, extra = {}) {
  const r = await fetch(`http://127.0.0.1:${port}/completion`, { method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, n_predict: n, temperature: 0, ignore_eos: true, ...extra }) });
  const j = await r.json();
  if (r.status !== 200) throw new Error(JSON.stringify(j));
  return j;
}
const median = (xs) => { const s = [...xs].sort((x, y) => x - y); return s[s.length >> 1]; };
let seed = 1;
const tokens = (n) => Array.from({ length: n }, () => 100 + ((seed = (seed * 1103515245 + 12345) >>> 0) % 20000));

const PORTS = [18471, 18472];
const PUB = 'tcp://*:18473';
const off = await start([], PORTS[0]);
const on = await start(['--kv-events-endpoint', PUB], PORTS[1]);
const sub = spawn(a.python, ['-c', SUB, 'tcp://127.0.0.1:18473'], { stdio: ['ignore', 'pipe', 'inherit'] });
let received = '';
sub.stdout.on('data', (d) => { received = d.toString().trim().split('\n').pop(); });
await new Promise((r) => setTimeout(r, 500));

const rows = { prefill: [[], []], decode: [[], []], agents: [[], []] };
const rounds = Number(a.rounds);
for (let r = 0; r < rounds; r++) {
  for (const k of (r % 2 ? [1, 0] : [0, 1])) {
    const port = PORTS[k];
    rows.prefill[k].push((await complete(port, tokens(512), 1, { cache_prompt: false })).timings.prompt_per_second);
    rows.decode[k].push((await complete(port, tokens(16), 128)).timings.predicted_per_second);
    const prefix = tokens(256), t0 = performance.now();
    const outs = await Promise.all([0, 1, 2, 3].map(() => complete(port, [...prefix, ...tokens(16)], 64)));
    rows.agents[k].push(outs.reduce((s, o) => s + o.tokens_predicted, 0) * 1000 / (performance.now() - t0));
  }
}
console.log(`model ${a.model}, -t ${a.threads}, ${rounds} rounds interleaved; medians (tokens/s)`);
console.log('| work | events off | events on | on / off (medians) | median of round ratios |\n|---|---|---|---|---|');
for (const [name, [x, y]] of Object.entries(rows)) {
  const mo = median(x), mi = median(y), mr = median(x.map((v, i) => y[i] / v));
  console.log(`| ${name} | ${mo.toFixed(1)} | ${mi.toFixed(1)} | ${(mi / mo).toFixed(3)} | ${mr.toFixed(3)} |`);
}
const text = await (await fetch(`http://127.0.0.1:${PORTS[1]}/metrics`)).text();
const metric = (n) => Number(text.match(new RegExp(`^${n} (\\S+)$`, 'm'))[1]);
const ev = metric('polykv:kv_events_engine_seconds_total');
const work = metric('llamacpp:prompt_seconds_total') + metric('llamacpp:tokens_predicted_seconds_total');
console.log(`engine thread in KV events: ${(ev * 1000).toFixed(1)} ms of ${(work * 1000).toFixed(0)} ms of ` +
            `prompt and decode time (${(100 * ev / work).toFixed(3)}%), ${metric('polykv:kv_events_total')} events in ` +
            `${metric('polykv:kv_events_batches_total')} batches, ${metric('polykv:kv_events_dropped_total')} dropped`);
console.log(`subscriber: ${received || 'fewer than 100'} (batches, events) decoded`);
sub.kill();
await Promise.all([stop(off), stop(on)]);
