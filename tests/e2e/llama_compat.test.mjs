// llama_compat.test.mjs - what scripts written for llama-server rely on,
// against the real server: CORS (preflight on any path, localhost origins
// by default, a configured list, headers on ordinary answers), the
// llama-server flags (request defaults from --temp/--seed/-n, --props,
// unknown and refused flags named), and request fields: logit_bias (a
// banned token never comes back), n > 1 choices, several prompts,
// post_sampling_probs, response_fields, return_progress, timings_per_token,
// __verbose, /slots n_remain, /metrics' Process-Start-Time-Unix, and a seed
// giving llama-server's tokens.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { BIN, sharedModel, skipReason, startServer, post, get, readSSE } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const skip = skipReason(STORIES);
let s, listed;

before(async () => {
  if (skip) return;
  s = await startServer(sharedModel(STORIES), ['-c', '1024', '-np', '2', '-t', '1', '--metrics', '--temp', '0',
    '--seed', '42', '-n', '6', '-b', '32']);
  listed = await startServer(sharedModel(STORIES), ['-c', '256', '-np', '1', '-t', '1', '--props',
    '--cors-origins', 'https://app.example, http://other.example', '--api-key', 'k']);
});

after(async () => {
  await s?.stop();
  await listed?.stop();
});

const preflight = (url, origin) => fetch(url, { method: 'OPTIONS', headers: {
  Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'Authorization' } });

test('CORS: preflight on every path, localhost origins by default', { skip }, async () => {
  for (const path of ['/completion', '/v1/chat/completions', '/slots', '/no/such/path']) {
    const r = await preflight(s.url + path, 'http://localhost:5173');
    assert.equal(r.status, 200, path);
    assert.equal(r.headers.get('access-control-allow-origin'), 'http://localhost:5173');
    assert.match(r.headers.get('access-control-allow-methods'), /POST/);
    assert.equal(r.headers.get('access-control-allow-headers'), '*');
  }
  for (const o of ['http://[::1]:3000', 'http://127.0.0.1']) {
    assert.equal((await preflight(s.url + '/completion', o)).headers.get('access-control-allow-origin'), o);
  }
  for (const o of ['http://evil.example', 'http://localhost.evil.example', 'http://notlocalhost']) {
    const r = await preflight(s.url + '/completion', o);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('access-control-allow-origin'), null, o);
  }
  // An ordinary answer carries the origin too, an error one as well.
  const ok = await fetch(s.url + '/health', { headers: { Origin: 'http://localhost:8080' } });
  assert.equal(ok.headers.get('access-control-allow-origin'), 'http://localhost:8080');
  const bad = await fetch(s.url + '/completion', { method: 'POST', body: '{', headers: { Origin: 'http://localhost' } });
  assert.equal(bad.status, 400);
  assert.equal(bad.headers.get('access-control-allow-origin'), 'http://localhost');
});

test('CORS: --cors-origins list; preflight needs no API key, the request does', { skip }, async () => {
  const r = await preflight(listed.url + '/v1/completions', 'http://other.example');
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('access-control-allow-origin'), 'http://other.example');
  assert.equal((await preflight(listed.url + '/v1/completions', 'http://localhost')).headers
    .get('access-control-allow-origin'), null);
  // With --api-key every route but the page's files needs it (docs/security.md);
  // the 401 still carries the CORS headers, so a browser page can read it.
  const denied = await fetch(listed.url + '/v1/models', { headers: { Origin: 'https://app.example' } });
  assert.equal(denied.status, 401);
  assert.equal(denied.headers.get('access-control-allow-origin'), 'https://app.example');
  assert.equal((await post(listed.url + '/completion', { prompt: 'a' })).status, 401);
});

test('CORS: with --api-key and no --cors-origins any origin is echoed (llama-server\'s default); the key still guards', { skip }, async () => {
  const k = await startServer(sharedModel(STORIES), ['-c', '256', '-np', '1', '-t', '1', '--api-key', 'k']);
  try {
    for (const o of ['web.mydomain.fr', 'http://evil.example']) {
      const r = await preflight(k.url + '/completions', o);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('access-control-allow-origin'), o);
      assert.equal(r.headers.get('access-control-allow-credentials'), 'true');
    }
    const denied = await fetch(k.url + '/v1/models', { headers: { Origin: 'http://evil.example' } });
    assert.equal(denied.status, 401);
    const ok = await fetch(k.url + '/v1/models', { headers: { Origin: 'http://evil.example', Authorization: 'Bearer k' } });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get('access-control-allow-origin'), 'http://evil.example');
  } finally {
    await k.stop();
  }
});

