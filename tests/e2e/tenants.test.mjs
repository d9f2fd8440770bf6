// tenants.test.mjs - several API keys, each a namespace (docs/security.md,
// "Tenants"): the hostile probe's read of another client's prompt
// (session ids listed, from_session on the victim's, guesses attached to
// that pool, the secret read back from x-cached-prefix-tokens) replayed by
// one tenant against another, and what an admin key still sees.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { WORK, sharedModel, skipReason, startServer, post, get, readSSE } from './lib.mjs';

const MODEL = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const skip = skipReason(MODEL);
const KEYS = { alice: 'key-alice-1', bob: 'key-bob-2', ops: 'key-ops-3', admin: 'key-admin-0' };
const as = (who) => ({ authorization: 'Bearer ' + KEYS[who] });
const SECRET = 'tiger';
const GUESSES = ['apple', 'river', 'tiger', 'stone', 'cloud', 'maple'];
const promptWith = (word) => `The password of the vault is ${word}. Never tell it to anyone at all.`;
let srv;

before(async () => {
  if (skip) return;
  mkdirSync(WORK, { recursive: true });
  const file = path.join(WORK, 'tenant-keys.txt');
  writeFileSync(file, `# tenants\nalice:${KEYS.alice}\nbob:${KEYS.bob}\n\nops:${KEYS.ops}:admin\n`, { mode: 0o600 });
  srv = await startServer(sharedModel(MODEL), ['-c', '2048', '-np', '3', '-t', '1', '--metrics', '--api-key',
                                               KEYS.admin, '--api-key-file', file],
                          { env: { POLYKV_TEST_STEP_DELAY_MS: '10' } });
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
});

const complete = (who, body) => post(srv.url + '/completion', { n_predict: 2, temperature: 0, ...body }, as(who));
const sessionsOf = (list) => list.map((s) => s.session_id).filter((s) => s != null);

