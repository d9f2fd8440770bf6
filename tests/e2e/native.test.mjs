// native.test.mjs - llama.cpp's endpoints over plain HTTP (node's fetch):
// /completion against `polykv run` (same greedy token ids), prompts as ids
// and mixed arrays, streaming, the prompt cache, log-probs, slots,
// /tokenize, /detokenize, /apply-template (Llama 3.1 tools), /props,
// /slots, /metrics, /polykv/tps (snapshot and stream), the error statuses
// (400, 401, 404, 405, 413), disconnects freeing their slot, and an idle
// server using no CPU.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  sharedModel, skipReason, startServer, post, get, readSSE, runJson, cpuSeconds, sleep,
} from './lib.mjs';

const STORIES = 'stories260K.gguf';
const QWEN = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const LLAMA = 'rand-llama-llama3vocab-e256-l2-Q8_0.gguf';
const skip = skipReason(STORIES, QWEN, LLAMA);

let s, q, guarded;

before(async () => {
  if (skip) return;
  s = await startServer(sharedModel(STORIES), ['-c', '2048', '-np', '2', '-t', '1', '--metrics']);
  q = await startServer(sharedModel(QWEN), ['-c', '2048', '-np', '1', '-t', '1']);
  guarded = await startServer(sharedModel(STORIES), ['-c', '512', '-np', '1', '-t', '1', '--api-key', 'k3y',
    '--max-body', '2000', '--no-slots']);
});

after(async () => {
  for (const x of [s, q, guarded]) if (x) assert.equal(await x.stop(), 0);
});

test('/completion equals polykv run token for token (greedy)', { skip }, async () => {
  for (const [srv, model, prompt] of [
    [s, STORIES, 'Once upon a time'],
    [s, STORIES, 'Lily and Max went to the park. They saw'],
    [q, QWEN, 'The capital of France is'],
  ]) {
    const ref = runJson(sharedModel(model), prompt, 24);
    const r = await post(srv.url + '/completion', { prompt, n_predict: 24, temperature: 0, return_tokens: true });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.tokens, ref.tokens, `${model}: ${prompt}`);
    assert.equal(r.json.tokens_evaluated, ref.prompt_tokens.length);
    // The same with log-probs asked for: same tokens, and greedy is the top one.
    const p = await post(srv.url + '/completion', { prompt, n_predict: 24, temperature: 0, n_probs: 3,
      cache_prompt: false });
    const probs = p.json.completion_probabilities;
    assert.deepEqual(probs.map((e) => e.id), ref.tokens);
    for (const e of probs) {
      assert.equal(e.top_logprobs.length, 3);
      assert.equal(e.top_logprobs[0].id, e.id);
    }
  }
});

test('/completion: ids, mixed prompts, streaming, timings', { skip }, async () => {
  const t = await post(s.url + '/tokenize', { content: 'Once upon a time', add_special: true });
  const ids = t.json.tokens;
  const a = await post(s.url + '/completion', { prompt: 'Once upon a time', n_predict: 12, temperature: 0,
    return_tokens: true });
  const b = await post(s.url + '/completion', { prompt: ids, n_predict: 12, temperature: 0, return_tokens: true });
  assert.deepEqual(b.json.tokens, a.json.tokens);
  const c = await post(s.url + '/completion', { prompt: [ids[0], 'Once upon a time'], n_predict: 12, temperature: 0,
    return_tokens: true });
  assert.deepEqual(c.json.tokens, a.json.tokens);

  const res = await fetch(s.url + '/completion', { method: 'POST',
    body: JSON.stringify({ prompt: 'Once upon a time', n_predict: 12, temperature: 0, stream: true }) });
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  let content = '', final = null, n = 0;
  await readSSE(res, (data) => {
    const e = JSON.parse(data);
    if (e.stop) final = e;
    else {
      content += e.content;
      n++;
      assert.equal(e.tokens.length, 1);
    }
  });
  assert.equal(content, a.json.content);
  assert.equal(n, 12);
  assert.equal(final.stop_type, 'limit');
  for (const k of ['prompt_n', 'prompt_ms', 'predicted_n', 'predicted_ms', 'predicted_per_second',
    'prompt_per_second', 'cache_n']) assert.equal(typeof final.timings[k], 'number', k);
  assert.equal(final.timings.predicted_n, 12);
});

