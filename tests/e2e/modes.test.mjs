// modes.test.mjs - the server modes llama-server scripts start polykv in:
// --sleep-idle-seconds (the process gives its weights' memory back when
// idle, read-only routes answer without waking it, the next generation
// wakes it with the same greedy tokens; /metrics' throughput gauges are
// per scrape, as llama-server's), --kv-unified (a slot runs past
// -c / -np; a request that cannot get cells is a 500 saying so), several
// --host addresses, and --backend-sampling (accepted, nothing changes).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { BIN, sharedModel, skipReason, startServer, post, get, rssKiB, sleep } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const BIG = 'rand-llama-llama3vocab-e256-l2-Q8_0.gguf';   // 44 MB of weights: a visible RSS step
const skip = skipReason(STORIES, BIG);
let sleepy, unified;

before(async () => {
  if (skip) return;
  sleepy = await startServer(sharedModel(BIG), ['-c', '1024', '-np', '2', '-t', '1', '--temp', '0', '--metrics',
    '--sleep-idle-seconds', '1']);
  unified = await startServer(sharedModel(STORIES), ['-c', '256', '-np', '4', '-t', '1', '--temp', '0',
    '--kv-unified', '--backend-sampling']);
});

after(async () => {
  await sleepy?.stop();
  await unified?.stop();
});

const sleeping = async (srv) => (await get(srv.url + '/props')).json.is_sleeping;

const rate = (m) => Number(m.text.match(/^llamacpp:predicted_tokens_seconds (\S+)$/m)[1]);

// Polls /props until the server says it sleeps; the deadline only catches a
// server that never does.  Returns the largest RSS read while it was still
// awake (each read before a /props that said awake): its weights, whether
// the copy into huge pages was done or still under way, are resident then.
async function waitSleeping(srv, ms = 60000) {
  let awake = 0;
  for (const t0 = Date.now(); Date.now() - t0 < ms; await sleep(100)) {
    const rss = rssKiB(srv.pid);
    if (await sleeping(srv)) return { awake };
    awake = Math.max(awake, rss);
  }
  return null;
}

test('--sleep-idle-seconds: memory back to the OS, read-only routes asleep, same tokens after', { skip }, async () => {
  const req = { prompt: 'The quick brown fox', n_predict: 8, return_tokens: true };
  const first = await post(sleepy.url + '/completion', req);
  assert.equal(first.status, 200);
  assert.equal(first.json.tokens.length, 8);
  const rss0 = rssKiB(sleepy.pid);                    // awake: the /props after it says so
  assert.equal(await sleeping(sleepy), false);
  // The throughput gauges are over the time since the last scrape, as llama-server's.
  assert.ok(rate(await get(sleepy.url + '/metrics')) > 0);
  assert.equal(rate(await get(sleepy.url + '/metrics')), 0);
  const went = await waitSleeping(sleepy);
  assert.ok(went, 'asleep after 1 s idle');
  const awake = Math.max(rss0, went.awake), asleep = rssKiB(sleepy.pid);
  const weightsKiB = statSync(sharedModel(BIG)).size / 1024;
  assert.ok(awake - asleep > weightsKiB / 2, `RSS ${awake} KiB awake, ${asleep} KiB asleep`);

  for (const path of ['/health', '/metrics', '/v1/models', '/models', '/props', '/slots']) {
    assert.equal((await get(sleepy.url + path)).status, 200, path);
  }
  assert.equal(rate(await get(sleepy.url + '/metrics')), 0, 'nothing ran asleep');
  const cache = (await get(sleepy.url + '/polykv/cache')).json;
  assert.equal(cache.kv_used, 0);
  assert.ok(cache.events.some((ev) => ev.kind === 'drop' && ev.reason === 'the server sleeps'), 'history dropped');
  const slots = (await get(sleepy.url + '/slots')).json;
  assert.ok(slots.every((sl) => sl.is_processing === false));
  assert.equal(await sleeping(sleepy), true, 'read-only routes do not wake it');

  const again = await post(sleepy.url + '/completion', req);
  assert.equal(again.status, 200);
  assert.deepEqual(again.json.tokens, first.json.tokens);
  assert.equal(again.json.timings.cache_n, 0, 'the cache went with the sleep');
  assert.equal(await sleeping(sleepy), false);

  // A route that uses the model (tokenizing) wakes it too, as in llama-server.
  assert.ok(await waitSleeping(sleepy));
  const tok = await post(sleepy.url + '/tokenize', { content: 'Hello' });
  assert.equal(tok.status, 200);
  assert.ok(tok.json.tokens.length > 0);
  assert.equal(await sleeping(sleepy), false);
});

