// placement.test.mjs - the placement issue's scenarios against the real
// server (rand-qwen2, ChatML turn markers; histories of 1-3K tokens):
// alternation past protection, rewritten transcripts, no wait, pigeonhole.
// A turn "reuses all but its new tokens" when timings.cache_n equals the
// common prefix of its prompt with what the previous turn left in the cache
// (its prompt and every generated token but the last; re-tokenizing the
// reply text can differ from the sampled tokens, which no cache can help).

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { sharedModel, skipReason, startServer, post, get, words, chatml } from './lib.mjs';

const QWEN = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const skip = skipReason(QWEN);
const servers = [];
after(async () => {
  for (const s of servers) assert.equal(await s.stop(), 0);
});

const lcp = (a, b) => { let i = 0; while (i < a.length && i < b.length && a[i] === b[i]) i++; return i; };

async function serve(args) {
  const s = await startServer(sharedModel(QWEN), ['-t', '1', ...args]);
  servers.push(s);
  return s;
}

// One turn: returns the result and what it left in the cache.
async function turn(s, msgs, n) {
  const prompt = chatml(msgs);
  const ids = (await post(s.url + '/tokenize', { content: prompt })).json.tokens;
  const t0 = Date.now();
  await get(s.url + '/health');
  const rtt = Date.now() - t0;   // this client's HTTP round trip, just now
  const sent = Date.now();
  const r = await post(s.url + '/completion', { prompt, n_predict: n, temperature: 0, return_tokens: true });
  assert.equal(r.status, 200, r.text);
  return { r: r.json, ids, sent, rtt, left: [...ids, ...r.json.tokens.slice(0, -1)] };
}

function reusable(prevLeft, ids) {
  return Math.min(lcp(prevLeft, ids), ids.length - 1);
}

test('alternation: two conversations past their protection reuse all but new tokens', { skip }, async () => {
  const s = await serve(['-c', '16384', '-np', '4', '--slot-ttl-max-s', '0.001']);
  const convs = [7, 8].map((seed) => ({ msgs: [{ role: 'system', content: `Agent ${seed}.` },
                                               { role: 'user', content: words(500, seed) }], left: null }));
  for (let t = 0; t < 3; t++) {
    for (const c of convs) {
      const x = await turn(s, c.msgs, 12);
      if (c.left) assert.equal(x.r.timings.cache_n, reusable(c.left, x.ids), `turn ${t}`);
      c.left = x.left;
      c.msgs.push({ role: 'assistant', content: x.r.content }, { role: 'user', content: 'continue' });
    }
  }
});

test('rewritten transcripts hold one history and keep a third conversation', { skip }, async () => {
  const s = await serve(['-c', '16384', '-np', '2', '--slot-ttl-max-s', '100000']);
  const third = [{ role: 'system', content: 'Third.' }, { role: 'user', content: words(300, 5) }];
  const t3 = await turn(s, third, 4);
  const doc = words(900, 6);
  for (let q = 0; q < 6; q++) {
    const x = await turn(s, [{ role: 'system', content: 'Classifier.' }, { role: 'user', content: doc },
                             { role: 'user', content: `verdict request ${q}` }], 2);
    if (q > 0) assert.ok(x.r.timings.cache_n > x.ids.length / 2, `query ${q} reused ${x.r.timings.cache_n}`);
  }
  const cache = (await get(s.url + '/polykv/cache')).json;
  assert.equal(cache.parked, 0, 'six rewrites, one history');
  const again = await turn(s, third, 4);
  assert.equal(again.r.timings.cache_n, t3.ids.length - 1, 'the third conversation was not pushed out');
});

test('pigeonhole and no wait: 4 agents on 3 slots, every idle history protected', { skip, timeout: 120000 },
  async () => {
    const s = await serve(['-c', '16384', '-np', '3', '--slot-ttl-max-s', '100000']);
    const agent = (i) => ({ msgs: [{ role: 'system', content: 'A sub-agent.' },
                                   { role: 'user', content: words(2200, 10 + i) }], left: null });
    const agents = [0, 1, 2, 3].map(agent);
    // No wait: each turn is placed (the server's placement event for its
    // own task, on the server's clock) within what reaching the server and
    // one engine step take: 2 of this client's /health round trips
    // measured just before it, plus 2 of the last turn's decode steps (its
    // predicted_ms per token), plus 50 ms for thread wake-ups on a loaded
    // machine.  A turn that waited for another's slot would wait for that
    // turn's whole answer; one that waited for a protection to end (1e5 s
    // here) runs into the test's timeout.
    // The first turn's step time comes from a short request before it (its
    // own would be unknown, and under a sanitizer one step is tens of ms).
    const warm = await post(s.url + '/completion', { prompt: 'Once', n_predict: 4, ignore_eos: true });
    let worst = { over: -Infinity }, stepMs = warm.json.timings.predicted_ms / Math.max(warm.json.timings.predicted_n, 1);
    let n_cornered = 0;
    for (const id of [0, 1, 2]) await post(s.url + `/slots/${id}?action=erase`, {});
    const go = async (a, round) => {
      // A new conversation meeting a protected history in every slot is
      // the case the claim is about: no blank or expired slot to take.
      const before = (await get(s.url + '/slots')).json;
      const cornered = !a.left && before.every((x) => x.history?.tokens > 0 && x.history.protected_for_s > 0);
      const x = await turn(s, a.msgs, 6);
      if (a.left) assert.equal(x.r.timings.cache_n, reusable(a.left, x.ids), `round ${round}: re-read its history`);
      a.left = x.left;
      a.msgs.push({ role: 'assistant', content: x.r.content }, { role: 'user', content: 'next' });
      const task = (await get(s.url + '/slots')).json[x.r.id_slot].id_task;
      const ev = (await get(s.url + '/polykv/cache')).json.events
        .find((e) => e.kind === 'placement' && e.id_task === task);
      assert.ok(ev, `round ${round}: no placement event for task ${task}`);
      if (cornered) {
        n_cornered++;
        assert.equal(ev.reason, 'least-loss', `round ${round}: a new conversation with every slot protected`);
      }
      const admit = ev.ts - x.sent, allowed = 2 * x.rtt + 2 * stepMs + 50;
      if (admit - allowed > worst.over) worst = { over: admit - allowed, admit, allowed, round };
      stepMs = x.r.timings.predicted_ms / Math.max(x.r.timings.predicted_n, 1);
    };
    for (let round = 0; round < 3; round++) {
      for (const a of agents) await go(a, round);
    }
    for (const i of [4, 5]) await go(agent(i), 3);   /* two more new ones, every slot protected */
    assert.equal(n_cornered, 3, 'new conversations that met a protected history in every slot');
    assert.ok(worst.over <= 0, `round ${worst.round}: placed ${worst.admit} ms after sending, allowed ` +
      `${worst.allowed.toFixed(1)} ms`);
  });
