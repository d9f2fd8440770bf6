// pools.test.mjs - pools through the real server (docs/pools.md): every
// route and its errors, attach from /completion, /v1/completions and
// /v1/chat/completions (headers, cached tokens, streaming), the tree and
// its byte accounting, and 16 clients doing random pool operations and
// streaming completions on pools at once (POLYKV_POOL_SOAK_S seconds, 20 by
// default; `make bench` runs the 5-minute version).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { sharedModel, skipReason, startServer, post, get, words, readSSE } from './lib.mjs';

const QWEN = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const skip = skipReason(QWEN);
const SOAK_S = Number(process.env.POLYKV_POOL_SOAK_S || 20);

let srv;
before(async () => {
  if (skip) return;
  srv = await startServer(sharedModel(QWEN), ['-c', '8192', '-np', '4', '-t', '2', '--pools', '12',
                                              '--pool-grace-ms', '200', '--metrics']);
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
});

const del = async (url) => {
  const r = await fetch(url, { method: 'DELETE' });
  return { status: r.status, json: await r.json() };
};

async function tokenize(text) {
  const r = await post(srv.url + '/tokenize', { content: text, add_special: true });
  assert.equal(r.status, 200, r.text);
  return r.json.tokens;
}

// Every byte charged once: pools' own + slots' own + parked == in use.
async function accountingExact() {
  const [pools, slots] = [await get(srv.url + '/polykv/pools'), await get(srv.url + '/slots')];
  assert.equal(pools.status, 200);
  const own = pools.json.pools.reduce((s, p) => s + p.own_kv_bytes, 0);
  const sess = slots.json.reduce((s, x) => s + x.kv_owned_bytes, 0);
  return { sum: own + sess + pools.json.parked_kv_bytes, used: pools.json.kv_bytes_used, tree: pools.json };
}

