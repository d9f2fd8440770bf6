// hostile_probe.test.mjs - what a hostile probe of the server found, each
// with the answer it must get now (docs/security.md's table names this
// file): bounded memory, refusals that say why, nothing else disturbed.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { sharedModel, skipReason, startServer, post } from './lib.mjs';

const MODEL = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const skip = skipReason(MODEL);
let srv;
before(async () => {
  if (skip) return;
  srv = await startServer(sharedModel(MODEL), ['-c', '512', '-np', '2', '-t', '1']);
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
});

/* The server's peak resident memory so far, in bytes. */
const peakBytes = (pid) => 1024 * Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmHWM:\s+(\d+)/)[1]);

/* About one token per two bytes with the qwen2 vocabulary: punctuation
 * that does not merge. */
function punctuation(bytes) {
  const chars = '!@#$%^&*()_+{}|:<>?~`-=[];,./';
  let s = '';
  for (let i = 0; s.length < bytes; i++) s += chars[(i * 7919) % chars.length] + ' ';
  return s.slice(0, bytes);
}

test('/tokenize: memory stays a small multiple of the body; past the bounds a 400', { skip }, async () => {
  const big = JSON.stringify({ content: punctuation(8_000_000), with_pieces: true });
  const p0 = peakBytes(srv.pid);
  const both = await Promise.all([0, 1].map(() => post(srv.url + '/tokenize', big)));
  for (const r of both) {
    assert.equal(r.status, 400, r.text.slice(0, 300));
    assert.equal(r.json.error.param, 'content');
    assert.match(r.json.error.message, /at most 1048576/);
  }
  const grew = peakBytes(srv.pid) - p0;
  /* Before: 2.2 GB for one such request, 3.1 GB for two. */
  assert.ok(grew < 2 * 16 * big.length, `peak grew ${grew} bytes for two bodies of ${big.length}`);

  /* Under the token bound, but an answer with pieces past 16 MiB. */
  const wide = await post(srv.url + '/tokenize', { content: punctuation(1_900_000), with_pieces: true });
  assert.equal(wide.status, 400, wide.text.slice(0, 300));
  assert.equal(wide.json.error.param, 'with_pieces');
  const plain = await post(srv.url + '/tokenize', { content: punctuation(1_900_000) });
  assert.equal(plain.status, 200);
  assert.ok(plain.json.tokens.length > 900_000 && plain.json.tokens.length <= 1048576, `${plain.json.tokens.length}`);

  /* Pieces as before: strings when valid UTF-8, byte arrays when a token splits a character. */
  const text = 'a "quoted"\\ line\n\ttab \u0001 é 🦙 ' + punctuation(2000);
  const r = await post(srv.url + '/tokenize', { content: text, with_pieces: true });
  const ids = await post(srv.url + '/tokenize', { content: text });
  assert.equal(r.status, 200);
  assert.deepEqual(r.json.tokens.map((t) => t.id), ids.json.tokens);
  const bytes = Buffer.concat(r.json.tokens.map((t) => Buffer.from(typeof t.piece === 'string' ? Buffer.from(t.piece)
                                                                                              : t.piece)));
  assert.equal(bytes.toString(), text);
  assert.ok(r.json.tokens.some((t) => Array.isArray(t.piece)), 'the llama splits into byte tokens');
});
