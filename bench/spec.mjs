// bench/spec.mjs - speculative decoding's speed (docs/speculative.md): one
// session at a time, 8 story prompts, 256-token greedy answers on
// stories260K, each prompt's decode speed (timings.predicted_per_second:
// tokens the client got per second) without speculation, with it on a
// prompt the server has not written before ("fresh": only its own context
// and the other prompts' generations to guess from), and with it on a
// repeat of a prompt ("repeat": a retried request).  The three modes are
// interleaved per prompt on one polykv server (speculative.type per
// request); llama-server, when LLAMA_SERVER names its binary, runs the same
// prompts twice each (fresh, then a repeat) per --spec-type in its own
// process, interleaved by round.
// Medians over --rounds rounds, and the paired median: of each request's
// speed over the speed of the same prompt without speculation, run next to
// it (what the machine's drift between requests leaves alone).  A round
// r prompt's store holds the rounds before it: stories the model wrote
// for the same openings.  The text of every run is checked equal to the
// run without speculation.
//
// Then the 8 prompts at once (-np 8): the sum of their tokens over the
// wall time of the 8, in the three modes.  Then on each --repeat-model
// that exists (bench/run.mjs makes them: the 0.5B-shaped qwen2 Q8_0 and
// the 9B-shaped Qwen3.5 hybrid Q4_K_M, random weights), -t 2, 4 prompts,
// --repeat-n tokens: each prompt with speculation first (random weights:
// what guessing costs where little is right), then without, then repeated
// with speculation.
//
//   node bench/spec.mjs [--rounds 5] [--model ../shared/models/stories260K.gguf]
//   LLAMA_SERVER=/path/llama-server LD_LIBRARY_PATH=... node bench/spec.mjs

import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({ options: {
  rounds: { type: 'string', default: '5' },
  model: { type: 'string', default: '../shared/models/stories260K.gguf' },
  bin: { type: 'string', default: 'build/polykv' },
  n: { type: 'string', default: '256' },
  'repeat-model': { type: 'string',
                    default: 'models/bench/qwen2-0.5b-shape-q8_0.gguf,models/bench/qwen35-9b-shape-l8-q4_k_m.gguf' },
  'repeat-n': { type: 'string', default: '128' } } });
const PROMPTS = ['Once upon a time', 'The little dog', 'Lily and Tom went to the park', 'One day, a boy named Tim',
                 'The sun was shining', 'There was a big red ball', 'Sue wanted to fly a kite', 'The cat sat on the mat'];
const N = Number(a.n);