test('flags: --temp/--seed/-n are request defaults a request overrides', { skip }, async () => {
  const a = await post(s.url + '/completion', { prompt: 'Once upon a time' });
  assert.equal(a.status, 200);
  assert.equal(a.json.tokens_predicted, 6);
  assert.equal(a.json.generation_settings.temperature, 0);
  assert.equal(a.json.generation_settings.seed, 42);
  const b = await post(s.url + '/completion', { prompt: 'Once upon a time' });
  assert.equal(b.json.content, a.json.content);  // greedy
  const c = await post(s.url + '/completion', { prompt: 'Once upon a time', n_predict: 3 });
  assert.equal(c.json.tokens_predicted, 3);
  const props = await get(s.url + '/props');
  assert.equal(props.json.default_generation_settings.params.n_predict, 6);
  assert.equal(props.json.default_generation_settings.params.temperature, 0);
  assert.equal(props.json.endpoint_props, false);
  assert.equal((await post(s.url + '/props', {})).status, 501);
  assert.equal((await post(listed.url + '/props', {}, { Authorization: 'Bearer k' })).status, 200);
  assert.equal((await post(listed.url + '/props', { n_ctx: 5 }, { Authorization: 'Bearer k' })).status, 400);
});

// llama-server's own tokens for these requests (stories260K, its default
// flags, `/completion` with return_tokens), recorded from its build of
// /work/peers/llama.cpp: polykv's sampler draws llama.cpp's random sequence
// with its chain's arithmetic (src/sample/smp.h), so a seed gives the same
// text.  Short, because the two forward passes differ by ~1e-3 in a
// log-prob and a longer stream can part where a draw lands that close to a
// boundary.
const LLAMA_SEEDED = {
  42: [298, 414, 299, 267, 268, 266, 426, 359, 413, 439, 419, 262, 424, 411, 294, 285],
  7: [261, 282, 294, 415, 426, 359, 413, 410, 293, 399, 349, 420, 289, 428, 269, 284],
};

test('seeded sampling: llama-server\'s tokens, reproducible, streamed the same, --seed the default', { skip }, async () => {
  const req = (extra) => ({ prompt: 'I believe the meaning of life is', n_predict: 16, temperature: 0.8,
    return_tokens: true, ...extra });
  for (const [seed, want] of Object.entries(LLAMA_SEEDED)) {
    const a = await post(s.url + '/completion', req({ seed: Number(seed) }));
    assert.equal(a.status, 200);
    assert.deepEqual(a.json.tokens, want, `seed ${seed}`);
    assert.equal(a.json.generation_settings.seed, Number(seed));
    const b = await post(s.url + '/completion', req({ seed: Number(seed) }));
    assert.deepEqual(b.json.tokens, want, `seed ${seed} again`);
  }
  assert.match((await post(s.url + '/completion', req({ seed: 42 }))).json.content, /^ going to bed/);
  // No seed in the request: the server's --seed 42.
  assert.deepEqual((await post(s.url + '/completion', req({}))).json.tokens, LLAMA_SEEDED[42]);
  // A stream draws the same sequence.
  const res = await fetch(s.url + '/completion', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(req({ seed: 7, stream: true })) });
  const streamed = [];
  await readSSE(res, (d) => {
    const j = JSON.parse(d);
    if (!j.stop) streamed.push(...j.tokens);
  });
  assert.deepEqual(streamed, LLAMA_SEEDED[7]);
});

test('seeded sampling: choice j of n draws with seed + j, as llama-server\'s child tasks', { skip }, async () => {
  const req = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 12, temperature: 0.8 };
  const multi = await post(s.url + '/v1/chat/completions', { ...req, seed: 42, n: 3 });
  assert.equal(multi.status, 200);
  const texts = multi.json.choices.sort((a, b) => a.index - b.index).map((c) => c.message.content);
  for (let j = 0; j < 3; j++) {
    const one = await post(s.url + '/v1/chat/completions', { ...req, seed: 42 + j });
    assert.equal(texts[j], one.json.choices[0].message.content, `choice ${j}`);
  }
  assert.equal(new Set(texts).size, 3);
  // Several prompts: each prompt's choices count from the request's seed.
  const many = await post(s.url + '/v1/completions', { prompt: ['Once upon', 'Tom'], n: 2, max_tokens: 6,
    temperature: 0.8, seed: 7 });
  const t = many.json.choices.sort((a, b) => a.index - b.index).map((c) => c.text);
  const single = async (prompt, seed) => (await post(s.url + '/v1/completions', { prompt, max_tokens: 6,
    temperature: 0.8, seed })).json.choices[0].text;
  assert.deepEqual(t, [await single('Once upon', 7), await single('Once upon', 8), await single('Tom', 7),
    await single('Tom', 8)]);
});

test('flags: unknown and refused ones are named, and --help lists the llama-server ones', { skip }, () => {
  const run = (args) => {
    try {
      execFileSync(BIN, ['serve', ...args], { stdio: 'pipe' });
      return null;
    } catch (e) {
      return e.stderr.toString();
    }
  };
  assert.match(run(['-m', 'x.gguf', '--frobnicate']), /unknown option --frobnicate/);
  assert.match(run(['-m', 'x.gguf', '--no-such-switch-at-end']), /unknown option --no-such-switch-at-end/);
  assert.match(run(['--model-url', 'http://127.0.0.1:1/m.gguf']), /--model-url: a model by URL is not supported/);
  assert.match(run(['-m', 'x.gguf', '--reasoning-budget', '100']), /--reasoning-budget/);
  assert.match(run(['-m', 'x.gguf', '--reasoning-format', 'sideways']), /--reasoning-format/);
  const h = spawnSync(BIN, ['serve', '--help']);
  const help = h.stdout.toString() + h.stderr.toString();
  for (const f of ['--seed', '--temp', '--top-k', '--n-predict', '--verbose', '--props', '--cors-origins',
    '--reasoning-format', '--reasoning-budget', '--alias', '--no-slots', '--hf-repo', '--hf-file', '--hf-token',
    '--offline'])
    assert.ok(help.includes(f), f);
});

