// swa.test.mjs - the control plane on a sliding-window model (gpt-oss's
// layers, a window of 32 on every other layer) with prompts far past the
// window, through the real server: a retry, a pool attached, a fork inside
// a pool, histories parked in cells and spilled to the RAM tier, a slot
// saved and restored, and a pinned pool restored after a restart all give
// the greedy text of the same prompt computed afresh; with the window
// layers' cells freed behind the window (the default) and all kept
// (--swa-full).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { SHARED, genModel, skipReason, startServer, post, get, words } from './lib.mjs';

const VOCAB = 'vocab/ggml-vocab-qwen35.gguf';
const skip = skipReason(VOCAB);
let model, dir;

before(() => {
  if (skip) return;
  model = genModel('gptoss-e128-l4-x8a2-w32-q8_0.gguf', ['--arch', 'gpt-oss', '--vocab', path.join(SHARED, 'models', VOCAB),
    '--n-embd', '128', '--n-layer', '4', '--n-head', '4', '--n-head-kv', '2', '--head-dim', '32', '--n-ff', '256',
    '--n-expert', '8', '--n-expert-used', '2', '--n-ff-exp', '64', '--swa', '32', '--type', 'q8_0', '--seed', '43']);
  dir = mkdtempSync(path.join(tmpdir(), 'polykv-swa-'));
});
after(() => { if (dir) rmSync(dir, { recursive: true, force: true }); });

const complete = async (url, prompt, extra = {}) => {
  const r = await post(url + '/completion', { prompt, n_predict: 10, temperature: 0, ignore_eos: true,
                                              cache_prompt: true, ...extra });
  assert.equal(r.status, 200, r.text);
  return r.json;
};
const fresh = (url, prompt) => complete(url, prompt, { cache_prompt: false });

for (const mode of [[], ['--swa-full']])
test(`swa${mode.length ? ' ' + mode[0] : ''}: retries, pools, forks, parking, the RAM tier and slot saves past the window`,
     { skip }, async () => {
  // one slot and a cache of 1,024 cells: three 300-token histories cannot
  // all stay, so they are parked and spilled to RAM between turns
  const sub = path.join(dir, mode.length ? 'full' : 'apart');
  for (const d of ['slots', 'pools']) mkdirSync(path.join(sub, d), { recursive: true });
  const s = await startServer(model, ['-c', '1024', '-np', '1', '-t', '2', ...mode, '--metrics', '--cache-ram', '64',
                                      '--slot-save-path', path.join(sub, 'slots'), '--pool-dir', path.join(sub, 'pools')]);
  try {
    const A = 'Agent A log: ' + words(300, 1), B = 'Agent B log: ' + words(300, 2), C = 'Agent C: ' + words(300, 3);
    const want = {};
    for (const [k, p] of [['A', A], ['B', B], ['C', C]]) want[k] = (await fresh(s.url, p)).content;
    for (let round = 0; round < 2; round++)
      for (const [k, p] of [['A', A], ['B', B], ['C', C]]) {
        const r = await complete(s.url, p, { session_id: k });
        assert.equal(r.content, want[k], `session ${k}, round ${round}`);
        if (round) assert.ok(r.timings.cache_n > 250, `session ${k} came back with ${r.timings.cache_n} cached`);
      }
    const cache = (await get(s.url + '/polykv/cache')).json;
    assert.ok(cache.spilled > 0 && cache.tokens_restored > 0, JSON.stringify(cache).slice(0, 300));
    // apart, the window layers hold a window a history, not every position
    const metric = (text, name) => { const m = text.match(new RegExp(`^${name} (\\S+)$`, 'm')); return m ? +m[1] : null; };
    const mt = (await get(s.url + '/metrics')).text;
    const used = metric(mt, 'polykv:kv_cells_used'), win = metric(mt, 'polykv:kv_window_cells_used');
    if (mode.length) assert.equal(win, null);
    else assert.ok(win > 0 && win < used / 2, `window cells ${win} of ${used} cells`);

    const sys = 'System: ' + words(200, 4);
    const pool = (await post(s.url + '/polykv/pools', { prompt: sys })).json;
    const task = sys + ' Task: ' + words(60, 5);
    const onPool = await complete(s.url, task, { pool_id: pool.pool_id });
    assert.equal(onPool.content, (await fresh(s.url, task)).content, 'a session on the pool');
    assert.ok(onPool.timings.cache_n >= pool.prefix_len);
    // a fork branching before the pool's end
    const tok = (await post(s.url + '/tokenize', { content: sys })).json.tokens;
    const branch = (await post(s.url + `/polykv/pools/${pool.pool_id}/fork`,
                               { tokens: [...tok.slice(0, 150), ...tok.slice(0, 40)], branch_pos: 150 })).json;
    assert.equal(branch.branch_pos, 150);
    const forked = await complete(s.url, tok.slice(0, 150).concat(tok.slice(0, 40), tok.slice(0, 10)),
                                  { pool_id: branch.pool_id });
    assert.equal(forked.content, (await fresh(s.url, tok.slice(0, 150).concat(tok.slice(0, 40), tok.slice(0, 10)))).content);

    // a slot saved, erased and restored
    const first = await complete(s.url, A, { id_slot: 0 });
    assert.equal((await post(s.url + '/slots/0?action=save', { filename: 'a.bin' })).status, 200);
    const cont = A + first.content + ' then';
    const wantCont = (await fresh(s.url, cont)).content;
    await post(s.url + '/slots/0?action=erase', {});
    const r = await post(s.url + '/slots/0?action=restore', { filename: 'a.bin' });
    assert.equal(r.status, 200, r.text);
    assert.equal((await complete(s.url, cont, { id_slot: 0 })).content, wantCont);

    assert.equal((await post(s.url + `/polykv/pools/${pool.pool_id}/pin`, {})).status, 200);
  } finally {
    assert.equal(await s.stop(), 0);
  }

  // a restart: the pinned pool comes back and gives the same text
  const s2 = await startServer(model, ['-c', '1024', '-np', '1', '-t', '2', ...mode, '--pool-dir', path.join(sub, 'pools')]);
  try {
    const tree = (await get(s2.url + '/polykv/pools')).json.pools;
    assert.equal(tree.length, 1);
    const sys = 'System: ' + words(200, 4), task = sys + ' Task: ' + words(60, 5);
    const again = await complete(s2.url, task, { pool_id: tree[0].pool_id });
    assert.equal(again.content, (await fresh(s2.url, task)).content);
    assert.ok(again.timings.cache_n >= tree[0].prefix_len);
  } finally {
    assert.equal(await s2.stop(), 0);
  }
});
