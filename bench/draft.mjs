// bench/draft.mjs - speculation with a draft model (-md, docs/speculative.md)
// on models where the draft is right and cheap, and on one where it is
// wrong, against no speculation and against llama-server with the same
// files.
//
// The models (gen-model, the qwen2 vocabulary of ../shared, Q8_0, made here
// when missing), for each --shape (Qwen2 0.5B's and 1.5B's): a target whose
// layers after the first add nothing (--pass-through-from 1: zero output
// projections, the residual passes through), the one-layer model of the
// same seed as its exact draft (it computes what the target computes, at
// 31% of the bytes the 0.5B reads and 18% of the 1.5B's, most of it the
// output matrix both have), and a one-layer model of another seed as a
// draft that is always wrong.
//
// polykv: one server per draft (-np 1, -t 2, --spec-draft-n-max K), each
// prompt without and with speculation (speculative.type per request, the
// order alternating by round); then 4 prompts at once on -np 4.
// llama-server (LLAMA_SERVER=path): the same prompts, one process without
// a draft and one with -md, interleaved by round.  Medians over rounds of
// each request's timings.predicted_per_second, and of the ratios of each
// pair (the machine's speed drifts between rounds more than between the
// two runs of a pair); every text is checked equal to the one without
// speculation.
//
// Then the MTP block (--spec-type draft-mtp) on a Qwen3.5 9B-shaped hybrid
// (8 of its layers, Q4_K_M, the Qwen3.5 vocabulary): a trunk that adds
// nothing to the embeddings and a block that passes the next token's
// normed embedding through (--pass-through-from 0 --mtp-agree: the block
// predicts exactly what the trunk will), and the random-weight file of
// bench/run.mjs, whose block is wrong; llama-server with --spec-type
// draft-mtp on the agreeing file.
//
//   node bench/draft.mjs [--rounds 3] [--k 3] [--n 128] [--shape 0.5b,1.5b] [--mtp 9b]
//   LLAMA_SERVER=/path/llama-server LD_LIBRARY_PATH=... node bench/draft.mjs

import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { startServer } from './serve.mjs';

const { values: a } = parseArgs({ options: {
  rounds: { type: 'string', default: '3' },
  k: { type: 'string', default: '3' },
  n: { type: 'string', default: '128' },
  bin: { type: 'string', default: 'build/polykv' },
  dir: { type: 'string', default: 'models/bench' },
  shape: { type: 'string', default: '0.5b,1.5b' },
  mtp: { type: 'string', default: '9b' },
  'mtp-vocab': { type: 'string', default: '../shared/models/vocab/ggml-vocab-qwen35.gguf' },
  vocab: { type: 'string', default: '../shared/models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf' } } });
