// lib.mjs - what the end-to-end tests share: finding the binary and the
// shared models, making models with gen-model, starting `polykv serve` on a
// free loopback port and stopping it, reading SSE streams with fetch.
//
// Environment (set by tests/run.sh): POLYKV_BIN (default build/polykv),
// POLYKV_SHARED (default ../shared), POLYKV_E2E_DIR (made models; default
// build/e2e).  Tests run from the repository root.

import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { once } from 'node:events';
import path from 'node:path';

export const BIN = process.env.POLYKV_BIN || 'build/polykv';
export const SHARED = process.env.POLYKV_SHARED || '../shared';
export const WORK = process.env.POLYKV_E2E_DIR || 'build/e2e';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Path of a model in ../shared/models, or null when ../shared is absent.
export function sharedModel(name) {
  const p = path.join(SHARED, 'models', name);
  return existsSync(p) ? p : null;
}

// Why the suite cannot run here, or null (node:test's `skip` option).
export function skipReason(...models) {
  if (!existsSync(BIN)) return `${BIN} not built`;
  for (const m of models) if (!sharedModel(m)) return `../shared/models/${m} absent`;
  return false;
}

// A random-weight model made once by gen-model (args: its shape flags).
export function genModel(name, args) {
  mkdirSync(WORK, { recursive: true });
  const out = path.join(WORK, name);
  if (!existsSync(out)) execFileSync(BIN, ['gen-model', ...args, '-o', out], { stdio: 'ignore' });
  return out;
}

// A random-weight Gemma 4 (sliding windows, two head sizes) with
// Qwen3.5's vocabulary from ../shared (TINY_VOCAB), served with the chat
// template file tmpl: for tests that make it write a template's reply
// format with a grammar.
export const TINY_VOCAB = 'vocab/ggml-vocab-qwen35.gguf';
export function templateServer(tmpl) {
  const model = genModel('gemma4-e128-l3-w32-q8_0.gguf', ['--arch', 'gemma4', '--vocab',
    path.join(SHARED, 'models', TINY_VOCAB), '--n-embd', '128', '--n-layer', '3', '--n-head', '4', '--n-head-kv', '2',
    '--n-head-kv-global', '1', '--head-dim', '32', '--head-dim-global', '64', '--n-ff', '256', '--swa', '32',
    '--swa-every', '3', '--type', 'q8_0', '--seed', '7']);
  return startServer(model, ['-c', '4096', '-np', '1', '-t', '2', '--chat-template-file', tmpl]);
}

// Starts `polykv serve -m model --port 0 ...args` and waits for /health
// (with the --api-key of args, when given); model null starts a router
// (no -m).  opts.env: extra environment.
export async function startServer(model, args = [], opts = {}) {
  const proc = spawn(BIN, ['serve', ...(model ? ['-m', model] : []), '--host', '127.0.0.1', '--port', '0', ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...(opts.env || {}) },
  });
  const k = args.indexOf('--api-key');
  const probe = k >= 0 ? { authorization: 'Bearer ' + args[k + 1] } : {};
  let log = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 30000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = log.match(/listening on (http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}):\n${log}`)));
  });
  for (let i = 0; ; i++) {
    const r = await fetch(url + '/health', { headers: probe }).catch(() => null);
    if (r && r.status === 200) break;
    if (proc.exitCode !== null || i > 3000) throw new Error(`server not healthy:\n${log}`);
    await sleep(10);
  }
  return {
    url,
    pid: proc.pid,
    log: () => log,
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill('SIGTERM');
      const [code] = await once(proc, 'exit');
      return code;
    },
    // kill -9: no shutdown path runs.  Resolves to the signal's name.
    async kill9() {
      if (proc.exitCode !== null || proc.signalCode !== null) return proc.signalCode;
      proc.kill('SIGKILL');
      const [, signal] = await once(proc, 'exit');
      return signal;
    },
  };
}

export async function post(url, body, headers = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return reply(r);
}

export async function get(url, headers = {}) {
  return reply(await fetch(url, { headers }));
}

/* A response as { status, json (null when the body is not JSON), text, headers }. */
async function reply(r) {
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, json, text, headers: r.headers };
}

/* n words drawn from a small agent-ish vocabulary, the same for the same seed. */
const WORDS = ['agent', 'tool', 'plan', 'file', 'search', 'result', 'the', 'a', 'of', 'query', 'answer', 'code'];
export const words = (n, seed) => {
  let s = seed, out = [];
  for (let i = 0; i < n; i++) { s = (Math.imul(s, 1103515245) + 12345) >>> 0; out.push(WORDS[(s >>> 16) % WORDS.length]); }
  return out.join(' ');
};

/* Messages as a ChatML prompt, ready for the assistant's turn. */
export const chatml = (msgs) =>
  msgs.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';

// Reads an SSE response: calls onEvent(data string, ms, read) per event,
// ms stamped when that event is parsed, read the number of the socket read
// that completed it (events of one read arrived together: the server wrote
// them in one burst, or the client was not reading in between).
export async function readSSE(response, onEvent) {
  const dec = new TextDecoder();
  let buf = '', read = 0;
  for await (const chunk of response.body) {
    read++;
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of block.split('\n'))
        if (line.startsWith('data: ')) if ((await onEvent(line.slice(6), performance.now(), read)) === false) return;
    }
  }
}

// CPU seconds the process has used (user + system), from /proc.
export function cpuSeconds(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

// Resident memory in KiB.
export function rssKiB(pid) {
  const m = readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/);
  return m ? Number(m[1]) : 0;
}

// `polykv run --json` (greedy) as a reference.
export function runJson(model, prompt, n) {
  const out = execFileSync(BIN, ['run', '-m', model, '-p', prompt, '-n', String(n), '--temp', '0', '--json', '-t', '1'],
    { stdio: ['ignore', 'pipe', 'ignore'] });
  return JSON.parse(out.toString());
}