function start(bin, args, port) {
  const p = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  p.stderr.on('data', () => {});
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const poll = async () => {
      try {
        if ((await fetch(`http://127.0.0.1:${port}/health`)).status === 200) return resolve(p);
      } catch { /* not yet */ }
      if (Date.now() - t0 > 60000) return reject(new Error(`${bin} did not start`));
      setTimeout(poll, 100);
    };
    poll();
  });
}
const stop = (p) => new Promise((r) => { p.on('exit', r); p.kill('SIGTERM'); });
async function complete(port, prompt, extra) {
  const r = await fetch(`http://127.0.0.1:${port}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, n_predict: N, temperature: 0, cache_prompt: false, ignore_eos: true, ...extra }) });
  return r.json();
}
const median = (xs) => { const s = [...xs].sort((x, y) => x - y); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

const rounds = Number(a.rounds);
const res = { off: [], fresh: [], repeat: [] };
const paired = { fresh: [], repeat: [] };   // each request's speed over the same prompt's without, run beside it
const acc = { fresh: [0, 0], repeat: [0, 0] };
let mismatches = 0;
const pk = await start(a.bin, ['serve', '-m', a.model, '--port', '18191', '-np', '1', '-c', '2048', '-t', '1',
                               '--spec-type', 'ngram-cache'], 18191);
for (let r = 0; r < rounds; r++) {
  for (const [i, p0] of PROMPTS.entries()) {
    const p = `${p0} (${r})`;            // a prompt the store has not seen: "fresh" guesses from other texts only
    const fresh = await complete(18191, p, {});
    const off = await complete(18191, p, { 'speculative.type': 'none' });
    const repeat = await complete(18191, p, {});
    paired.fresh.push(fresh.timings.predicted_per_second / off.timings.predicted_per_second);
    paired.repeat.push(repeat.timings.predicted_per_second / off.timings.predicted_per_second);
    for (const [k, x] of [['off', off], ['fresh', fresh], ['repeat', repeat]]) {
      res[k].push(x.timings.predicted_per_second);
      if (k !== 'off') { acc[k][0] += x.timings.draft_n_accepted || 0; acc[k][1] += x.timings.draft_n || 0; }
      if (x.content !== off.content) mismatches++;
    }
    void i;
  }
}
const pk8 = await start(a.bin, ['serve', '-m', a.model, '--port', '18194', '-np', '8', '-c', '8192', '-t', '1',
                                '--spec-type', 'ngram-cache'], 18194);
const agg = { off: [], fresh: [], repeat: [] };
for (let r = 0; r < rounds; r++) {
  for (const [k, extra] of [['fresh', {}], ['off', { 'speculative.type': 'none' }], ['repeat', {}]]) {
    const t0 = performance.now();
    const rs = await Promise.all(PROMPTS.map((p0) => complete(18194, `${p0} [${r}]`, extra)));
    const secs = (performance.now() - t0) / 1000;
    agg[k].push(rs.reduce((n, x) => n + x.timings.predicted_n, 0) / secs);
  }
}
await stop(pk8);
await stop(pk);
const m = { off: median(res.off), fresh: median(res.fresh), repeat: median(res.repeat) };
console.log(`polykv, 1 session, ${PROMPTS.length} prompts x ${rounds} rounds, ${N} tokens (medians of per-request tok/s):`);
console.log(`  no speculation   ${m.off.toFixed(0)} tok/s`);
for (const k of ['fresh', 'repeat'])
  console.log(`  ngram-cache ${k.padEnd(6)} ${m[k].toFixed(0)} tok/s  ${(m[k] / m.off).toFixed(2)}x  ` +
              `(paired median ${median(paired[k]).toFixed(2)}x)  acceptance ${(acc[k][0] / Math.max(acc[k][1], 1)).toFixed(2)}`);
console.log(`  texts differing from the run without speculation: ${mismatches}`);
const m8 = { off: median(agg.off), fresh: median(agg.fresh), repeat: median(agg.repeat) };
console.log(`polykv, the 8 prompts at once (-np 8), tokens of all 8 over their wall time: no speculation ` +
            `${m8.off.toFixed(0)} tok/s, fresh ${m8.fresh.toFixed(0)} (${(m8.fresh / m8.off).toFixed(2)}x), ` +
            `repeat ${m8.repeat.toFixed(0)} (${(m8.repeat / m8.off).toFixed(2)}x)`);

if (process.env.LLAMA_SERVER) {
  const types = ['none', 'ngram-simple', 'ngram-map-k', 'ngram-mod'];
  const ll = Object.fromEntries(types.map((t) => [t, []])), llf = Object.fromEntries(types.map((t) => [t, []]));
  for (let r = 0; r < rounds; r++) {
    for (const t of types) {
      const args = ['-m', a.model, '--port', '18192', '-np', '1', '-c', '2048', '-t', '1', '--no-warmup'];
      if (t !== 'none') args.push('--spec-type', t);
      const ls = await start(process.env.LLAMA_SERVER, args, 18192);
      for (const p0 of PROMPTS) {
        const p = `${p0} (${r})`;
        llf[t].push((await complete(18192, p, {})).timings.predicted_per_second);   // fresh; then what it wrote
        ll[t].push((await complete(18192, p, {})).timings.predicted_per_second);    // for a repeat
      }
      await stop(ls);
    }
  }
  console.log('llama-server, the same prompts: the first run of each (fresh), then the prompt again (a repeat):');
  for (const t of types) console.log(`  ${t.padEnd(13)} fresh ${median(llf[t]).toFixed(0)} tok/s, repeat ${median(ll[t]).toFixed(0)} tok/s`);
}

const RN = Number(a['repeat-n']);
for (const model of a['repeat-model'].split(',').filter((f) => existsSync(f))) {
  const rp = await start(a.bin, ['serve', '-m', model, '--port', '18193', '-np', '1', '-c', '4096', '-t', '2',
                                 '--spec-type', 'ngram-cache'], 18193);
  const rr = { off: [], on: [], fresh: [] }, ra = [0, 0], fa = [0, 0];
  let diff = 0;
  for (let r = 0; r < rounds; r++) {
    for (const p0 of PROMPTS.slice(0, 4)) {
      const p = `${p0} (${r})`;
      const fresh = await complete(18193, p, { n_predict: RN });          // the first time: guesses from other texts, then into the store
      const off = await complete(18193, p, { 'speculative.type': 'none', n_predict: RN });
      const on = await complete(18193, p, { n_predict: RN });
      rr.fresh.push(fresh.timings.predicted_per_second);
      fa[0] += fresh.timings.draft_n_accepted || 0;
      fa[1] += fresh.timings.draft_n || 0;
      diff += fresh.content !== off.content;
      rr.off.push(off.timings.predicted_per_second);
      rr.on.push(on.timings.predicted_per_second);
      ra[0] += on.timings.draft_n_accepted || 0;
      ra[1] += on.timings.draft_n || 0;
      diff += on.content !== off.content;
    }
  }
  await stop(rp);
  const off = median(rr.off), on = median(rr.on), fr = median(rr.fresh);
  console.log(`${model}, -t 2, a repeated request (4 prompts x ${rounds} rounds, ${RN} tokens):`);
  console.log(`  without speculation ${off.toFixed(1)} tok/s, ngram-cache ${on.toFixed(1)} tok/s: ${(on / off).toFixed(2)}x, ` +
              `acceptance ${(ra[0] / Math.max(ra[1], 1)).toFixed(2)}; texts differing: ${diff}`);
  console.log(`  a prompt not seen before: ngram-cache ${fr.toFixed(1)} tok/s, ${(fr / off).toFixed(2)}x, ${fa[1]} guesses, ` +
              `acceptance ${(fa[0] / Math.max(fa[1], 1)).toFixed(2)}`);
}