const N = Number(a.n), K = a.k, rounds = Number(a.rounds);
const PROMPTS = ['Once upon a time', 'The little dog', 'Lily and Tom went to the park', 'One day, a boy named Tim'];
const median = (xs) => { const s = [...xs].sort((x, y) => x - y); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

const SHAPES = {
  '0.5b': ['--n-embd', '896', '--n-head', '14', '--n-head-kv', '2', '--n-ff', '4864', '--n-layer', '24'],
  '1.5b': ['--n-embd', '1536', '--n-head', '12', '--n-head-kv', '2', '--n-ff', '8960', '--n-layer', '28'],
};
/* The three files of a shape, made when missing. */
function models(name) {
  const shape = ['--arch', 'qwen2', ...SHAPES[name], '--ctx', '32768', '--type', 'q8_0', '--vocab', a.vocab];
  const files = {
    target: [`${a.dir}/qwen2-${name}-shape-pass1-q8_0.gguf`, ['--pass-through-from', '1', '--seed', '1']],
    exact: [`${a.dir}/qwen2-${name}-shape-l1-q8_0.gguf`, ['--n-layer', '1', '--seed', '1']],
    wrong: [`${a.dir}/qwen2-${name}-shape-l1-seed2-q8_0.gguf`, ['--n-layer', '1', '--seed', '2']],
  };
  mkdirSync(a.dir, { recursive: true });
  for (const [path, args] of Object.values(files)) {
    if (existsSync(path)) continue;
    if (!existsSync(a.vocab)) { console.log(`${a.vocab} not found (the models need its vocabulary)`); process.exit(1); }
    console.log(`making ${path}`);
    const r = spawnSync(a.bin, ['gen-model', ...shape, ...args, '-o', path], { stdio: 'inherit' });
    if (r.status !== 0) process.exit(1);
  }
  return [files.target[0], files.exact[0], files.wrong[0]];
}
const died = (why) => { console.error(why); process.exit(1); };

async function complete(url, prompt, extra) {
  const r = await fetch(`${url}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, n_predict: N, temperature: 0, cache_prompt: false, ignore_eos: true, ...extra }) });
  return r.json();
}

/* One polykv server with draft d (or null: the model's MTP block): per
 * prompt, without and with. */
async function polykv(target, d) {
  const spec = d ? ['-md', d] : ['--spec-type', 'draft-mtp'];
  const s = await startServer(a.bin, ['-m', target, ...spec, '--spec-draft-n-max', K, '--port', '0', '-np', '1',
                                      '-c', '4096', '-t', '2'], 'draft bench', died);
  const res = { off: [], on: [], ratio: [] }, acc = [0, 0];
  let diff = 0;
  await complete(s.url, 'warm-up', { n_predict: 16 });
  for (let r = 0; r < rounds; r++) {
    for (const p0 of PROMPTS) {
      const p = `${p0} (${r})`, x = {};
      for (const mode of r % 2 ? ['on', 'off'] : ['off', 'on'])
        x[mode] = await complete(s.url, p, mode === 'off' ? { 'speculative.type': 'none' } : {});
      res.off.push(x.off.timings.predicted_per_second);
      res.on.push(x.on.timings.predicted_per_second);
      res.ratio.push(x.on.timings.predicted_per_second / x.off.timings.predicted_per_second);
      acc[0] += x.on.timings.draft_n_accepted || 0;
      acc[1] += x.on.timings.draft_n || 0;
      diff += x.on.content !== x.off.content;
    }
  }
  /* 4 sessions at once: every request's tokens over the wall time. */
  await s.stop();
  const s4 = await startServer(a.bin, ['-m', target, ...spec, '--spec-draft-n-max', K, '--port', '0', '-np', '4',
                                       '-c', '8192', '-t', '2'], 'draft bench', died);
  const agg = { off: [], on: [], ratio: [] };
  for (let r = 0; r < rounds; r++) {
    for (const mode of r % 2 ? ['on', 'off'] : ['off', 'on']) {
      const t0 = performance.now();
      const xs = await Promise.all(PROMPTS.map((p0) => complete(s4.url, `${p0} [${r}]`,
        mode === 'off' ? { 'speculative.type': 'none' } : {})));
      agg[mode].push(xs.reduce((n, x) => n + x.timings.predicted_n, 0) / ((performance.now() - t0) / 1000));
    }
    agg.ratio.push(agg.on.at(-1) / agg.off.at(-1));
  }
  await s4.stop();
  return { off: median(res.off), on: median(res.on), ratio: median(res.ratio), acc: acc[0] / Math.max(acc[1], 1),
           drafted: acc[1] / res.on.length, diff, agg_off: median(agg.off), agg_on: median(agg.on),
           agg_ratio: median(agg.ratio) };
}

/* llama-server on target, without speculation and with args, interleaved
 * by round: medians, acceptance, texts differing. */
async function llama(target, args) {
  const ll = { off: [], on: [] }, acc = [0, 0];
  let diff = 0;
  for (let r = 0; r < rounds; r++) {
    const texts = {};
    for (const mode of r % 2 ? ['on', 'off'] : ['off', 'on']) {
      const base = ['-m', target, '--port', '18195', '-np', '1', '-c', '4096', '-t', '2', '--no-warmup'];
      const ls = await startLlama(mode === 'on' ? [...base, ...args] : base);
      texts[mode] = [];
      for (const p0 of PROMPTS) {
        const x = await complete('http://127.0.0.1:18195', `${p0} (${r})`, {});
        ll[mode].push(x.timings.predicted_per_second);
        texts[mode].push(x.content);
        if (mode === 'on') { acc[0] += x.timings.draft_n_accepted || 0; acc[1] += x.timings.draft_n || 0; }
      }
      await ls.stop();
    }
    diff += texts.on.filter((t, i) => t !== texts.off[i]).length;
  }
  return { off: median(ll.off), on: median(ll.on), acc: acc[0] / Math.max(acc[1], 1), diff };
}

const line = (what, x) => {
  console.log(`${what}: without ${x.off.toFixed(1)} tok/s, with ${x.on.toFixed(1)} tok/s: ${(x.on / x.off).toFixed(2)}x ` +
              `(median of paired ratios ${x.ratio.toFixed(2)}); ` +
              `acceptance ${x.acc.toFixed(2)}, ${x.drafted.toFixed(1)} guesses per ${N}-token request; texts differing: ${x.diff}`);
  console.log(`  4 sessions at once: without ${x.agg_off.toFixed(1)} tok/s, with ${x.agg_on.toFixed(1)} tok/s: ` +
              `${(x.agg_on / x.agg_off).toFixed(2)}x (paired ${x.agg_ratio.toFixed(2)})`);
};

for (const name of a.shape.split(',').filter(Boolean)) {
  const [target, exact, wrong] = models(name);
  const ex = await polykv(target, exact), wr = await polykv(target, wrong);
  console.log(`polykv, ${target}, k = ${K}, ${PROMPTS.length} prompts x ${rounds} rounds, ${N} tokens, -t 2 (medians):`);
  line('  the exact draft', ex);
  line('  a wrong draft', wr);

  if (process.env.LLAMA_SERVER) {
    const ll = await llama(target, ['-md', exact, '--spec-type', 'draft-simple', '--spec-draft-n-max', K, '-td', '2']);
    console.log(`llama-server, the same files and prompts: without ${ll.off.toFixed(1)} tok/s, -md exact draft ` +
                `${ll.on.toFixed(1)} tok/s: ${(ll.on / ll.off).toFixed(2)}x; acceptance ${ll.acc.toFixed(2)}; ` +
                `texts differing: ${ll.diff}`);
    console.log(`polykv / llama-server with the exact draft: ${(ex.on / ll.on).toFixed(2)}x`);
  }
}

if (a.mtp === '9b') {
  const hybrid = ['--arch', 'qwen35', '--n-embd', '4096', '--n-head-kv', '4', '--n-ff', '12288', '--ssm-groups', '16',
                  '--ssm-heads', '32', '--ssm-state', '128', '--ssm-conv', '4', '--n-head', '16', '--head-dim', '256',
                  '--n-layer', '8', '--rope-base', '10000000', '--untied', '--ctx', '32768', '--type', 'q4_k_m',
                  '--vocab', a['mtp-vocab'], '--seed', '1'];
  const agree = `${a.dir}/qwen35-9b-shape-l8-pass0-mtp-q4_k_m.gguf`, random = `${a.dir}/qwen35-9b-shape-l8-q4_k_m.gguf`;
  for (const [path, extra] of [[agree, ['--pass-through-from', '0', '--mtp-agree']], [random, []]]) {
    if (existsSync(path)) continue;
    if (!existsSync(a['mtp-vocab'])) { console.log(`${a['mtp-vocab']} not found`); process.exit(1); }
    console.log(`making ${path}`);
    if (spawnSync(a.bin, ['gen-model', ...hybrid, ...extra, '-o', path], { stdio: 'inherit' }).status !== 0) process.exit(1);
  }
  const ag = await polykv(agree, null), rn = await polykv(random, null);
  console.log(`polykv, the MTP block of a Qwen3.5 9B shape (8 layers, Q4_K_M), k = ${K}, ${PROMPTS.length} prompts x ` +
              `${rounds} rounds, ${N} tokens, -t 2 (medians):`);
  line('  a block that agrees', ag);
  line('  a block of random weights', rn);
  if (process.env.LLAMA_SERVER) {
    const ll = await llama(agree, ['--spec-type', 'draft-mtp', '--spec-draft-n-max', K]);
    console.log(`llama-server, the agreeing file: without ${ll.off.toFixed(1)} tok/s, draft-mtp ${ll.on.toFixed(1)} ` +
                `tok/s: ${(ll.on / ll.off).toFixed(2)}x; acceptance ${ll.acc.toFixed(2)}; texts differing: ${ll.diff}`);
    console.log(`polykv / llama-server with the MTP block: ${(ag.on / ll.on).toFixed(2)}x`);
  }
}

async function startLlama(args) {
  const { spawn } = await import('node:child_process');
  const p = spawn(process.env.LLAMA_SERVER, args, { stdio: ['ignore', 'ignore', 'ignore'] });
  const t0 = Date.now();
  for (;;) {
    const r = await fetch('http://127.0.0.1:18195/health').catch(() => null);
    if (r?.status === 200) break;
    if (Date.now() - t0 > 120000) died('llama-server did not start');
    await new Promise((res) => setTimeout(res, 100));
  }
  return { stop: () => new Promise((res) => { p.on('exit', res); p.kill('SIGTERM'); }) };
}
