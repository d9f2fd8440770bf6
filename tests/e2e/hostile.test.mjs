// hostile.test.mjs - inputs a hostile or careless client sends, each with
// the answer it must get (docs/security.md): never a 500, never a broken
// stream, always a JSON error naming the field.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { sharedModel, skipReason, startServer, post, readSSE, sleep } from './lib.mjs';

const MODEL = 'stories260K.gguf';
const skip = skipReason(MODEL);
let srv;
before(async () => {
  if (skip) return;
  srv = await startServer(sharedModel(MODEL), ['-c', '1024', '-np', '2', '-t', '1']);
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
});

async function stream(path, body) {
  const r = await fetch(srv.url + path, { method: 'POST', headers: { 'content-type': 'application/json' },
                                          body: JSON.stringify({ ...body, stream: true }) });
  const events = [];
  if (r.status === 200) await readSSE(r, (d) => { events.push(d); });
  return { status: r.status, events };
}

test('a model name cut inside a UTF-8 character is echoed whole characters, on every route', { skip }, async () => {
  const model = 'é'.repeat(300);            /* 600 bytes: past the 255 kept */
  const routes = [['/completion', { prompt: 'Once', n_predict: 3 }],
                  ['/v1/completions', { prompt: 'Once', max_tokens: 3 }],
                  ['/v1/chat/completions', { messages: [{ role: 'user', content: 'Once' }], max_tokens: 3 }]];
  for (const [path, body] of routes) {
    const r = await post(srv.url + path, { ...body, model });
    assert.equal(r.status, 200, `${path}: ${r.text}`);
    assert.ok(r.json.model.length > 0 && model.startsWith(r.json.model), `${path}: ${r.json.model}`);
    const s = await stream(path, { ...body, model });
    assert.equal(s.status, 200, path);
    assert.ok(s.events.length >= 2, `${path}: a stream with events`);
    const last = s.events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e)).pop();
    assert.ok(!last.error, JSON.stringify(last));
  }
});

test('values the sampler or the engine would refuse later are 400s now', { skip }, async () => {
  for (const rp of [0, 1e-46]) {
    const r = await post(srv.url + '/completion', { prompt: 'Once', n_predict: 3, repeat_penalty: rp });
    assert.equal(r.status, 400, `repeat_penalty ${rp}: ${r.text}`);
    assert.equal(r.json.error.param, 'repeat_penalty');
    const s = await stream('/completion', { prompt: 'Once', n_predict: 3, repeat_penalty: rp });
    assert.equal(s.status, 400);
  }
  const long = 'a'.repeat(63) + 'é'.repeat(100);
  const r = await post(srv.url + '/completion', { prompt: 'Once', n_predict: 3, stop: [long] });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error.message, /longer than 255 bytes/);
  const ok = await post(srv.url + '/completion', { prompt: 'Once', n_predict: 3, stop: ['a'.repeat(63) + 'é' + 'b'] });
  assert.equal(ok.status, 200, ok.text);
  /* Pools: ids that do not exist, bad bodies. */
  assert.equal((await post(srv.url + '/completion', { prompt: 'Once', n_predict: 2, pool_id: 99 })).status, 404);
  assert.equal((await post(srv.url + '/completion', { prompt: 'Once', n_predict: 2, pool_id: -3 })).status, 400);
  assert.equal((await post(srv.url + '/completion', { prompt: 'Once', n_predict: 2, pool_id: 'x' })).status, 400);
  assert.equal((await post(srv.url + '/polykv/pools', { tokens: [1, 1e9] })).status, 400);
  assert.equal((await post(srv.url + '/polykv/pools', { tokens: 'abc' })).status, 400);
  assert.equal((await post(srv.url + '/polykv/pools/1/fork', { prompt: 'x', branch_pos: -1 })).status, 400);
  assert.equal((await post(srv.url + '/polykv/pools', '{"prompt": ')).status, 400);
  assert.equal((await post(srv.url + '/completion', { prompt: 'Once', session_id: 'x'.repeat(64) })).status, 400);
});

test('one rule for integers; /tokenize of empty text is empty either way', { skip }, async () => {
  const a = await post(srv.url + '/completion', { prompt: [1.0, 300.0], n_predict: 2.0, temperature: 0 });
  const b = await post(srv.url + '/completion', { prompt: [1, 300], n_predict: 2, temperature: 0 });
  assert.equal(a.status, 200, a.text);
  assert.equal(a.json.content, b.json.content);
  assert.equal((await post(srv.url + '/completion', { prompt: [1.5], n_predict: 2 })).status, 400);
  assert.equal((await post(srv.url + '/completion', { prompt: 'Once', n_predict: 2.5 })).status, 400);
  for (const content of ['', [''], ['', '']]) {
    const r = await post(srv.url + '/tokenize', { content });
    assert.equal(r.status, 200, JSON.stringify(content));
    assert.deepEqual(r.json.tokens, []);
  }
});

/* GET /health on a connection of its own: true on a 200 within 1 s. */
function rawHealth(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let buf = '';
    const done = (v) => { s.destroy(); clearTimeout(timer); resolve(v); };
    const timer = setTimeout(() => done(false), 1000);
    s.on('connect', () => s.write('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
    s.on('data', (d) => { buf += d; if (buf.includes('\r\n')) done(buf.startsWith('HTTP/1.1 200')); });
    s.on('error', () => done(false));
    s.on('close', () => done(false));
  });
}

/* 20 sockets against --max-connections 16: those past the limit are closed
 * at once (the limit is reached, and a new connection is refused while the
 * idle ones hold it), then the idle ones go after the header timeout (1 s)
 * and a new connection is answered. */
test('idle sockets that send nothing cannot lock clients out', { skip }, async () => {
  const small = await startServer(sharedModel(MODEL), ['-c', '256', '-np', '1', '-t', '1', '--max-connections', '16',
                                                       '--header-timeout', '1']);
  const port = Number(new URL(small.url).port);
  const socks = [];
  try {
    let n_closed = 0;
    const t0 = performance.now();
    for (let i = 0; i < 20; i++) {
      const s = net.connect(port, '127.0.0.1');
      s.on('error', () => {});
      s.on('close', () => { n_closed++; });
      socks.push(s);
    }
    while (n_closed < 4 && performance.now() - t0 < 700) await sleep(10);
    const early = n_closed;
    const refused = !(await rawHealth(port));
    const t_refused = performance.now() - t0;
    let ok = false;
    while (!ok && performance.now() - t0 < 3000) {
      ok = await rawHealth(port);                    /* a new connection (fetch would reuse a pooled one) */
      if (!ok) await sleep(100);
    }
    assert.ok(early >= 4, `${early} of 20 sockets closed before the header timeout: the limit of 16 was not reached`);
    assert.ok(refused, `a new connection was answered ${t_refused.toFixed(0)} ms in, with every connection held`);
    assert.match(small.log(), /reached connection limit/);
    assert.ok(ok, '/health answered while 16 idle sockets held every connection');
  } finally {
    for (const s of socks) s.destroy();
    assert.equal(await small.stop(), 0);
  }
});