test('pools: create, fork, attach, evict, release and their errors', { skip }, async () => {
  const sys = 'You are a careful agent. ' + words(300, 1);
  const tools = [{ type: 'function', function: { name: 'search', description: 'search the web',
                   parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } } }];
  // A root from messages (+tools): a chat request with the same system block shares all of it.
  let r = await post(srv.url + '/polykv/pools', { messages: [{ role: 'system', content: sys }], tools });
  assert.equal(r.status, 201, r.text);
  const root = r.json;
  assert.equal(root.parent, -1);
  assert.equal(root.branch_pos, 0);
  assert.equal(root.own_tokens, root.prefix_len);
  const chat = await post(srv.url + '/v1/chat/completions', {
    messages: [{ role: 'system', content: sys }, { role: 'user', content: 'find the file' }], tools,
    pool_id: root.pool_id, max_tokens: 4, temperature: 0 }, { 'x-session-id': 'agent-1' });
  assert.equal(chat.status, 200, chat.text);
  assert.equal(chat.headers.get('x-pool-id'), String(root.pool_id));
  const cached = chat.json.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= root.prefix_len, `cached ${cached} of a ${root.prefix_len}-token pool`);
  assert.equal(Number(chat.headers.get('x-cached-prefix-tokens')), cached);

  // Extend (D = parent's L, found) and branch (D given) from text prompts.
  const base = 'Task context: ' + words(200, 2);
  r = await post(srv.url + '/polykv/pools', { prompt: base });
  assert.equal(r.status, 201, r.text);
  const task = r.json;
  const baseTok = await tokenize(base);
  assert.equal(task.prefix_len, baseTok.length);
  r = await post(srv.url + `/polykv/pools/${task.pool_id}/fork`, { prompt: base + ' ' + words(60, 3) });
  assert.equal(r.status, 201, r.text);
  const ext = r.json;
  assert.equal(ext.parent, task.pool_id);
  assert.ok(ext.branch_pos >= task.prefix_len - 1 && ext.branch_pos <= task.prefix_len, JSON.stringify(ext));
  const D = Math.floor(baseTok.length / 2);
  const brTok = baseTok.slice(0, D).concat((await tokenize(words(40, 4))).slice(1));
  r = await post(srv.url + `/polykv/pools/${task.pool_id}/fork`, { tokens: brTok, branch_pos: D });
  assert.equal(r.status, 201, r.text);
  const br = r.json;
  assert.equal(br.branch_pos, D);
  assert.equal(br.own_tokens, brTok.length - D);

  // Contract errors: 409 with the first differing position, 400 past the parent's length.
  const bad = brTok.slice();
  bad[5] = bad[5] === 100 ? 101 : 100;
  r = await post(srv.url + `/polykv/pools/${task.pool_id}/fork`, { tokens: bad, branch_pos: D });
  assert.equal(r.status, 409, r.text);
  assert.equal(r.json.error.first_differing_position, 5);
  r = await post(srv.url + `/polykv/pools/${task.pool_id}/fork`, { tokens: brTok, branch_pos: baseTok.length + 5 });
  assert.equal(r.status, 400, r.text);
  r = await post(srv.url + '/polykv/pools', { tokens: [1, 2], prompt: 'x' });
  assert.equal(r.status, 400);
  r = await post(srv.url + '/polykv/pools/999/fork', { prompt: 'x' });
  assert.equal(r.status, 404);

  // Attach from /completion (streamed: the headers come before the tokens) and /v1/completions.
  const prompt = base + ' ' + words(60, 3) + ' and now the answer';
  const resp = await fetch(srv.url + '/completion', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, pool_id: ext.pool_id, n_predict: 6, stream: true, temperature: 0 }) });
  assert.equal(resp.status, 200);
  assert.equal(resp.headers.get('x-pool-id'), String(ext.pool_id));
  assert.ok(Number(resp.headers.get('x-cached-prefix-tokens')) >= ext.prefix_len);
  let last;
  await readSSE(resp, (d) => { last = JSON.parse(d); });
  assert.ok(last.stop && last.timings.cache_n >= ext.prefix_len, JSON.stringify(last.timings));
  r = await post(srv.url + '/v1/completions', { prompt, pool_id: ext.pool_id, max_tokens: 3,
                                                shared_prefix_n_tokens: 10 });
  assert.equal(r.status, 200, r.text);
  assert.ok(Number(r.headers.get('x-cached-prefix-tokens')) >= 10);
  r = await post(srv.url + '/v1/completions', { prompt: 'unrelated words', pool_id: ext.pool_id, max_tokens: 3,
                                                shared_prefix_n_tokens: 50 });
  assert.equal(r.status, 400, r.text);
  r = await post(srv.url + '/completion', { prompt, pool_id: 4242, n_predict: 3 });
  assert.equal(r.status, 404, r.text);
  const s404 = await fetch(srv.url + '/completion', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, pool_id: 4242, n_predict: 3, stream: true }) });
  assert.equal(s404.status, 404);
  assert.match((await s404.json()).error.message, /pool 4242 not found/);

  // The tree: children, sessions, residency; every byte charged once.
  let acc = await accountingExact();
  assert.equal(acc.sum, acc.used);
  const t = acc.tree.pools.find((p) => p.pool_id === task.pool_id);
  assert.deepEqual(t.children.sort(), [ext.pool_id, br.pool_id].sort());
  assert.equal(t.auto_pinned, true);
  const rt = acc.tree.pools.find((p) => p.pool_id === root.pool_id);
  assert.equal(rt.sessions[0].session_id, 'agent-1');
  assert.ok(rt.subtree_kv_bytes >= rt.own_kv_bytes);
  const sub = await get(srv.url + `/polykv/pools/${task.pool_id}`);
  assert.equal(sub.json.pools.length, 3);
  assert.equal((await get(srv.url + '/polykv/pools/4242')).status, 404);

  // Pin, orphaned pin, evict (tokens kept) then attach re-materializes.
  r = await post(srv.url + `/polykv/pools/${br.pool_id}/pin`, {});
  assert.equal(r.status, 200);
  acc = await accountingExact();
  assert.equal(acc.tree.pools.find((p) => p.pool_id === br.pool_id).orphaned_pin, true);
  r = await post(srv.url + `/polykv/pools/${br.pool_id}/evict`, '');
  assert.equal(r.status, 200, r.text);
  acc = await accountingExact();
  assert.equal(acc.tree.pools.find((p) => p.pool_id === br.pool_id).residency, 'evicted');
  assert.equal(acc.sum, acc.used);
  r = await post(srv.url + '/completion', { prompt: brTok.concat([100, 101]), pool_id: br.pool_id, n_predict: 2 });
  assert.equal(r.status, 200, r.text);
  assert.ok(r.json.timings.cache_n >= br.prefix_len);
  r = await post(srv.url + `/polykv/pools/${br.pool_id}/flush`, {});
  assert.equal(r.status, 200, r.text);

  // Release: 409 with children, then the subtree; stale ids are 404.
  assert.equal((await del(srv.url + `/polykv/pools/${task.pool_id}`)).status, 409);
  const rel = await del(srv.url + `/polykv/pools/${task.pool_id}?recursive=true`);
  assert.equal(rel.status, 200);
  assert.equal(rel.json.released, 3);
  assert.equal((await post(srv.url + `/polykv/pools/${ext.pool_id}/pin`, {})).status, 404);
  assert.equal((await del(srv.url + `/polykv/pools/${root.pool_id}`)).status, 200);
  acc = await accountingExact();
  assert.equal(acc.tree.pools.length, 0);
  assert.equal(acc.sum, acc.used);

  // from_session snapshots a session's context: nothing to compute.
  r = await post(srv.url + '/polykv/pools', { from_session: 'agent-1' });
  assert.equal(r.status, 201, r.text);
  assert.equal(r.json.prefilled_tokens, 0);
  assert.equal((await post(srv.url + '/polykv/pools', { from_session: 'nobody' })).status, 404);
  assert.equal((await del(srv.url + `/polykv/pools/${r.json.pool_id}`)).status, 200);

  const props = await get(srv.url + '/props');
  assert.deepEqual([props.json.polykv.max_pools, props.json.polykv.pool_grace_ms], [12, 200]);
  const metrics = await get(srv.url + '/metrics');
  assert.match(metrics.text, /# TYPE polykv:pool_kv_bytes gauge/);
  assert.match(metrics.text, /polykv:admission_decisions_total\{pool="none",decision="admit"\} 0/);
});