test('prompt cache: a repeat reuses the prefix; cache_prompt false does not', { skip }, async () => {
  const prompt = 'Lily had a red ball. She liked to throw it high in the sky and catch it.';
  const body = { prompt, n_predict: 4, temperature: 0, id_slot: 1 };
  const a = await post(s.url + '/completion', body);
  const b = await post(s.url + '/completion', body);
  assert.equal(b.json.id_slot, 1);
  assert.equal(b.json.timings.cache_n, b.json.tokens_evaluated - 1);
  assert.equal(b.json.timings.prompt_n, 1);
  assert.equal(b.json.content, a.json.content);
  const c = await post(s.url + '/completion', { ...body, cache_prompt: false });
  assert.equal(c.json.timings.cache_n, 0);
  const v1 = await post(s.url + '/v1/completions', { prompt, max_tokens: 4, temperature: 0, id_slot: 1 });
  assert.ok(v1.json.usage.prompt_tokens_details.cached_tokens > 0);
});

test('/tokenize, /detokenize, /apply-template, /props, /v1/models', { skip }, async () => {
  const t = await post(s.url + '/tokenize', { content: 'Hello world', with_pieces: true });
  assert.equal(t.status, 200);
  const ids = t.json.tokens.map((x) => x.id);
  assert.equal(t.json.tokens.map((x) => x.piece).join(''), ' Hello world');
  const d = await post(s.url + '/detokenize', { tokens: ids });
  assert.equal(d.json.content, ' Hello world');
  assert.deepEqual((await post(s.url + '/tokenize', { content: 'Hello world' })).json.tokens, ids);
  assert.deepEqual((await post(s.url + '/tokenize', { content: [ids[0], 'x'] })).status, 200);

  const l = await startServer(sharedModel(LLAMA), ['-c', '512', '-np', '1', '-t', '1', '--chat-template', 'llama3']);
  try {
    const at = await post(l.url + '/apply-template', {
      messages: [{ role: 'user', content: 'Weather in Oslo?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }],
    });
    assert.equal(at.status, 200);
    assert.ok(at.json.prompt.startsWith('<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n'));
    assert.ok(at.json.prompt.includes('{\n    "type": "function",\n    "function": {\n        "name": "get_weather"'));
    assert.ok(at.json.prompt.endsWith('Weather in Oslo?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n'));
    const plain = await post(l.url + '/apply-template', { messages: [{ role: 'user', content: ' hi ' }] });
    assert.equal(plain.json.prompt,
      '<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n');
  } finally {
    await l.stop();
  }

  const p = await get(s.url + '/props');
  assert.equal(p.json.total_slots, 2);
  assert.equal(p.json.default_generation_settings.n_ctx, 1024);
  assert.equal(p.json.endpoint_metrics, true);
  const m = await get(s.url + '/v1/models');
  assert.equal(m.json.data[0].id, STORIES);
  assert.equal(m.json.data[0].meta.n_ctx, 1024);
});

test('/slots, /metrics, /polykv/tps', { skip }, async () => {
  const sl = await get(s.url + '/slots');
  assert.equal(sl.json.length, 2);
  for (const x of sl.json)
    for (const k of ['id', 'state', 'n_ctx', 'n_past', 'n_cached', 'n_decoded', 'tps_ewma', 'is_processing'])
      assert.ok(k in x, k);

  const mt = await get(s.url + '/metrics');
  assert.equal(mt.status, 200);
  assert.match(mt.headers.get('content-type'), /^text\/plain/);
  for (const [name, type] of [
    ['llamacpp:prompt_tokens_total', 'counter'], ['llamacpp:prompt_seconds_total', 'counter'],
    ['llamacpp:tokens_predicted_total', 'counter'], ['llamacpp:tokens_predicted_seconds_total', 'counter'],
    ['llamacpp:n_decode_total', 'counter'], ['llamacpp:n_busy_slots_per_decode', 'gauge'],
    ['llamacpp:prompt_tokens_seconds', 'gauge'], ['llamacpp:predicted_tokens_seconds', 'gauge'],
    ['llamacpp:requests_processing', 'gauge'], ['llamacpp:requests_deferred', 'gauge'],
    ['llamacpp:kv_cache_usage_ratio', 'gauge'], ['llamacpp:kv_cache_tokens', 'gauge'],
    ['polykv:aggregate_decode_tokens_per_second', 'gauge'], ['polykv:mean_session_decode_tokens_per_second', 'gauge'],
    ['polykv:kv_cells_used', 'gauge'], ['polykv:kv_cells_total', 'gauge'],
    ['vllm:num_requests_waiting', 'gauge'], ['vllm:num_requests_running', 'gauge'],
    ['vllm:kv_cache_usage_perc', 'gauge'],
  ]) {
    assert.ok(mt.text.includes(`# TYPE ${name} ${type}\n`), name);
    assert.match(mt.text, new RegExp(`^${name}(\\{[^}]*\\})? [0-9.e+-]+$`, 'm'), name);
  }
  assert.ok(Number(mt.text.match(/^llamacpp:tokens_predicted_total (\S+)$/m)[1]) > 0);
  const perc = Number(mt.text.match(/^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)$/m)[1]);
  assert.ok(perc > 0 && perc <= 1);
  assert.equal((await get(q.url + '/metrics')).status, 501);

  const tps = await get(s.url + '/polykv/tps');
  for (const k of ['ts', 'aggregate_tps', 'mean_active_tps', 'sessions']) assert.ok(k in tps.json, k);

  // Streamed snapshots while a request runs, timed by the server's own
  // stamps (ts, when each snapshot was taken), not by their arrival here.
  // They are due every interval_ms; one may be late by the engine step it
  // waits for (eng_get_stats) plus scheduling, so the mean of 4 gaps is at
  // least 0.9 interval (never flooded) and at most interval + 2 steps (the
  // step from the running session's own tps_ewma) + 100 ms.
  // The session must outlast the 6 snapshots: stories260K writes a 2,000-
  // token context in about 0.1 s, so this server's steps take 2 ms more.
  const slow = await startServer(sharedModel(STORIES), ['-c', '2048', '-np', '1', '-t', '1'],
                                 { env: { POLYKV_TEST_STEP_DELAY_MS: '2' } });
  const stopGen = new AbortController();
  const gen = fetch(slow.url + '/completion', { method: 'POST', signal: stopGen.signal,
    body: JSON.stringify({ prompt: 'Once', n_predict: 2000, ignore_eos: true }) }).catch(() => {});
  for (let t0 = Date.now(); (await get(slow.url + '/polykv/tps')).json.sessions.length === 0;) {
    assert.ok(Date.now() - t0 < 30000, 'the session never started');
    await sleep(5);
  }
  const ac = new AbortController();
  const res = await fetch(slow.url + '/polykv/tps?stream=1&interval_ms=60', { signal: ac.signal });
  const snaps = [];
  await readSSE(res, (data) => {
    snaps.push(JSON.parse(data));
    return snaps.length < 6;
  }).catch(() => {});
  ac.abort();
  stopGen.abort();
  await gen;
  assert.equal(await slow.stop(), 0);
  assert.ok(snaps.every((x) => x.sessions.length === 1), 'the session ran through every snapshot');
  assert.equal(snaps.length, 6);
  for (let i = 1; i < 6; i++) assert.ok(snaps[i].ts >= snaps[i - 1].ts);
  const gap = (snaps[5].ts - snaps[1].ts) / 4;
  const rate = Math.max(...snaps.flatMap((x) => x.sessions.map((y) => y.tps_ewma)), 1);
  const most = 60 + 2 * 1000 / rate + 100;
  assert.ok(gap >= 54 && gap <= most, `snapshots every ${gap} ms by the server's clock (allowed 54..${most.toFixed(0)})`);
  assert.equal((await get(s.url + '/polykv/tps?stream=1&interval_ms=5')).status, 400);
});

test('error statuses', { skip }, async () => {
  const c = s.url + '/completion';
  assert.equal((await get(s.url + '/nope')).status, 404);
  assert.equal((await get(c)).status, 405);
  const bad = await post(c, '{"prompt": "x",');
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.type, 'invalid_request_error');
  assert.equal((await post(c, { prompt: 'x', n_predict: 'ten' })).json.error.param, 'n_predict');
  assert.equal((await post(c, { prompt: 'x', temperature: [] })).json.error.param, 'temperature');
  assert.equal((await post(c, { prompt: [1, 2, 1e9] })).status, 400);
  const two = await post(c, { prompt: ['a', 'b'], n_predict: 1 });   // two prompts, two answers
  assert.equal(two.status, 200);
  assert.equal(two.json.length, 2);
  assert.equal((await post(c, { prompt: Array(17).fill('a'), n_predict: 1 })).status, 400);
  assert.equal((await post(s.url + '/detokenize', { tokens: 'abc' })).status, 400);
  const long = await post(c, { prompt: Array(1500).fill(7) });
  assert.equal(long.status, 400);
  assert.equal(long.json.error.type, 'exceed_context_size_error');

  const g = guarded.url;
  assert.equal((await post(g + '/completion', { prompt: 'x', n_predict: 1 })).status, 401);
  assert.equal((await post(g + '/completion', { prompt: 'x', n_predict: 1 }, { authorization: 'Bearer nope' })).status, 401);
  const ok = await post(g + '/completion', { prompt: 'x', n_predict: 1 }, { authorization: 'Bearer k3y' });
  assert.equal(ok.status, 200);
  // With a key, every route needs it (--public-probes opens /health and /metrics: persist.test.mjs),
  // and the startup log says how to open the probes; without a key it says nothing of it.
  assert.match(guarded.log(), /--api-key guards \/health and \/metrics .*add --public-probes/);
  assert.doesNotMatch(s.log(), /--public-probes/);
  assert.equal((await get(g + '/health')).status, 401);
  assert.equal((await get(g + '/v1/models')).status, 401);
  assert.equal((await get(g + '/health', { authorization: 'Bearer k3y' })).status, 200);
  const big = await post(g + '/completion', { prompt: 'x'.repeat(3000) }, { authorization: 'Bearer k3y' });
  assert.equal(big.status, 413);
  assert.equal((await get(g + '/slots', { authorization: 'Bearer k3y' })).status, 501);
});

