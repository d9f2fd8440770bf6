// kvq.test.mjs - a quantized K/V cache (-ctk q8_0 -ctv q4_0) through the
// real server: a repeated prompt, a pool attached, a fork and a slot saved
// and restored give the greedy text of the same prompt computed afresh;
// the bytes of the owners add up to the bytes in use, at the cache types'
// real row sizes; a model whose heads are not whole blocks is refused at
// start-up with the reason.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { BIN, SHARED, WORK, genModel, skipReason, startServer, post, get, words } from './lib.mjs';

const VOCAB = 'vocab/ggml-vocab-qwen35.gguf';
const skip = skipReason(VOCAB);
const CELLS = 2048;
// 2 layers x 2 KV heads x 32 dims: a K row of 64 values in q8_0 (2 blocks
// of 34 bytes) and a V row in q4_0 (2 blocks of 18)
const CELL_BYTES = 2 * (2 * 34 + 2 * 18);
let srv, saveDir, model;

before(async () => {
  if (skip) return;
  model = genModel('qwen3-e128-l2-qwen35vocab-q8_0.gguf', ['--arch', 'qwen3', '--vocab',
    path.join(SHARED, 'models', VOCAB), '--n-embd', '128', '--n-layer', '2', '--n-head', '4', '--n-head-kv', '2',
    '--n-ff', '256', '--type', 'q8_0', '--seed', '12']);
  saveDir = path.join(WORK, 'kvq-saves');
  rmSync(saveDir, { recursive: true, force: true });
  mkdirSync(saveDir, { recursive: true });
  srv = await startServer(model, ['-c', String(CELLS), '-np', '2', '-t', '2', '-ctk', 'q8_0', '-ctv', 'q4_0',
                                  '--slot-save-path', saveDir]);
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
  if (saveDir) rmSync(saveDir, { recursive: true, force: true });
});

async function complete(prompt, extra = {}) {
  const r = await post(srv.url + '/completion', { prompt, n_predict: 12, temperature: 0, cache_prompt: true,
                                                  ignore_eos: true, ...extra });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

const fresh = (prompt) => complete(prompt, { cache_prompt: false });

async function accounting() {
  const [pools, slots] = [await get(srv.url + '/polykv/pools'), await get(srv.url + '/slots')];
  const own = pools.json.pools.reduce((s, p) => s + p.own_kv_bytes, 0);
  const sess = slots.json.reduce((s, x) => s + x.kv_owned_bytes, 0);
  return { sum: own + sess + pools.json.parked_kv_bytes, used: pools.json.kv_bytes_used,
           total: pools.json.kv_bytes_total };
}

test('kvq: a repeated prompt reuses the quantized cells and gives the same text', { skip }, async () => {
  const prompt = 'Agent log: ' + words(300, 1);
  const want = await fresh(prompt);
  const a = await complete(prompt);
  const b = await complete(prompt);
  assert.equal(a.content, want.content);
  assert.equal(b.content, want.content);
  assert.ok(b.timings.cache_n >= a.timings.prompt_n + a.timings.cache_n - 1, `reused ${b.timings.cache_n}`);
});

test('kvq: pools and forks share quantized cells by membership', { skip }, async () => {
  const sys = 'System: ' + words(200, 2);
  let r = await post(srv.url + '/polykv/pools', { prompt: sys });
  assert.equal(r.status, 201, r.text);
  const pool = r.json;
  for (const [i, task] of ['one', 'two'].entries()) {
    const prompt = sys + ' Task ' + task + ': ' + words(30, 10 + i);
    const want = await fresh(prompt);
    const got = await complete(prompt, { pool_id: pool.pool_id });
    assert.equal(got.content, want.content, `task ${task} on the pool`);
    assert.ok(got.timings.cache_n >= pool.prefix_len, `attached ${got.timings.cache_n} of ${pool.prefix_len}`);
  }
  const branch = sys + ' Branch: ' + words(40, 20);
  r = await post(srv.url + `/polykv/pools/${pool.pool_id}/fork`, { prompt: branch });
  assert.equal(r.status, 201, r.text);
  const want = await fresh(branch + ' go');
  const got = await complete(branch + ' go', { pool_id: r.json.pool_id });
  assert.equal(got.content, want.content, 'a session on the fork');
  const acc = await accounting();
  assert.equal(acc.sum, acc.used);
  assert.equal(acc.total, CELLS * CELL_BYTES, 'the cache\'s bytes at the types\' row sizes');
  assert.equal(acc.used % CELL_BYTES, 0);
});

test('kvq: a slot saved and restored continues as before', { skip }, async () => {
  const prompt = 'Remember: ' + words(120, 30);
  const first = await complete(prompt, { id_slot: 0 });
  let r = await post(srv.url + '/slots/0?action=save', { filename: 'q.bin' });
  assert.equal(r.status, 200, r.text);
  const cont = prompt + first.content + ' and then';
  const want = await fresh(cont);
  await post(srv.url + '/slots/0?action=erase', {});
  await post(srv.url + '/slots/1?action=erase', {});
  r = await post(srv.url + '/slots/1?action=restore', { filename: 'q.bin' });
  assert.equal(r.status, 200, r.text);
  const got = await complete(cont, { id_slot: 1 });
  assert.equal(got.content, want.content);
  assert.ok(got.timings.cache_n >= r.json.n_restored - 1, `reused ${got.timings.cache_n} of ${r.json.n_restored}`);
});

test('kvq: a state file of another cache type is refused with the reason', { skip }, async () => {
  const other = await startServer(model, ['-c', '512', '-np', '1', '-t', '1', '--slot-save-path', saveDir]);
  try {
    const r = await post(other.url + '/slots/0?action=restore', { filename: 'q.bin' });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, /KV type/);
  } finally {
    assert.equal(await other.stop(), 0);
  }
});

test('kvq: heads that are not whole blocks are refused at start-up', { skip: skipReason('stories260K.gguf') },
  () => {
    let err = '';
    try {
      execFileSync(BIN, ['serve', '-m', path.join(SHARED, 'models', 'stories260K.gguf'), '--port', '0',
                         '-ctk', 'q8_0'], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 20000 });
    } catch (e) {
      err = String(e.stderr);
    }
    assert.match(err, /-ctk q8_0 -ctv f16: the model's head dimension is not a multiple/);
    try {
      execFileSync(BIN, ['serve', '-m', path.join(SHARED, 'models', 'stories260K.gguf'), '--port', '0',
                         '-ctv', 'q4_k'], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 20000 });
    } catch (e) {
      err = String(e.stderr);
    }
    assert.match(err, /-ctv must be one of f32, f16, bf16, q8_0/);
  });
