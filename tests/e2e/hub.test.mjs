// hub.test.mjs - a model by name through the binary: `polykv pull -hf` and
// `polykv serve -hf` against a fake Hugging Face hub on loopback (its API,
// a resolve URL that redirects to a CDN on another port, Range answers),
// pointed at by MODEL_ENDPOINT, with the cache in LLAMA_CACHE.  The fake
// counts requests, so "the second start makes none" is checked, and keeps
// the Authorization headers each side saw.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { existsSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { BIN, WORK, sharedModel, skipReason, startServer, post, get } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const skip = skipReason(STORIES);
const REPO = 'tester/Stories-GGUF';
const COMMIT = 'a'.repeat(40);
const TOKEN = 'hf_' + 'x'.repeat(34);
const FLAGS = ['-t', '1', '-c', '256', '-np', '1'];
let hub, cdn, data, sha, hubUrl;
const seen = { hub: 0, cdn: 0, hubAuth: [], cdnAuth: [] };

const listen = (srv) => new Promise((r) => srv.listen(0, '127.0.0.1', () => r(srv.address().port)));

before(async () => {
  if (skip) return;
  data = readFileSync(sharedModel(STORIES));
  sha = createHash('sha256').update(data).digest('hex');
  cdn = createServer((req, res) => {
    seen.cdn++;
    seen.cdnAuth.push(req.headers.authorization || '');
    const m = /^bytes=(\d+)-$/.exec(req.headers.range || '');
    const from = m ? Number(m[1]) : 0;
    const head = { 'Accept-Ranges': 'bytes', ETag: `"${sha}"`, 'Content-Length': data.length - from };
    if (m) head['Content-Range'] = `bytes ${from}-${data.length - 1}/${data.length}`;
    res.writeHead(m ? 206 : 200, head);
    res.end(data.subarray(from));
  });
  const cdnPort = await listen(cdn);
  hub = createServer((req, res) => {
    seen.hub++;
    seen.hubAuth.push(req.headers.authorization || '');
    const json = (o) => { res.writeHead(200, { 'Content-Type': 'application/json' }); res.end(JSON.stringify(o)); };
    if (req.url === `/api/models/${REPO}/refs`)
      return json({ branches: [{ name: 'main', ref: 'refs/heads/main', targetCommit: COMMIT }], converts: [], tags: [] });
    if (req.url === `/api/models/${REPO}/tree/${COMMIT}?recursive=true`)
      return json([
        { type: 'file', oid: '1'.repeat(40), size: 20, path: 'README.md' },
        { type: 'file', oid: '2'.repeat(40), size: 134, path: 'stories-Q8_0.gguf',
          lfs: { oid: sha, size: data.length, pointerSize: 134 } },
      ]);
    if (req.url === `/${REPO}/resolve/${COMMIT}/stories-Q8_0.gguf`) {
      res.writeHead(302, { Location: `http://127.0.0.1:${cdnPort}/blob/${sha}?sig=1`, 'X-Linked-Etag': `"${sha}"`,
                           'X-Linked-Size': data.length, 'X-Repo-Commit': COMMIT, 'Content-Length': 0 });
      return res.end();
    }
    res.writeHead(404, { 'Content-Type': 'application/json' });
    res.end('{"error":"Repository not found"}');
  });
  hubUrl = `http://127.0.0.1:${await listen(hub)}`;
});

after(() => {
  hub?.close();
  cdn?.close();
});

// The environment of a run: the fake hub, a cache of its own.
const env = (cache, extra = {}) => ({ ...process.env, MODEL_ENDPOINT: hubUrl, LLAMA_CACHE: cache, HF_TOKEN: '',
                                      LLAMA_ARG_HF_REPO: '', ...extra });
