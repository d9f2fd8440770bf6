// http_edge.test.mjs - what a careless or hostile client does at the HTTP
// level and what it must get (docs/security.md): a half-close is not a
// disconnect, a stream queued past --timeout stays open, bodies the HTTP
// library cannot bound are answered at once, HEAD has no body, a prompt
// far past the context is refused before it is tokenized.  Raw sockets,
// since fetch would hide the framing.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { sharedModel, skipReason, startServer, post, sleep } from './lib.mjs';

const MODEL = 'stories260K.gguf';
const skip = skipReason(MODEL);
let srv, port;
before(async () => {
  if (skip) return;
  srv = await startServer(sharedModel(MODEL), ['-c', '1024', '-np', '2', '-t', '1', '--max-body', '65536',
                                               '--header-timeout', '1']);
  port = Number(new URL(srv.url).port);
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
});

/* Sends `data` on a new connection (then half-closes when asked) and
 * collects what comes back until the server closes or `ms` pass. */
function raw(p, data, { halfClose = false, ms = 5000 } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(p, '127.0.0.1');
    const chunks = [];
    const t0 = performance.now();
    const done = (why) => {
      clearTimeout(timer);
      s.destroy();
      resolve({ text: Buffer.concat(chunks).toString('latin1'), why, ms: performance.now() - t0 });
    };
    const timer = setTimeout(() => done('timeout'), ms);
    s.on('connect', () => { s.write(data); if (halfClose) s.end(); });
    s.on('data', (d) => chunks.push(d));
    s.on('end', () => done('closed'));
    s.on('error', () => done('error'));
  });
}