test('--kv-unified: a slot takes the whole context; a request without cells is a 500 saying so', { skip }, async () => {
  const props = (await get(unified.url + '/props')).json;
  assert.equal(props.default_generation_settings.n_ctx, 256);   // not 256 / 4
  const one = await post(unified.url + '/completion', { prompt: 'Once upon a time', n_predict: 150, ignore_eos: true });
  assert.equal(one.status, 200);
  assert.equal(one.json.tokens_predicted, 150);
  // Four at once need more cells than there are: whoever ends early says why,
  // the others get every token.
  const all = await Promise.all([0, 1, 2, 3].map(() =>
    post(unified.url + '/completion', { prompt: 'Once upon a time', n_predict: 150, ignore_eos: true, cache_prompt: false })));
  for (const r of all) {
    if (r.status === 200) assert.equal(r.json.tokens_predicted, 150);
    else {
      assert.equal(r.status, 500);
      assert.match(r.json.error.message, /context size has been exceeded/);
    }
  }
  assert.ok(all.some((r) => r.status === 200));
  assert.ok(all.some((r) => r.status === 500), 'four contexts of 154 do not fit 256 cells');
});

test('--backend-sampling: accepted, the same probabilities with the field on or off', { skip }, async () => {
  const ask = (on) => post(unified.url + '/completion', { prompt: 'Once upon a time', n_predict: 6, n_probs: 5,
    post_sampling_probs: true, temperature: 0.8, seed: 4242, backend_sampling: on });
  const [a, b] = [await ask(true), await ask(false)];
  assert.equal(a.status, 200);
  assert.deepEqual(a.json.completion_probabilities, b.json.completion_probabilities);
});

const ipv6 = await new Promise((resolve) => {
  const s = createServer().once('error', () => resolve(false)).listen(0, '::1', () => s.close(() => resolve(true)));
});

test('--host with several addresses: each one answers, on one port', { skip: skip || (!ipv6 && 'no ::1') }, async () => {
  const srv = await startServer(sharedModel(STORIES), ['-c', '256', '-np', '1', '-t', '1', '--host', '127.0.0.1,::1']);
  try {
    const port = new URL(srv.url).port;
    for (const host of ['127.0.0.1', '[::1]']) {
      const base = `http://${host}:${port}`;
      assert.equal((await get(base + '/health')).status, 200, host);
      const r = await post(base + '/completion', { prompt: 'Once', n_predict: 3 });
      assert.equal(r.status, 200, host);
      assert.equal(r.json.tokens_predicted, 3);
    }
    assert.match(srv.log(), /listening on http:\/\/127\.0\.0\.1:\d+ http:\/\/\[::1\]:\d+/);
  } finally {
    await srv.stop();
  }
});

test('flags: --help lists the modes; a bad --sleep-idle-seconds or --host stops the start', { skip }, () => {
  const run = (args) => spawnSync(BIN, ['serve', ...args]);
  const h = run(['--help']);
  const help = h.stdout.toString() + h.stderr.toString();
  for (const f of ['--kv-unified', '--no-kv-unified', '--sleep-idle-seconds', '--backend-sampling', 'ADDR[,ADDR...]'])
    assert.ok(help.includes(f), f);
  const zero = run(['-m', sharedModel(STORIES), '--sleep-idle-seconds', '0']);
  assert.equal(zero.status, 2);
  assert.match(zero.stderr.toString(), /--sleep-idle-seconds must be -1 \(never\) or at least 1/);
  const hosts = Array.from({ length: 9 }, (_, i) => `127.0.0.${i + 1}`).join(',');
  const nine = run(['-m', sharedModel(STORIES), '--port', '0', '--host', hosts]);
  assert.equal(nine.status, 1);
  assert.match(nine.stderr.toString(), /at most 8 addresses/);
  const none = run(['-m', sharedModel(STORIES), '--port', '0', '--host', ' , ']);
  assert.equal(none.status, 1);
  assert.match(none.stderr.toString(), /no address given/);
});
