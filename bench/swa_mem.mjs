// swa_mem.mjs - the KV memory a long session holds on a model with
// sliding-window layers (Gemma 4's layout: five window layers in six), with
// the window layers' cells freed behind the window (polykv's default) and
// all kept (--swa-full), and beside it llama-server's on the same file.
//
//   node bench/swa_mem.mjs [--ctx 32768] [--window 1024] [--kv q8_0] [--llama-server PATH]
//
// One session reads a prompt of ctx - 64 tokens (random token ids) and
// writes 8; then the KV bytes it holds (polykv: /slots's kv_owned_bytes,
// its cells' and window cells'; llama-server: its caches' buffers, from its
// log) and the process's resident memory are read, and set against the
// bound: the global layers' cells plus the window (n_swa - 1 cells of the
// window layers), a prefill step and the pins' windows.
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { once } from 'node:events';
import { BIN, SHARED, genModel, startServer, post, get, rssKiB, sleep } from '../tests/e2e/lib.mjs';

const arg = (k, d) => { const i = process.argv.indexOf(k); return i > 0 ? process.argv[i + 1] : d; };
const ctx = +arg('--ctx', 32768), W = +arg('--window', 1024), peer = arg('--llama-server', null);
const kvType = arg('--kv', 'f16'), kvArgs = ['-ctk', kvType, '-ctv', kvType];
const shape = ['--arch', 'gemma4', '--n-embd', '256', '--n-layer', '6', '--n-head', '8', '--n-head-kv', '4',
  '--n-head-kv-global', '1', '--head-dim', '128', '--head-dim-global', '256', '--n-ff', '512', '--swa', String(W),
  '--swa-every', '6', '--seed', '5', '--type', 'q8_0', '--ctx', '131072'];
const model = genModel(`gemma4-e256-l6-w${W}-c128k-q8_0.gguf`,
                       [...shape, '--vocab', path.join(SHARED, 'models', 'vocab/ggml-vocab-qwen35.gguf')]);
const n = ctx - 64;
let x = 12345;
const prompt = Array.from({ length: n }, () => (x = (x * 1103515245 + 12345) % 2147483648, 1000 + x % 50000));

// KV bytes of one position: a window layer 4 heads x 128 (K and V), the global 1 x 256
const per = kvType === 'q8_0' ? 34 / 32 : 2;
const winPos = 5 * 4 * 128 * 2 * per, globPos = 1 * 256 * 2 * per, fullPos = 6 * Math.max(4 * 128, 256) * 2 * per;
const rows = [];
const show = (r) => console.log(`| ${r.engine} | ${r.positions} | ${r.kv_mib.toFixed(1)} | ${r.rss_mib.toFixed(0)} |`);
console.log('| engine | positions | KV MiB | RSS MiB |');
console.log('|---|---|---|---|');
for (const mode of [[], ['--swa-full']]) {
  const s = await startServer(model, ['-c', String(ctx), '-np', '1', '-t', '2', '-b', '2048', ...kvArgs, ...mode]);
  try {
    const r = await post(s.url + '/completion', { prompt, n_predict: 8, temperature: 0, ignore_eos: true });
    if (r.status !== 200) throw new Error(r.text);
    const slot = (await get(s.url + '/slots')).json[0];
    rows.push({ engine: 'polykv' + (mode.length ? ' --swa-full' : ''), positions: n + 7,
                kv_mib: slot.kv_owned_bytes / 1048576, rss_mib: rssKiB(s.pid) / 1024 });
    show(rows.at(-1));
  } finally {
    await s.stop();
  }
}
if (peer) {
  for (const mode of [[], ['--swa-full']]) {
    const p = spawn(peer, ['-m', model, '-c', String(ctx), '-np', '1', '-t', '2', '-b', '2048', '--port', '18931',
                           '--host', '127.0.0.1', '-lv', '4', ...kvArgs, ...mode], { stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    p.stdout.on('data', (d) => { log += d; });
    p.stderr.on('data', (d) => { log += d; });
    for (let i = 0; ; i++) {
      const h = await fetch('http://127.0.0.1:18931/health').catch(() => null);
      if (h && h.status === 200) break;
      if (i > 600) throw new Error('llama-server did not start:\n' + log);
      await sleep(100);
    }
    const r = await post('http://127.0.0.1:18931/completion', { prompt, n_predict: 8, temperature: 0, ignore_eos: true });
    if (r.status !== 200) throw new Error(r.text);
    // "llama_kv_cache: size = X MiB (N cells, L layers ...)" for each cache
    const kv = [...log.matchAll(/llama_kv_cache:\s+size\s+=\s+([\d.]+) MiB/g)].reduce((a, m) => a + +m[1], 0);
    rows.push({ engine: 'llama-server' + (mode.length ? ' --swa-full' : ''), positions: n + 7, kv_mib: kv,
                rss_mib: rssKiB(p.pid) / 1024 });
    show(rows.at(-1));
    p.kill('SIGTERM');
    await once(p, 'exit');
  }
}
const bound = ((n + 7) * globPos + (W - 1 + 2048 + 4 * (W - 1)) * winPos) / 1048576;
const cpu = readFileSync('/proc/cpuinfo', 'utf8').match(/model name\s*:\s*(.*)/)[1];
console.log(`${cpu}; gemma4-shaped: 6 layers (5 with a window of ${W}), ${kvType} cache; ${n}-token prompt + 8`);
console.log(`bound (global cells + window + a 2048-token step + 4 pins' windows): ${bound.toFixed(1)} MiB; ` +
            `every cell kept: ${((n + 7) * fullPos / 1048576).toFixed(1)} MiB`);