const heads = (text) => text.match(/HTTP\/1\.[01] \d{3}/g) || [];
const request = (method, path, body, extra = '') =>
  `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}` +
  (body === undefined ? '\r\n' : `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);

test('a client that half-closes after its request still gets the response', { skip }, async () => {
  for (const stream of [false, true]) {
    const body = JSON.stringify({ prompt: 'Once upon', n_predict: 8, stream });
    const r = await raw(port, request('POST', '/completion', body, 'Connection: close\r\n'), { halfClose: true });
    const finals = heads(r.text).filter((h) => !h.endsWith('100'));
    assert.deepEqual(finals, ['HTTP/1.1 200'], `stream ${stream}: ${r.text.slice(0, 300)}`);
    assert.match(r.text, stream ? /"stop":true/ : /"content":/, `stream ${stream}: ${r.text.slice(-300)}`);
  }
});

/* One slot with 65536 cells, so the task cannot end by itself within the
 * wait: only noticing the close stops it.  The slot keeps its last task's
 * n_decoded once idle, so the tokens decoded after the close are read
 * directly and bounded by what the measured rate allows for two 100 ms
 * polls of the connection, with room for a loaded machine. */
test('a full close is still noticed: decoding stops soon after and the slot frees', { skip, timeout: 60000 },
  async () => {
    const one = await startServer(sharedModel(MODEL), ['-c', '65536', '-np', '1', '-t', '1']);
    try {
      const slot = async () => (await (await fetch(one.url + '/slots')).json())[0];
      const body = JSON.stringify({ prompt: 'Once', n_predict: -1, ignore_eos: true });
      const s = net.connect(Number(new URL(one.url).port), '127.0.0.1');
      s.on('error', () => {});
      await new Promise((res) => s.on('connect', res));
      s.write(request('POST', '/completion', body));
      let a;
      for (let i = 0; !((a = await slot()).n_decoded >= 16); i++) {
        assert.ok(i < 500, 'the request did not start decoding');
        await sleep(10);
      }
      const t0 = performance.now();
      await sleep(500);
      const b = await slot();
      s.destroy();
      const perMs = (b.n_decoded - a.n_decoded) / (performance.now() - t0);
      assert.ok(b.is_processing && perMs > 0, `not decoding before the close: ${JSON.stringify(b)}`);
      assert.ok(b.n_ctx - b.n_past > perMs * 10000, `${b.n_ctx - b.n_past} cells left could run out in the wait`);
      let c;
      for (let i = 0; i < 100 && (c = await slot()).is_processing; i++) await sleep(50);
      assert.ok(!c.is_processing, 'the slot stayed busy after the client closed');
      const after = c.n_decoded - b.n_decoded;
      const bound = Math.max(32, Math.ceil(perMs * 1500));
      assert.ok(after >= 0 && after <= bound,
        `${after} tokens decoded after the close (at ${(perMs * 1000).toFixed(0)} tok/s, bound ${bound})`);
    } finally {
      assert.equal(await one.stop(), 0);
    }
  });

test('a stream queued longer than --timeout stays open with keep-alive comments', { skip, timeout: 60000 },
  async () => {
    const one = await startServer(sharedModel(MODEL), ['-c', '65536', '-np', '1', '-t', '1', '-to', '2']);
    try {
      const ac = new AbortController();
      const busy = fetch(one.url + '/completion', { method: 'POST', signal: ac.signal,
        body: JSON.stringify({ prompt: 'Once', n_predict: -1, ignore_eos: true }) }).catch(() => {});
      for (let i = 0; ; i++) {                      /* the only slot is taken */
        const slots = await (await fetch(one.url + '/slots')).json();
        if (slots[0].is_processing) break;
        assert.ok(i < 500, 'the first request did not start');
        await sleep(10);
      }
      const q = raw(Number(new URL(one.url).port), request('POST', '/completion',
        JSON.stringify({ prompt: 'Once upon a time', n_predict: 4, stream: true }), 'Connection: close\r\n'),
      { ms: 20000 });
      await sleep(5000);                            /* queued 2.5x the timeout */
      ac.abort();
      await busy;
      const r = await q;
      assert.equal(r.why, 'closed', r.text);
      assert.deepEqual(heads(r.text), ['HTTP/1.1 200'], r.text.slice(0, 300));
      assert.match(r.text, /: keep-alive/, 'no keep-alive comment while queued');
      assert.match(r.text, /"stop":true/, `the stream ended without its last event: ${r.text.slice(-400)}`);
    } finally {
      assert.equal(await one.stop(), 0);
    }
  });

test('HEAD on an SSE route has headers and no body', { skip }, async () => {
  const r = await raw(port, request('HEAD', '/polykv/tps?stream=1', undefined, 'Connection: close\r\n'));
  const [head, rest] = r.text.split('\r\n\r\n');
  assert.match(head, /^HTTP\/1\.1 200/);
  assert.match(head, /text\/event-stream/i);
  assert.equal(rest, '', `a body after HEAD: ${JSON.stringify(rest)}`);
});

test('Transfer-Encoding other than chunked is a 501 at once', { skip }, async () => {
  const body = '{"prompt": "Once"}';
  const r = await raw(port, `POST /completion HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n${body}`);
  assert.match(r.text, /^HTTP\/1\.1 501/, r.text);
  assert.ok(r.ms < 2000, `answered after ${r.ms} ms`);
});

test('a chunked body over --max-body gets its 413 before it ends', { skip }, async () => {
  const r = await new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '', sent = 0, stop = false;
    const chunk = '4000\r\n' + 'a'.repeat(0x4000) + '\r\n';
    const pump = () => {                             /* an endless body, as fast as the socket takes it */
      while (!stop && s.write(chunk)) sent += chunk.length;
    };
    const done = () => { if (stop) return; stop = true; clearTimeout(timer); s.destroy(); resolve({ got, sent }); };
    const timer = setTimeout(done, 8000);
    s.on('connect', () => {
      s.write('POST /completion HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n');
      pump();
    });
    s.on('drain', pump);
    s.on('data', (d) => { got += d; if (got.includes('}}')) done(); });
    s.on('error', done);
    s.on('close', done);
  });
  assert.match(r.got, /^HTTP\/1\.1 413/, `no 413 after ${r.sent} bytes: ${r.got.slice(0, 200)}`);
  assert.match(r.got, /over the limit of 65536 bytes/);
});

// A client busy elsewhere: it writes for 300 ms without reading.  The
// server must keep draining (a lingering close) until it can have read the
// 413; a drain bounded by bytes (16 MiB, a few ms on loopback) closed with
// input unread, and the reset discarded the 413 before the client read it.
test('a client that reads its 413 late still gets it', { skip }, async () => {
  const chunk = Buffer.from('4000\r\n' + 'a'.repeat(0x4000) + '\r\n');
  const got = await new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    s.on('connect', () => {
      s.write('POST /completion HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n');
      s.pause();
      const t0 = Date.now();
      const pump = () => {
        while (Date.now() - t0 < 300 && s.write(chunk));
        if (Date.now() - t0 < 300) setImmediate(pump);
        else s.resume();
      };
      pump();
    });
    s.on('data', (d) => { got += d; });
    s.on('error', () => resolve(got));
    s.on('close', () => resolve(got));
  });
  assert.match(got, /^HTTP\/1\.1 413/, `no 413: ${got.slice(0, 200)}`);
});

test('a chunk that never ends is cut at the header timeout, not --timeout', { skip }, async () => {
  const r = await raw(port, 'POST /completion HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n' +
                            '7fffffffffffffff\r\n{"prompt"', { ms: 10000 });
  assert.notEqual(r.why, 'timeout', 'the server waited for the rest of the chunk');
  assert.ok(r.ms < 5000, `closed after ${r.ms} ms (header timeout 1 s)`);
});

test('an invalid Content-Length is a 400 at once', { skip }, async () => {
  for (const cl of ['abc', '-1', '+5', '99999999999999999999999']) {
    const r = await raw(port, `POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: ${cl}\r\n\r\n{}`);
    assert.match(r.text, /^HTTP\/1\.1 (400|413)/, `${cl}: ${r.text.slice(0, 100)}`);
    assert.ok(r.ms < 2000, `${cl}: answered after ${r.ms} ms`);
    /* libmicrohttpd 0.9.75 (Debian 12) writes this error's header block
     * twice; 1.0.0 fixed it (docs/security.md).  Counted, not asserted. */
    if (heads(r.text).length > 1) console.log(`# http: Content-Length ${cl}: ${heads(r.text).length} header blocks`);
  }
});