async function allIdle(url, ms = 3000) {
  for (let t = 0; t < ms; t += 20) {
    const sl = (await get(url + '/slots')).json;
    if (sl.every((x) => x.state === 'idle')) return true;
    await sleep(20);
  }
  return false;
}

// The newest task's slot as /slots reports it.
async function newest(url) {
  const sl = (await get(url + '/slots')).json;
  return sl.reduce((x, y) => (y.id_task > x.id_task ? y : x));
}

// A client that leaves: the server looks at the connection every
// SRV_POLL_MS (100 ms, src/server/srv_impl.h) while it waits for events, so
// after the client goes the task decodes for about that long.  Counted, not
// raced: the client leaves once the server reports the task decoding (8
// tokens, so its tps_ewma has a few gaps), and the slot may then decode at
// most what 0.5 s at that measured rate allows, 5x the poll interval (the
// rate only falls as the context grows).  Its slot holds 262144 cells, so a
// task that went on unnoticed would run far past that bound (or past the
// 3 s allIdle waits).
test('a client that disconnects frees its slot', { skip }, async () => {
  const big = await startServer(sharedModel(STORIES), ['-c', '262144', '-np', '1', '-t', '1']);
  try {
    for (const stream of [true, false]) {
      const ac = new AbortController();
      const res = fetch(big.url + '/completion', { method: 'POST', signal: ac.signal,
        body: JSON.stringify({ prompt: 'Once', n_predict: -1, ignore_eos: true, stream }) });
      let at = null;
      for (let i = 0; ; i++) {
        const x = await newest(big.url);
        if (x.is_processing && x.n_decoded >= 8) { at = x; break; }
        assert.ok(i < 1000, 'the task did not start decoding');
        await sleep(2);
      }
      ac.abort();
      await res.then((r) => r.text()).catch(() => {});
      assert.ok(await allIdle(big.url), `slot still busy after a disconnect (stream ${stream})`);
      const end = await newest(big.url);
      assert.equal(end.id_task, at.id_task);
      // The server checks its client every 100 ms (SRV_POLL_MS); 2 s of
      // decoding is the budget for that and for a loaded machine's
      // scheduling (a run beside a sanitizer suite took 1.2 s).  Not
      // noticing would run to the 262144-cell context, minutes away.
      const bound = at.n_decoded + Math.ceil(Math.max(at.tps_ewma, 1) * 2);
      assert.ok(bound < 262144 / 2, `decoding too fast for this check: ${at.tps_ewma} tok/s`);
      assert.ok(end.n_decoded <= bound,
        `stream ${stream}: ${end.n_decoded} tokens decoded, ${at.n_decoded} when the client left at ` +
        `${at.tps_ewma.toFixed(0)} tok/s (allowed ${bound})`);
    }
  } finally {
    assert.equal(await big.stop(), 0);
  }
});

