// bench/run.mjs - `make bench`: machine limits, then polykv's prefill and
// decode speed on Qwen2.5-0.5B-shaped random-weight models in Q8_0, Q4_0 and
// Q4_K_M, side by side with llama.cpp's llama-bench when LLAMA_CPP_BIN names
// a directory holding it (built beside the project, never committed).
// Usage: sh bench/run.sh BUILD_DIR   (env: THREADS=2 REPS=3 MODELS_DIR=models/bench)
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

const build = process.argv[2] || 'build';
const threads = process.env.THREADS || '2';
const reps = process.env.REPS || '3';
const dir = process.env.MODELS_DIR || 'models/bench';
const peer = process.env.LLAMA_CPP_BIN || '';
const vocab = '../shared/models/rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const run = (cmd, args) => execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });

const probe = JSON.parse(run(join(build, 'bench/probe'), ['-t', threads, '--json']));
console.log(`machine: copy ${probe.copy_gb_s} GB/s, read ${probe.read_gb_s} GB/s, ` +
            `FP32 FMA peak ${probe.fp32_fma_gflops} GFLOP/s (${threads} threads)`);

mkdirSync(dir, { recursive: true });
const types = ['q8_0', 'q4_0', 'q4_k_m'];
const rows = [];
for (const t of types) {
  const path = join(dir, `qwen2-0.5b-shape-${t}.gguf`);
  if (!existsSync(path)) {
    if (!existsSync(vocab)) { console.log(`skip ${t}: ${vocab} not found (needed for the real vocabulary)`); continue; }
    console.log(`making ${path}`);
    run(join(build, 'polykv'), ['gen-model', '--arch', 'qwen2', '--vocab', vocab, '--n-embd', '896',
        '--n-layer', '24', '--n-head', '14', '--n-head-kv', '2', '--n-ff', '4864', '--ctx', '32768',
        '--type', t, '--seed', '1', '-o', path]);
  }
  const ours = JSON.parse(run(join(build, 'polykv'), ['bench', '-m', path, '-p', '512', '-n', '128',
                                                      '-t', threads, '-r', reps, '--json']));
  const row = { type: t, pp: ours.pp_tps, tg: ours.tg_tps, gbs: ours.decode_bytes_per_s / 1e9 };
  if (peer && existsSync(join(peer, 'llama-bench'))) {
    const out = JSON.parse(run(join(peer, 'llama-bench'), ['-m', path, '-p', '512', '-n', '128', '-t', threads,
                                                           '-r', reps, '-o', 'json']));
    for (const r of out) {
      if (r.n_prompt > 0) row.peer_pp = r.avg_ts;
      if (r.n_gen > 0) row.peer_tg = r.avg_ts;
    }
  }
  rows.push(row);
}
const f = (x, d = 1) => (x === undefined ? '-' : x.toFixed(d));
console.log('\n| type | pp512 tok/s | llama.cpp | ratio | tg128 tok/s | llama.cpp | ratio | decode GB/s | of copy bw |');
console.log('|---|---|---|---|---|---|---|---|---|');
for (const r of rows)
  console.log(`| ${r.type} | ${f(r.pp)} | ${f(r.peer_pp)} | ${r.peer_pp ? f(r.pp / r.peer_pp, 2) : '-'} | ` +
              `${f(r.tg)} | ${f(r.peer_tg)} | ${r.peer_tg ? f(r.tg / r.peer_tg, 2) : '-'} | ` +
              `${f(r.gbs, 2)} | ${f(100 * r.gbs / probe.copy_gb_s, 0)}% |`);