test('logit_bias: a banned token never comes back, in both forms', { skip }, async () => {
  const base = await post(s.url + '/completion', { prompt: 'Once upon a time', n_predict: 12, return_tokens: true });
  const top = base.json.tokens[0];
  for (const logit_bias of [[[top, false]], { [top]: -1000 }]) {
    const r = await post(s.url + '/completion', { prompt: 'Once upon a time', n_predict: 12, return_tokens: true,
      logit_bias });
    assert.equal(r.status, 200);
    assert.ok(!r.json.tokens.includes(top), JSON.stringify(r.json.tokens));
    assert.equal(r.json.generation_settings.logit_bias[0].token, top);
  }
  assert.equal((await post(s.url + '/completion', { prompt: 'a', logit_bias: [[999999, 1]] })).status, 400);
});

test('n > 1 and several prompts give several answers', { skip }, async () => {
  const chat = await post(s.url + '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], n: 3,
    max_tokens: 4 });
  assert.equal(chat.status, 200);
  assert.deepEqual(chat.json.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(chat.json.usage.completion_tokens, 12);
  const many = await post(s.url + '/completion', { prompt: ['Once upon', [1, 300, 301], { prompt_string: 'Tom' }] });
  assert.equal(many.status, 200);
  assert.equal(many.json.length, 3);
  assert.deepEqual(many.json.map((x) => x.index), [0, 1, 2]);
  assert.equal((await post(s.url + '/completion', { prompt: ['a', 'b'], stream: true })).status, 400);
});

test('post_sampling_probs, response_fields, __verbose, /slots, /metrics', { skip }, async () => {
  const r = await post(s.url + '/completion', { prompt: 'Once upon a time', n_predict: 2, temperature: 1,
    top_k: 5, n_probs: 8, post_sampling_probs: true });
  for (const p of r.json.completion_probabilities) {
    assert.ok(p.prob > 0 && p.prob <= 1);
    assert.ok(p.top_probs.length <= 5);            // top-k kept five
    const sum = p.top_probs.reduce((a, x) => a + x.prob, 0);
    assert.ok(Math.abs(sum - 1) < 1e-4, String(sum));
  }
  const f = await post(s.url + '/completion', { prompt: 'Once', response_fields: ['content', 'generation_settings/n_predict',
    'prompt'] });
  assert.deepEqual(Object.keys(f.json).sort(), ['content', 'generation_settings/n_predict', 'prompt']);
  assert.equal(f.json['generation_settings/n_predict'], 6);
  assert.equal(f.json.prompt, '<s> Once');
  const v = await post(s.url + '/v1/chat/completions', { messages: [{ role: 'user', content: 'Book' }], verbose: true,
    max_tokens: 2 });
  assert.match(v.json.__verbose.prompt, /Book/);
  const slots = await get(s.url + '/slots');
  for (const slot of slots.json) assert.equal(slot.next_token[0].n_remain, -1);
  const ran = slots.json.filter((x) => x.params);
  assert.ok(ran.length >= 1);                       // the last task's parameters, as llama-server shows
  assert.ok(ran.every((x) => typeof x.params.temperature === 'number' && 'n_predict' in x.params));
  const m = await fetch(s.url + '/metrics');
  assert.match(m.headers.get('process-start-time-unix'), /^\d+$/);
  assert.match(await m.text(), /llamacpp:n_tokens_max \d+/);
});

test('return_progress and timings_per_token while streaming', { skip }, async () => {
  const res = await fetch(s.url + '/completion', { method: 'POST', body: JSON.stringify({
    prompt: 'the quick brown fox jumps over the lazy dog '.repeat(6), n_predict: 3, stream: true,
    return_progress: true, timings_per_token: true }) });
  const progress = [];
  let tokens = 0;
  await readSSE(res, (d) => {
    const j = JSON.parse(d);
    if (j.prompt_progress) progress.push(j.prompt_progress);
    else if (!j.stop) {
      tokens++;
      assert.ok(j.timings.predicted_n >= 1);
    }
  });
  assert.ok(progress.length > 2, JSON.stringify(progress));   // -b 32: several steps
  assert.equal(progress[0].processed, progress[0].cache);
  for (let i = 1; i < progress.length; i++) assert.ok(progress[i].processed > progress[i - 1].processed);
  assert.equal(progress.at(-1).processed, progress.at(-1).total);
  assert.equal(tokens, 3);
});
