// cache.test.mjs - the placement issue through the real server: a long
// conversation parked across a side request of another conversation on one
// slot (its next turn reuses all but the new tokens, and answers as it would
// without the side request), the --slot-* flags in /props (slot_policy),
// the environment variables, /slots history fields and /polykv/cache events.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { sharedModel, skipReason, startServer, post, get, words, chatml } from './lib.mjs';

const QWEN = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const skip = skipReason(QWEN);

async function complete(url, prompt, n) {
  const r = await post(url + '/completion', { prompt, n_predict: n, temperature: 0, cache_prompt: true, return_tokens: true });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

let one, ref;
before(async () => {
  if (skip) return;
  // One slot; protection long enough that the test's histories stay protected.
  one = await startServer(sharedModel(QWEN), ['-c', '8192', '-np', '1', '-t', '1', '--slot-ttl-max-s', '100000']);
  ref = await startServer(sharedModel(QWEN), ['-c', '8192', '-np', '1', '-t', '1']);
});
after(async () => {
  for (const x of [one, ref]) if (x) assert.equal(await x.stop(), 0);
});

test('park: a side request does not cost a long conversation its history', { skip }, async () => {
  const a = [{ role: 'system', content: 'You are a coding agent.' }, { role: 'user', content: words(2400, 7) }];
  const b = [{ role: 'system', content: 'Classify.' }, { role: 'user', content: words(300, 8) }];
  // Reference: A's two turns with nothing in between.
  const r1 = await complete(ref.url, chatml(a), 8);
  const a2 = [...a, { role: 'assistant', content: r1.content }, { role: 'user', content: 'and then?' }];
  const want = await complete(ref.url, chatml(a2), 8);

  const g1 = await complete(one.url, chatml(a), 8);
  assert.deepEqual(g1.tokens, r1.tokens);
  const side = await complete(one.url, chatml(b), 4);
  const got = await complete(one.url, chatml(a2), 8);
  assert.deepEqual(got.tokens, want.tokens, 'same answer as without the side request');
  // All but the new tokens: everything A's first turn left (the prompt and
  // all generated tokens but the last) that the new prompt repeats.
  const tok = await post(one.url + '/tokenize', { content: chatml(a2), with_pieces: false, parse_special: true });
  const firstTurn = g1.timings.prompt_n + g1.timings.cache_n;
  assert.ok(got.timings.cache_n >= firstTurn, `reused ${got.timings.cache_n}, first turn ${firstTurn}`);
  assert.ok(got.timings.prompt_n < 40, `new tokens read: ${got.timings.prompt_n} of ${tok.json.tokens.length}`);
  assert.ok(side.timings.cache_n < 10, 'the side request shares only the template start');

  const cache = await get(one.url + '/polykv/cache');
  assert.equal(cache.status, 200);
  const kinds = cache.json.events.map((e) => e.kind);
  assert.ok(kinds.includes('park'), JSON.stringify(kinds));
  assert.ok(kinds.includes('placement') && kinds.includes('admission'));
  assert.ok(cache.json.tokens_reused >= got.timings.cache_n);
  assert.ok(cache.json.events.length <= 96);
  const slots = await get(one.url + '/slots');
  const h = slots.json[0].history;
  assert.ok(h.tokens > 2000 && h.value > 0 && h.protected_for_s > 0, JSON.stringify(h));
  assert.match(h.last_reason, /./);
});

test('slot policy: flags and environment show in /props', { skip }, async () => {
  const props = await get(one.url + '/props');
  assert.equal(props.json.slot_policy.ttl_max_s, 100000);
  assert.equal(props.json.slot_policy.sibling_share, 0.98);
  process.env.POLYKV_SLOT_PARK_VALUE_RATIO = '3.5';
  const s = await startServer(sharedModel(QWEN), ['-c', '1024', '-np', '1', '-t', '1', '--slot-sibling-share', '0.9']);
  delete process.env.POLYKV_SLOT_PARK_VALUE_RATIO;
  try {
    const p = await get(s.url + '/props');
    assert.equal(p.json.slot_policy.park_value_ratio, 3.5);
    assert.equal(p.json.slot_policy.sibling_share, 0.9);
    assert.ok(Array.isArray(p.json.slot_policy.ttl_curve));
  } finally {
    assert.equal(await s.stop(), 0);
  }
});
