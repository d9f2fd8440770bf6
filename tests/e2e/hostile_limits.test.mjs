// hostile_limits.test.mjs - the rows of docs/security.md that are about
// size and shape: depth bombs, 100k-element arrays, NaN/Inf, lone
// surrogates, counts out of range on every route, and pool operations that
// race (a fork of a pool being released, an attach to a pool evicted under
// pressure).  Each answer is the status the table says, never a 5xx, and
// the server's invariants hold after (POLYKV_CHECK=1 asserts them at every
// engine step).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { sharedModel, skipReason, startServer, post, get, sleep } from './lib.mjs';

const MODEL = 'stories260K.gguf';
const skip = skipReason(MODEL);
let srv;
before(async () => {
  if (skip) return;
  srv = await startServer(sharedModel(MODEL), ['-c', '1024', '-np', '2', '-t', '1', '--pools', '4']);
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
});

const nest = (open, close, n) => open.repeat(n) + close.repeat(n);
const chat = (extra) => ({ messages: [{ role: 'user', content: 'Once' }], max_tokens: 2, ...extra });
const many = (x, n) => Array.from({ length: n }, () => x);

/* [name, path, body (object, or a string sent as is), status, a regexp the message matches] */
const CASES = [
  ['array depth bomb (100k)', '/completion', `{"prompt": ${nest('[', ']', 100000)}}`, 400, /depth/],
  ['object depth bomb (50k)', '/v1/chat/completions', `{"x": ${nest('{"a":', '}', 50000).replace('{"a":}', '1')}}`,
   400, /depth|invalid JSON/],
  ['depth bomb on pools', '/polykv/pools', `{"prompt": ${nest('[', ']', 5000)}}`, 400, /depth/],
  ['NaN', '/completion', '{"prompt": "x", "temperature": NaN}', 400, /invalid token/],
  ['Infinity', '/v1/completions', '{"prompt": "x", "top_p": Infinity}', 400, /invalid token/],
  ['1e999', '/completion', '{"prompt": "x", "temperature": 1e999}', 400, /overflow/],
  ['integer past 64 bits', '/completion', '{"prompt": "x", "seed": 1180591620717411303424}', 400, /too big/],
  ['lone high surrogate', '/completion', '{"prompt": "\\ud800 x", "n_predict": 2}', 400, /Unicode/],
  ['lone low surrogate in chat', '/v1/chat/completions', '{"messages": [{"role": "user", "content": "\\udfff"}]}',
   400, /Unicode/],
  ['100k token ids', '/completion', { prompt: many(1, 100000), n_predict: 1 }, 400, /context size/],
  ['100k stop strings', '/completion', { prompt: 'x', stop: many('a', 100000) }, 400, /at most 7/],
  ['100k messages', '/v1/chat/completions', chat({ messages: many({ role: 'user', content: 'hi' }, 100000) }),
   400, /context size/],
  ['100k pool tokens', '/polykv/pools', { tokens: many(1, 100000) }, 400, /slot holds/],
  ['100k detokenize ids out of range', '/detokenize', { tokens: many(1e12, 100000) }, 400, /token id/],
  ['n_predict 1e15', '/completion', { prompt: 'x', n_predict: 1e15 }, 400, /n_predict/],
  ['n_predict -5', '/completion', { prompt: 'x', n_predict: -5 }, 400, /n_predict/],
  ['max_tokens 2^62', '/v1/chat/completions', chat({ max_tokens: 2 ** 62 }), 400, /max_tokens/],
  ['max_tokens -2', '/v1/completions', { prompt: 'x', max_tokens: -2 }, 400, /max_tokens/],
  ['n_probs 1e9', '/completion', { prompt: 'x', n_probs: 1e9 }, 400, /n_probs/],
  ['n_probs -1', '/completion', { prompt: 'x', n_probs: -1 }, 400, /n_probs/],
  ['top_logprobs 100', '/v1/chat/completions', chat({ logprobs: true, top_logprobs: 100 }), 400, /top_logprobs/],
  ['top_k 1e12', '/completion', { prompt: 'x', top_k: 1e12 }, 400, /top_k/],
  ['top_k -1', '/v1/completions', { prompt: 'x', top_k: -1 }, 400, /top_k/],
  ['n_keep 1e12', '/completion', { prompt: 'x', n_keep: 1e12 }, 400, /n_keep/],
  ['temperature as a string', '/completion', { prompt: 'x', temperature: 'hot' }, 400, /temperature/],
  ['branch_pos 1e15', '/polykv/pools/1/fork', { prompt: 'x', branch_pos: 1e15 }, 400, /branch_pos/],
  ['branch_pos -1', '/polykv/pools/1/fork', { prompt: 'x', branch_pos: -1 }, 400, /branch_pos/],
  ['pool id past 64 bits', '/polykv/pools/99999999999999999999/fork', { prompt: 'x' }, 404, /pool/],
  ['empty messages', '/v1/chat/completions', chat({ messages: [] }), 400, /empty/],
  ['a message without content', '/v1/chat/completions', chat({ messages: [{ role: 'user' }] }), 400, /content/],
  ['a body that is an array', '/completion', '[1, 2]', 400, /JSON object/],
  ['an empty body', '/v1/completions', '', 400, /JSON object/],
];