test('tenants: each key sees its own sessions and pools; the probe learns nothing; an admin sees all', { skip },
     async () => {
  /* Alice's session decodes; everyone looks at the server meanwhile. */
  const stream = await fetch(srv.url + '/completion', {
    method: 'POST', headers: { 'content-type': 'application/json', ...as('alice') },
    body: JSON.stringify({ prompt: promptWith(SECRET), n_predict: 40, temperature: 0, stream: true,
                           session_id: 'victim' }),
  });
  assert.equal(stream.status, 200);
  let looked = false;
  await readSSE(stream, async () => {
    if (looked) return;
    looked = true;
    const bobTps = await get(srv.url + '/polykv/tps', as('bob'));
    assert.equal(bobTps.status, 200);
    assert.deepEqual(bobTps.json.sessions, [], JSON.stringify(bobTps.json.sessions));
    const bobSlots = await get(srv.url + '/slots', as('bob'));
    assert.equal(bobSlots.status, 200);
    assert.deepEqual(bobSlots.json, []);
    const aliceTps = await get(srv.url + '/polykv/tps', as('alice'));
    assert.deepEqual(sessionsOf(aliceTps.json.sessions), ['victim']);
    assert.equal(aliceTps.json.sessions[0].tenant, undefined);
    for (const who of ['admin', 'ops']) {
      const t = await get(srv.url + '/polykv/tps', as(who));
      const v = t.json.sessions.find((s) => s.session_id === 'victim');
      assert.ok(v, JSON.stringify(t.json.sessions));
      assert.equal(v.tenant, 'alice');
    }
    /* The stream route too, one snapshot. */
    const sse = await fetch(srv.url + '/polykv/tps?stream=1&interval_ms=50', { headers: as('bob') });
    let snap;
    await readSSE(sse, (d) => { snap = JSON.parse(d); return false; });
    assert.deepEqual(snap.sessions, []);
  });
  assert.ok(looked);

  /* Bob names Alice's session: an unknown one to him. */
  const snapBob = await post(srv.url + '/polykv/pools', { from_session: 'victim' }, as('bob'));
  assert.equal(snapBob.status, 404, snapBob.text);
  assert.equal(snapBob.json.error.message, "session 'victim' holds no context now");
  const cap = await get(srv.url + '/polykv/capacity?session_id=victim', as('bob'));
  assert.equal(cap.json.known_session, false);
  assert.equal((await get(srv.url + '/polykv/capacity?session_id=victim', as('alice'))).json.known_session, true);

  /* Alice's own snapshot of it works, and is hers. */
  const pa = await post(srv.url + '/polykv/pools', { from_session: 'victim' }, as('alice'));
  assert.equal(pa.status, 201, pa.text);
  const poolA = pa.json.pool_id;

  /* Bob's own "victim" is another session than Alice's. */
  const mine = await complete('bob', { prompt: 'Bob keeps his own notes here.', session_id: 'victim' });
  assert.equal(mine.status, 200);
  assert.deepEqual(sessionsOf((await get(srv.url + '/slots', as('bob'))).json), ['victim']);
  const again = await post(srv.url + '/polykv/pools', { from_session: 'victim' }, as('alice'));
  assert.equal(again.status, 201, again.text);
  assert.equal(again.json.prefix_len, pa.json.prefix_len);
  const adminSlots = (await get(srv.url + '/slots', as('admin'))).json;
  assert.deepEqual(adminSlots.filter((s) => s.session_id === 'victim').map((s) => s.tenant).sort(), ['alice', 'bob']);
  const none = 100000;
  const attach = await complete('bob', { prompt: promptWith('apple'), pool_id: poolA });
  const attachNone = await complete('bob', { prompt: promptWith('apple'), pool_id: none });
  assert.equal(attach.status, 404, attach.text);
  assert.equal(attach.text, attachNone.text.replace(String(none), String(poolA)));
  for (const [method, route, body] of [['GET', '', null], ['DELETE', '', null], ['POST', '/fork', { tokens: [1, 2] }],
                                       ['POST', '/evict', {}], ['POST', '/pin', {}], ['GET', '/capacity', null],
                                       ['GET', '/admission', null]]) {
    const ask = (id) => fetch(`${srv.url}/polykv/pools/${id}${route}`, {
      method, headers: { 'content-type': 'application/json', ...as('bob') }, body: body && JSON.stringify(body),
    }).then(async (r) => ({ status: r.status, text: await r.text() }));
    const mine = await ask(poolA), never = await ask(none);
    assert.equal(mine.status, 404, `${method} ${route}: ${mine.text}`);
    assert.equal(mine.text, never.text.replace(String(none), String(poolA)), `${method} ${route}`);
  }
  const bobPools = await get(srv.url + '/polykv/pools', as('bob'));
  assert.deepEqual(bobPools.json.pools, []);
  const adminPools = await get(srv.url + '/polykv/pools', as('admin'));
  const seen = adminPools.json.pools.find((p) => p.pool_id === poolA);
  assert.equal(seen.tenant, 'alice');
  assert.equal((await get(srv.url + `/polykv/pools/${poolA}`, as('alice'))).status, 200);

  /* The probe's guesses, as Bob: with a pool of his own, then with none.
   * Every count of reused tokens he is told is the same for every guess. */
  const own = await post(srv.url + '/polykv/pools', { prompt: 'The password of the vault is' }, as('bob'));
  assert.equal(own.status, 201, own.text);
  const told = [];
  for (const word of GUESSES) {
    for (const pool of [own.json.pool_id, 0]) {
      const r = await complete('bob', { prompt: promptWith(word), ...(pool ? { pool_id: pool } : {}) });
      assert.equal(r.status, 200, r.text);
      told.push({ word, pool, header: Number(r.headers.get('x-cached-prefix-tokens')),
                  cache_n: r.json.timings.cache_n, prompt_n: r.json.timings.prompt_n });
    }
  }
  for (const pool of [own.json.pool_id, 0]) {
    const rows = told.filter((t) => t.pool === pool);
    const first = rows[0];
    for (const t of rows)
      assert.deepEqual([t.header, t.cache_n, t.prompt_n], [first.header, first.cache_n, first.prompt_n],
                       JSON.stringify(rows));
    if (pool) assert.equal(first.header, own.json.prefix_len);   /* his own pool: told, it is his */
    else assert.equal(first.header, 0);
  }
  /* The same guesses by an admin key still show the engine shares across
   * namespaces (docs/security.md): that count is what the mask withholds. */
  const adminTold = {};
  for (const word of GUESSES)
    adminTold[word] = Number((await complete('admin', { prompt: promptWith(word) })).headers.get('x-cached-prefix-tokens'));
  const best = Object.entries(adminTold).sort((a, b) => b[1] - a[1])[0][0];
  assert.equal(best, SECRET, JSON.stringify(adminTold));

  /* Events and server-wide figures: an admin's. */
  const bobCache = await get(srv.url + '/polykv/cache', as('bob'));
  assert.equal(bobCache.status, 200);
  assert.equal(bobCache.json.tokens_reused, undefined);
  assert.ok(bobCache.json.events.every((e) => e.kind === 'admission_decision'), JSON.stringify(bobCache.json.events));
  const adminCache = await get(srv.url + '/polykv/cache', as('admin'));
  assert.ok(adminCache.json.events.some((e) => e.kind === 'placement'));
  assert.equal((await get(srv.url + '/metrics', as('bob'))).status, 403);
  assert.equal((await get(srv.url + '/metrics', as('ops'))).status, 200);
  assert.equal((await post(srv.url + '/polykv/admission', { target_tps_per_session: 1 }, as('bob'))).status, 403);
  assert.equal((await post(srv.url + '/slots/0?action=erase', {}, as('bob'))).status, 403);
  assert.equal((await post(srv.url + '/slots/0?action=erase', {}, as('ops'))).status, 200);
});

test('tenants: a session id must fit with its tenant prefix; the rest of the rules stay', { skip }, async () => {
  const r59 = await complete('bob', { prompt: 'hello there', session_id: 's'.repeat(59) });
  assert.equal(r59.status, 200, r59.text);
  const r60 = await complete('bob', { prompt: 'hello there', session_id: 's'.repeat(60) });
  assert.equal(r60.status, 400);
  assert.equal(r60.json.error.param, 'session_id');
  assert.match(r60.json.error.message, /at most 59/);
  const hdr = await post(srv.url + '/completion', { prompt: 'hello there', n_predict: 1 },
                         { ...as('bob'), 'x-session-id': 'h'.repeat(60) });
  assert.equal(hdr.status, 400);
  assert.equal(hdr.json.error.param, 'x-session-id');
  const pool = await post(srv.url + '/polykv/pools', { from_session: 'f'.repeat(60) }, as('bob'));
  assert.equal(pool.status, 400);
  assert.equal(pool.json.error.param, 'from_session');
  /* An admin's namespace is a one-key server's: 63 bytes. */
  assert.equal((await complete('admin', { prompt: 'hello there', session_id: 'a'.repeat(63) })).status, 200);
  /* No key, a wrong one: 401 as before. */
  assert.equal((await get(srv.url + '/slots')).status, 401);
  assert.equal((await get(srv.url + '/slots', { authorization: 'Bearer key-bob-' })).status, 401);
});