test(`pools: 16 clients, random pool operations and streamed completions for ${SOAK_S} s`, { skip }, async () => {
  const deadline = Date.now() + SOAK_S * 1000;
  const bases = [1, 2, 3].map((k) => 'Shared context ' + k + ': ' + words(150, 10 + k));
  const stats = { ops: 0, completions: 0, byStatus: {} };
  const note = (s) => { stats.byStatus[s] = (stats.byStatus[s] || 0) + 1; };
  let seed = 99;
  const rnd = (n) => { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return (seed >>> 8) % n; };
  const known = new Set();
  async function client(k) {
    while (Date.now() < deadline) {
      const ids = [...known];
      const id = ids.length ? ids[rnd(ids.length)] : 1 + rnd(20);
      const base = bases[rnd(3)];
      const op = rnd(10);
      let r;
      if (op === 0) r = await post(srv.url + '/polykv/pools', { prompt: base });
      else if (op === 1) r = await post(srv.url + `/polykv/pools/${id}/fork`, { prompt: base + ' ' + words(20 + rnd(40), k) });
      else if (op === 2) r = await post(srv.url + `/polykv/pools/${id}/${['pin', 'unpin', 'evict', 'flush'][rnd(4)]}`, {});
      else if (op === 3) r = await del(srv.url + `/polykv/pools/${id}${rnd(2) ? '?recursive=true' : ''}`);
      else if (op === 4) r = await get(srv.url + '/polykv/pools');
      else {
        const resp = await fetch(srv.url + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ prompt: base + ' ' + words(10 + rnd(30), k * 7 + op), pool_id: rnd(4) ? id : undefined,
                                 max_tokens: 1 + rnd(12), stream: true, session_id: `c${k}` }) });
        note(resp.status);
        assert.ok(resp.status < 500, `completion: ${resp.status}`);
        if (resp.status === 200) {
          let done = false;
          await readSSE(resp, (d) => {
            if (d === '[DONE]') { done = true; return; }
            const j = JSON.parse(d);       // every event well-formed
            assert.ok(!j.error, JSON.stringify(j));
          });
          assert.ok(done, 'stream ended without [DONE]');
        } else {
          const j = await resp.json();
          assert.ok(j.error && j.error.message);
        }
        stats.completions++;
        continue;
      }
      note(r.status);
      assert.ok(r.status < 500, `pool op ${op}: ${r.status} ${JSON.stringify(r.json)}`);
      assert.ok(r.json, 'every reply is JSON');
      if (r.status === 201) known.add(r.json.pool_id);
      if (op === 3 && r.status === 200) known.delete(id);
      if (op === 4) {                       // what exists now (a recursive release took children too)
        known.clear();
        for (const p of r.json.pools) known.add(p.pool_id);
      }
      stats.ops++;
    }
  }
  await Promise.all(Array.from({ length: 16 }, (_, k) => client(k)));
  const acc = await accountingExact();
  assert.equal(acc.sum, acc.used, 'accounting exact at the end');
  console.log(`# pools: ${stats.ops} pool operations, ${stats.completions} completions in ${SOAK_S} s, ` +
              `statuses ${JSON.stringify(stats.byStatus)}`);
  for (const p of acc.tree.pools.filter((p) => p.parent === -1))
    await del(srv.url + `/polykv/pools/${p.pool_id}?recursive=true`);
  assert.equal((await get(srv.url + '/polykv/pools')).json.pools.length, 0);
});