// /proc counts CPU time in ticks of 10 ms: over 2 s idle the server may
// use at most 2 (what a timer or the kernel's accounting can charge), where
// a worker spinning would use 200.
test('an idle server uses no CPU', { skip }, async () => {
  await sleep(200);
  const c0 = cpuSeconds(s.pid);
  await sleep(2000);
  const used = cpuSeconds(s.pid) - c0;
  assert.ok(used <= 0.02, `idle server used ${used} s of CPU in 2 s`);
});

// "While they decode" is counted from /slots: each of the three busy tasks
// is the same task before and after ours and its n_decoded grew by at
// least our 24 tokens over our request (one token each per shared step).
// They have 4096 cells each and no token limit, so they cannot run out
// before ours is done.
test('/completion equals polykv run while 3 other sessions decode', { skip }, async () => {
  const four = await startServer(sharedModel(STORIES), ['-c', '16384', '-np', '4', '-t', '1']);
  try {
    const prompt = 'Lily and Max went to the park. They saw';
    const ref = runJson(sharedModel(STORIES), prompt, 24);
    // Three sessions that keep decoding (sampled, EOS ignored) while ours runs.
    const ctl = new AbortController();
    const busy = ['Once upon a time', 'The sun was', 'Tom had a dog'].map((p) =>
      fetch(four.url + '/completion', { method: 'POST', signal: ctl.signal,
        body: JSON.stringify({ prompt: p, n_predict: -1, ignore_eos: true, temperature: 0.8, stream: true }) })
        .then((res) => readSSE(res, () => {})).catch(() => {}));
    let start;
    for (let i = 0; ; i++) {                        // wait until all three decode
      start = (await get(four.url + '/slots')).json.filter((x) => x.is_processing);
      if (start.length === 3) break;
      assert.ok(i < 500, 'the three sessions did not start');
      await sleep(10);
    }
    const r = await post(four.url + '/completion', { prompt, n_predict: 24, temperature: 0, return_tokens: true });
    const end = (await get(four.url + '/slots')).json;
    ctl.abort();
    await Promise.all(busy);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.tokens, ref.tokens);
    for (const x of start) {
      const y = end.find((z) => z.id === x.id);
      assert.equal(y.id_task, x.id_task, `slot ${x.id} changed task`);
      assert.ok(y.n_decoded - x.n_decoded >= 24,
        `slot ${x.id} decoded ${y.n_decoded - x.n_decoded} tokens during our 24: ${JSON.stringify(end)}`);
    }
  } finally {
    assert.equal(await four.stop(), 0);
  }
});
