// proxy.test.mjs - /cors-proxy (--ui-mcp-proxy) against a target server on
// loopback: off by default (403), the API key guards it, only the
// x-llama-server-proxy-header-* headers go out (renamed), the body goes
// out as sent, the answer comes back with its status, type and end-to-end
// headers (never Set-Cookie or the target's CORS headers), an event stream
// as it comes, and the bounds: http(s) only, no user:password, unreachable
// targets a 502.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { once } from 'node:events';
import { sharedModel, skipReason, startServer, get } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const skip = skipReason(STORIES);
const ARGS = ['-c', '256', '-np', '1', '-t', '1'];
let on, off, target, targetUrl, seen;
let releaseSecond;
const release = new Promise((r) => { releaseSecond = r; });

before(async () => {
  if (skip) return;
  target = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      seen = { method: req.method, url: req.url, headers: req.headers, body };
      if (req.url === '/sse') {
        res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
        res.write('event: endpoint\ndata: /messages\n\n');
        release.then(() => res.end('data: second\n\n'));
        return;
      }
      if (req.url === '/empty') {
        res.writeHead(204);
        return res.end();
      }
      res.writeHead(req.url === '/missing' ? 404 : 200, {
        'Content-Type': 'application/json', 'Mcp-Session-Id': 'abc', 'Set-Cookie': 'a=b',
        'Access-Control-Allow-Origin': 'http://target.example',
      });
      res.end(JSON.stringify({ got: body }));
    });
  });
  target.listen(0, '127.0.0.1');
  await once(target, 'listening');
  targetUrl = `http://127.0.0.1:${target.address().port}`;
  on = await startServer(sharedModel(STORIES), [...ARGS, '--ui-mcp-proxy', '--api-key', 'k']);
  off = await startServer(sharedModel(STORIES), ARGS);
});

after(async () => {
  await on?.stop();
  await off?.stop();
  target?.close();
});

const KEY = { Authorization: 'Bearer k' };
const proxied = (url) => `${on.url}/cors-proxy?url=${encodeURIComponent(url)}`;

test('off by default: 403 feature_disabled, and /props says so', { skip }, async () => {
  for (const method of ['GET', 'POST']) {
    const r = await fetch(`${off.url}/cors-proxy?url=${encodeURIComponent(targetUrl + '/x')}`, { method, body: method === 'POST' ? '{}' : undefined });
    assert.equal(r.status, 403);
    assert.equal((await r.json()).error.type, 'feature_disabled');
  }
  assert.equal((await get(off.url + '/props')).json.cors_proxy_enabled, false);
  assert.equal((await get(on.url + '/props', KEY)).json.cors_proxy_enabled, true);
});

test('the API key guards it; the caller\'s own credentials never leave', { skip }, async () => {
  seen = null;
  assert.equal((await fetch(proxied(targetUrl + '/x'))).status, 401);
  assert.equal(seen, null);
  const r = await fetch(proxied(targetUrl + '/capture?q=1'), { headers: {
    ...KEY, 'X-Api-Key': 'k', Cookie: 'session=secret', 'Proxy-Authorization': 'Basic secret',
    'x-llama-server-proxy-header-accept': 'application/json',
    'x-llama-server-proxy-header-authorization': 'Bearer explicit',
    'x-llama-server-proxy-header-host': 'evil.example',
  } });
  assert.equal(r.status, 200);
  assert.equal(seen.method, 'GET');
  assert.equal(seen.url, '/capture?q=1');
  assert.equal(seen.headers.accept, 'application/json');
  assert.equal(seen.headers.authorization, 'Bearer explicit');
  assert.equal(seen.headers.host, `127.0.0.1:${target.address().port}`);
  for (const h of ['x-api-key', 'cookie', 'proxy-authorization', 'user-agent', 'accept-encoding'])
    assert.equal(seen.headers[h], undefined, h);
});

test('POST: the body as sent, the answer with its status, type and end-to-end headers', { skip }, async () => {
  const body = '{"jsonrpc":"2.0","id":1,"method":"initialize"}';
  const r = await fetch(proxied(targetUrl + '/mcp'), { method: 'POST', body, headers: {
    ...KEY, 'Content-Type': 'text/plain', 'x-llama-server-proxy-header-content-type': 'application/json',
    Origin: 'http://localhost:5173' } });
  assert.equal(r.status, 200);
  assert.equal(seen.body, body);
  assert.equal(seen.headers['content-type'], 'application/json');
  assert.equal(r.headers.get('content-type'), 'application/json');
  assert.equal(r.headers.get('mcp-session-id'), 'abc');
  assert.equal(r.headers.get('set-cookie'), null);
  // polykv's own CORS answer, not the target's.
  assert.equal(r.headers.get('access-control-allow-origin'), 'http://localhost:5173');
  assert.deepEqual(await r.json(), { got: body });
  // A body that is not JSON is forwarded too (the route does not parse it).
  await fetch(proxied(targetUrl + '/raw'), { method: 'POST', body: 'not json', headers: KEY });
  assert.equal(seen.body, 'not json');
  const empty = await fetch(proxied(targetUrl + '/empty'), { method: 'POST', body: '{}', headers: KEY });
  assert.equal(empty.status, 204);
  assert.equal(await empty.text(), '');
  assert.equal((await fetch(proxied(targetUrl + '/missing'), { headers: KEY })).status, 404);
});

test('bounds: http(s) only, no credentials in the URL, unreachable is a 502', { skip }, async () => {
  for (const url of ['file:///etc/passwd', 'ftp://127.0.0.1/', 'gopher://127.0.0.1:70/', 'http://u:p@127.0.0.1/', 'nonsense']) {
    const r = await fetch(proxied(url), { headers: KEY });
    assert.equal(r.status, 400, url);
    assert.match((await r.json()).error.message, /http and https/);
  }
  assert.equal((await fetch(`${on.url}/cors-proxy`, { headers: KEY })).status, 400);
  const down = await fetch(proxied('http://127.0.0.1:1/'), { headers: KEY });
  assert.equal(down.status, 502);
  assert.match((await down.json()).error.message, /^proxy: /);
  assert.equal((await fetch(proxied(targetUrl + '/x'), { method: 'DELETE', headers: KEY })).status, 405);
});

test('an event stream is passed on as it comes, not when it ends', { skip }, async () => {
  // The target holds its second event (and its end) until the first came
  // through the proxy: a proxy that waits for the end never answers.
  const r = await fetch(proxied(targetUrl + '/sse'), { headers: KEY, signal: AbortSignal.timeout(5000) });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('content-type'), 'text/event-stream');
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  const first = await reader.read();
  assert.match(dec.decode(first.value), /event: endpoint\ndata: \/messages/);
  releaseSecond();
  let rest = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    rest += dec.decode(value);
  }
  assert.equal(rest, 'data: second\n\n');
});