const cacheDir = (name) => {
  const d = path.resolve(WORK, 'hub-cache-' + name);
  rmSync(d, { recursive: true, force: true });
  return d;
};
// The binary run to its end, without blocking this process (the fake hub
// answers from its event loop).
const run = (args, e) => new Promise((resolve) => {
  const p = spawn(BIN, args, { env: e, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '', stderr = '';
  p.stdout.on('data', (d) => { stdout += d; });
  p.stderr.on('data', (d) => { stderr += d; });
  p.on('close', (status) => resolve({ status, stdout, stderr }));
});
const pull = (args, e) => run(['pull', ...args], e);

test('pull downloads into the cache as llama.cpp lays it out; serve -hf then uses it with no request', { skip }, async () => {
  const cache = cacheDir('a');
  const before0 = seen.hub + seen.cdn;
  const r = await pull(['-hf', REPO + ':q8_0', '--hf-token', TOKEN], env(cache));
  assert.equal(r.status, 0, r.stderr);
  const file = r.stdout.trim();
  assert.equal(file, path.join(cache, 'models--tester--Stories-GGUF', 'snapshots', COMMIT, 'stories-Q8_0.gguf'));
  assert.equal(readlinkSync(file), `../../blobs/${sha}`);
  assert.ok(readFileSync(file).equals(data));
  assert.equal(readFileSync(path.join(cache, 'models--tester--Stories-GGUF', 'refs', 'main'), 'utf8'), COMMIT);
  assert.equal(seen.hub + seen.cdn - before0, 5);     // refs, tree, HEAD, GET redirected, the CDN's GET
  assert.deepEqual(seen.hubAuth.slice(-4), Array(4).fill('Bearer ' + TOKEN));
  assert.equal(seen.cdnAuth.at(-1), '', 'the token must not follow the redirect to the CDN');

  const before1 = seen.hub + seen.cdn;
  const s = await startServer(null, ['-hf', REPO + ':Q8_0', ...FLAGS], { env: env(cache) });
  try {
    assert.equal(seen.hub + seen.cdn, before1, 'a cached model is served without a request');
    assert.match(s.log(), /cached, no request made/);
    const m = await get(s.url + '/v1/models');
    assert.equal(m.status, 200);
    assert.equal(m.json.data[0].id, REPO + ':Q8_0');   // llama-server's name for an -hf model
    const c = await post(s.url + '/completion', { prompt: 'Once upon', n_predict: 4, temperature: 0 });
    assert.equal(c.status, 200, c.text);
  } finally {
    await s.stop();
  }
});

test('offline: the cache only; a clear error without the file, and no request', { skip }, async () => {
  const cache = cacheDir('b');
  const before0 = seen.hub + seen.cdn;
  const r = await run(['serve', '-hf', REPO, '--offline', '--port', '0', ...FLAGS], env(cache));
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /offline: tester\/Stories-GGUF is not in the cache/);
  const e = await pull(['-hf', REPO], env(cache, { LLAMA_ARG_OFFLINE: '1' }));
  assert.equal(e.status, 1);
  assert.match(e.stderr, /offline/);
  assert.equal(seen.hub + seen.cdn, before0);
  // LLAMA_ARG_HF_REPO and HF_TOKEN stand for -hf and --hf-token.
  const ok = await pull([], env(cache, { LLAMA_ARG_HF_REPO: REPO, HF_TOKEN: TOKEN }));
  assert.equal(ok.status, 0, ok.stderr);
  assert.ok(existsSync(ok.stdout.trim()));
  assert.equal(seen.hubAuth.at(-1), 'Bearer ' + TOKEN);
});

test('a repo the hub does not have, a quant it does not hold: errors that say so', { skip }, async () => {
  const cache = cacheDir('c');
  let r = await pull(['-hf', 'tester/Nothing-GGUF'], env(cache));
  assert.equal(r.status, 1);
  assert.match(r.stderr, /no such repository/);
  r = await pull(['-hf', REPO + ':Q5_K_S'], env(cache));
  assert.equal(r.status, 1);
  assert.match(r.stderr, /has no model GGUF for Q5_K_S; its GGUF files: stories-Q8_0\.gguf/);
  r = await run(['serve', '-hf', 'no-slash'], env(cache));
  assert.equal(r.status, 1);
  assert.match(r.stderr, /not USER\/REPO\[:QUANT\]/);
});