test('size and shape: every case gets its 4xx and a JSON error', { skip }, async () => {
  for (const [name, path, body, status, re] of CASES) {
    const r = await post(srv.url + path, body);
    assert.equal(r.status, status, `${name}: ${r.text.slice(0, 200)}`);
    assert.ok(r.json && r.json.error, `${name}: not a JSON error: ${r.text.slice(0, 200)}`);
    assert.match(r.json.error.message, re, name);
  }
  /* Counts at their documented edges are accepted. */
  for (const body of [{ prompt: 'x', n_predict: 2, n_probs: 20, top_k: 0 },
                      { prompt: 'x', n_predict: 2, zzz_unknown: 1 },
                      { prompt: 'x', n_predict: 2, logit_bias: many([1, 1.0], 100000) }]) {
    const r = await post(srv.url + '/completion', body);
    assert.equal(r.status, 200, r.text.slice(0, 200));
  }
  assert.equal((await get(srv.url + '/health')).status, 200);
});

test('forks of a pool being released: 200, 201, 404 or 409, never a 5xx, nothing leaked', { skip, timeout: 60000 },
  async () => {
    const seen = new Map();
    const count = (s) => seen.set(s, (seen.get(s) || 0) + 1);
    for (let round = 0; round < 12; round++) {
      const root = await post(srv.url + '/polykv/pools', { prompt: 'Once upon a time there was a little girl' });
      assert.equal(root.status, 201, root.text);
      const id = root.json.pool_id;
      const ops = [];           /* the release starts 0-12 ms after the forks: before, during, after them */
      for (let k = 0; k < 3; k++)
        ops.push(post(srv.url + `/polykv/pools/${id}/fork`, { prompt: `Once upon a time there was a little girl ${k}` }));
      ops.push(sleep((round % 4) * 4).then(() => fetch(srv.url + `/polykv/pools/${id}?recursive=true`, { method: 'DELETE' }))
        .then(async (r) => ({ status: r.status, text: await r.text() })));
      for (const r of await Promise.all(ops)) {
        assert.ok([200, 201, 404, 409, 429].includes(r.status), `round ${round}: ${r.status} ${r.text}`);
        count(r.status);
      }
      /* What survived the race goes now, children first via recursive. */
      await fetch(srv.url + `/polykv/pools/${id}?recursive=true`, { method: 'DELETE' });
      const left = (await get(srv.url + '/polykv/pools')).json;
      for (const p of left.tree?.pools || left.pools || [])
        await fetch(srv.url + `/polykv/pools/${p.pool_id}?recursive=true`, { method: 'DELETE' });
    }
    const end = (await get(srv.url + '/polykv/pools')).json;
    assert.equal((end.tree?.pools || end.pools || []).length, 0, JSON.stringify(end));
    console.log(`# race: ${JSON.stringify(Object.fromEntries(seen))}`);
  });

test('an attach to a pool evicted under pressure re-materializes it: same greedy tokens', { skip, timeout: 60000 },
  async () => {
    const small = await startServer(sharedModel(MODEL), ['-c', '512', '-np', '2', '-t', '1', '--pools', '2',
                                                         '--cache-ram', '0']);
    try {
      const prefix = 'Once upon a time there was a little girl named Lily. She liked to play in the park.';
      const p = await post(small.url + '/polykv/pools', { prompt: prefix });
      assert.equal(p.status, 201, p.text);
      const ask = { prompt: prefix + ' One day', n_predict: 16, temperature: 0, pool_id: p.json.pool_id,
                    return_tokens: true };
      const before = await post(small.url + '/completion', ask);
      assert.equal(before.status, 200, before.text);
      /* Pressure: sessions that fill both slots to their context, then an
       * explicit evict in the middle of it. */
      const fill = [0, 1].map((i) => post(small.url + '/completion',
        { prompt: `The dog ${i} ran`, n_predict: -1, ignore_eos: true, temperature: 0.9 })
        .catch((e) => ({ status: 0, text: String(e) })));     /* a failed check below stops the server */
      const id = p.json.pool_id;
      const residency = async () =>
        (await get(small.url + `/polykv/pools/${id}`)).json.pools.find((x) => x.pool_id === id)?.residency;
      const ev = await post(small.url + `/polykv/pools/${id}/evict`, {});
      assert.ok([200, 409].includes(ev.status), ev.text);
      if (ev.status === 200) assert.equal(await residency(), 'evicted', 'an evict answered 200 left the pool resident');
      else assert.match(ev.json.error.message, /decoding on pool|materializing/);
      for (const r of await Promise.all(fill)) assert.equal(r.status, 200, r.text);
      /* By the evict or by the pressure: else the attach below only reads
       * cells still there and re-materializes nothing. */
      assert.equal(await residency(), 'evicted', 'the pool is still resident before the attach');
      const after = await post(small.url + '/completion', ask);
      assert.equal(after.status, 200, after.text);
      assert.deepEqual(after.json.tokens, before.json.tokens, 'the re-materialized prefix gave other tokens');
      assert.equal(await residency(), 'resident', 'the attach did not re-materialize the pool');
    } finally {
      assert.equal(await small.stop(), 0);
    }
  });