test('a prompt far past the context is refused before tokenizing', { skip }, async () => {
  const big = 'Once upon a time there was a cat. '.repeat(60000);        /* 2 MB, past --max-body here */
  const s2 = await startServer(sharedModel(MODEL), ['-c', '1024', '-np', '1', '-t', '1', '--max-body', '16777216']);
  try {
    for (const [path, body] of [['/completion', { prompt: big, n_predict: 1 }],
                                ['/v1/completions', { prompt: [big], max_tokens: 1 }],
                                ['/v1/chat/completions', { messages: [{ role: 'user', content: big }], max_tokens: 1 }],
                                ['/polykv/pools', { prompt: big }],
                                ['/polykv/pools', { messages: [{ role: 'user', content: big }] }]]) {
      const r = await post(s2.url + path, body);
      assert.equal(r.status, 400, `${path}: ${r.text.slice(0, 200)}`);
      assert.equal(r.json.error.type, 'exceed_context_size_error');
      assert.match(r.json.error.message, /at least \d+ tokens/, 'the byte bound answered, not the tokenizer');
    }
    /* Just past a slot's worth of text the tokenizer still decides. */
    const r = await post(s2.url + '/completion', { prompt: 'Once upon a time '.repeat(300), n_predict: 1 });
    assert.equal(r.status, 400, r.text);
    assert.doesNotMatch(r.json.error.message, /at least/);
  } finally {
    assert.equal(await s2.stop(), 0);
  }
});

test('tool_choice that cannot be honoured is a 400, as OpenAI answers', { skip }, async () => {
  const messages = [{ role: 'user', content: 'weather?' }];
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];
  const cases = [
    [{ tool_choice: 'required' }, 'tool_choice'],
    [{ tools: [], tool_choice: 'required' }, 'tool_choice'],
    [{ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
    [{ tools, tool_choice: {} }, 'tool_choice'],
    [{ tool_choice: { type: 'function', function: { name: 'get_weather' } } }, 'tool_choice'],
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: 'x' } }] }, 'tools'],
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: [1] } }] }, 'tools'],
  ];
  for (const [extra, param] of cases) {
    const r = await post(srv.url + '/v1/chat/completions', { messages, max_tokens: 2, ...extra });
    assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
    assert.equal(r.json.error.param, param, JSON.stringify(extra));
  }
  const ok = await post(srv.url + '/v1/chat/completions', { messages, max_tokens: 2, tools, tool_choice: 'auto' });
  assert.equal(ok.status, 200, ok.text);
});
