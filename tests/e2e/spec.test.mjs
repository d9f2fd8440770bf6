// spec.test.mjs - speculative decoding through the server (docs/speculative.md)
// on stories260K: --spec-type ngram-cache gives the text of a request that
// turns it off (speculative.type "none"), in fewer steps; timings carry
// llama-server's draft_n / draft_n_accepted; /metrics counts drafts and
// accepted tokens; /slots and /polykv/tps show each session's counts; the
// types polykv has not built and drafts that cannot guess are refused at
// start-up; a draft model (-md: the model itself, so every guess is right)
// and a Qwen3.5 file's MTP block (one built to agree with its trunk) give
// the same text; a Qwen3.5 hybrid speculates too (its state goes back where
// a guess was not kept).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { BIN, SHARED, genModel, skipReason, sharedModel, startServer, post, get } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const skip = skipReason(STORIES);
let srv;

before(async () => {
  if (skip) return;
  srv = await startServer(sharedModel(STORIES), ['-c', '2048', '-np', '2', '-t', '1', '--metrics',
                                                 '--spec-type', 'ngram-cache']);
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
});

const complete = (prompt, extra = {}) =>
  post(srv.url + '/completion', { prompt, n_predict: 160, temperature: 0, cache_prompt: false, ...extra });

test('the text with speculation is the text without it; timings and counters show the guesses', { skip }, async () => {
  const prompts = ['Once upon a time', 'The little dog', 'Lily and Tom went to the park'];
  let drafted = 0, accepted = 0;
  for (const p of prompts) {
    const off = await complete(p, { 'speculative.type': 'none' });
    const on = await complete(p);
    assert.equal(off.status, 200, off.text);
    assert.equal(on.status, 200, on.text);
    assert.equal(on.json.content, off.json.content);
    assert.equal(off.json.timings.draft_n, undefined);          // llama-server omits them without drafts
    assert.ok(on.json.timings.draft_n >= on.json.timings.draft_n_accepted, JSON.stringify(on.json.timings));
    drafted += on.json.timings.draft_n;
    accepted += on.json.timings.draft_n_accepted;
  }
  // the second run of a prompt finds the first one's tokens in the server's store
  assert.ok(accepted > 100 && drafted > accepted, `${accepted} of ${drafted}`);
  const m = await get(srv.url + '/metrics');
  const num = (name) => Number(m.text.match(new RegExp(`^llamacpp:${name} (\\S+)$`, 'm'))[1]);
  assert.equal(num('spec_decode_num_draft_tokens_total'), drafted);
  assert.equal(num('spec_decode_num_accepted_tokens_total'), accepted);
  assert.ok(num('spec_decode_num_drafts_total') > 0);
  const slots = await get(srv.url + '/slots');
  for (const s of slots.json) assert.equal(s.speculative, true);   // llama-server's flag: the server speculates
  const used = slots.json.filter((s) => s.speculation.drafted > 0);
  assert.ok(used.length > 0, JSON.stringify(slots.json.map((s) => s.speculation)));
  for (const s of used) {
    assert.ok(s.speculation.acceptance_rate > 0 && s.speculation.acceptance_rate <= 1);
    assert.ok(s.speculation.mean_accepted > 0);
  }
});

test('speculative.n_max 0 and a bad speculative.type', { skip }, async () => {
  const r = await complete('Once upon a time', { 'speculative.n_max': 0 });
  assert.equal(r.status, 200);
  assert.equal(r.json.timings.draft_n, undefined);
  const bad = await complete('Once upon a time', { 'speculative.type': 'draft-eagle3' });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /speculative\.type/);
});

test('types not built and drafts that cannot guess are refused at start-up with the reason', { skip }, () => {
  const other = genModel('qwen3-e64-l1-qwen35vocab.gguf', ['--arch', 'qwen3', '--vocab',
    path.join(SHARED, 'models', 'vocab/ggml-vocab-qwen35.gguf'), '--n-embd', '64', '--n-layer', '1', '--n-head', '4',
    '--n-head-kv', '2', '--n-ff', '128', '--type', 'q8_0', '--seed', '5']);
  for (const [args, want] of [[['--spec-type', 'draft-eagle3'], /not built/],
                              [['--spec-type', 'draft-mtp'], /no MTP block/],
                              [['--spec-type', 'draft-simple'], /needs a draft model/],
                              [['-md', other], /-md .*(vocabulary|tokens|tokenizer|special)/],
                              [['-md', 'no-such-draft.gguf'], /no-such-draft\.gguf/],
                              [['--spec-type', 'ngram-cache', '--spec-draft-n-max', '99'], /n-max/]]) {
    const r = spawnSync(BIN, ['serve', '-m', sharedModel(STORIES), '--port', '0', '-t', '1', ...args],
      { encoding: 'utf8', timeout: 30000 });
    assert.notEqual(r.status, 0, args.join(' '));
    assert.match(r.stderr, want);
  }
});

test('a draft model: stories260K as its own draft guesses right, the text is the text without it', { skip }, async () => {
  const d = await startServer(sharedModel(STORIES), ['-c', '2048', '-np', '2', '-t', '1', '--metrics',
                                                     '-md', sharedModel(STORIES), '--spec-draft-n-max', '4']);
  try {
    for (const p of ['Once upon a time', 'The little dog']) {
      const ask = (extra) => post(d.url + '/completion', { prompt: p, n_predict: 120, temperature: 0,
                                                           cache_prompt: false, ...extra });
      const off = await ask({ 'speculative.type': 'none' });
      const on = await ask({});
      assert.equal(on.status, 200, on.text);
      assert.equal(on.json.content, off.json.content);
      assert.ok(on.json.timings.draft_n > 60, JSON.stringify(on.json.timings));
      assert.equal(on.json.timings.draft_n_accepted, on.json.timings.draft_n);
    }
    const m = await get(d.url + '/metrics');
    const num = (name) => Number(m.text.match(new RegExp(`^${name} (\\S+)$`, 'm'))[1]);
    assert.ok(num('polykv:spec_draft_model_seconds_total') > 0);
    assert.ok(num('polykv:spec_draft_model_cells') > 0);
    assert.equal(num('llamacpp:spec_decode_num_accepted_tokens_total'), num('llamacpp:spec_decode_num_draft_tokens_total'));
  } finally {
    assert.equal(await d.stop(), 0);
  }
});

test('the MTP block of a Qwen3.5 file drafts: every guess of a block that agrees is kept, the text is the text without it', { skip }, async () => {
  const agree = genModel('qwen35-e128-l4-pass0-mtp-q8_0.gguf', ['--arch', 'qwen35', '--vocab',
    path.join(SHARED, 'models', 'vocab/ggml-vocab-qwen35.gguf'), '--n-embd', '128', '--n-layer', '4', '--n-head', '4',
    '--n-head-kv', '2', '--head-dim', '64', '--n-ff', '256', '--ssm-groups', '2', '--ssm-heads', '4', '--ssm-state', '32',
    '--type', 'q8_0', '--seed', '5', '--pass-through-from', '0', '--mtp-agree']);
  const h = await startServer(agree, ['-c', '2048', '-np', '2', '-t', '1', '--spec-type', 'draft-mtp', '--metrics']);
  try {
    const ask = (extra) => post(h.url + '/completion', { prompt: 'The tools are listed below', n_predict: 64,
                                                          temperature: 0, cache_prompt: false, ...extra });
    const off = await ask({ 'speculative.type': 'none' });
    const on = await ask({});
    assert.equal(on.status, 200, on.text);
    assert.equal(on.json.content, off.json.content);
    assert.ok(on.json.timings.draft_n > 30, JSON.stringify(on.json.timings));
    assert.equal(on.json.timings.draft_n_accepted, on.json.timings.draft_n);
  } finally {
    assert.equal(await h.stop(), 0);
  }
});

test('a hybrid: the text with speculation is the text without it, a retry guessed from the store', { skip }, async () => {
  const hybrid = genModel('qwen35-e128-l4-q8_0.gguf', ['--arch', 'qwen35', '--vocab',
    path.join(SHARED, 'models', 'vocab/ggml-vocab-qwen35.gguf'), '--n-embd', '128', '--n-layer', '4', '--n-head', '4',
    '--n-head-kv', '2', '--head-dim', '64', '--n-ff', '256', '--ssm-groups', '2', '--ssm-heads', '4', '--ssm-state', '32',
    '--type', 'q8_0', '--seed', '5']);
  const h = await startServer(hybrid, ['-c', '2048', '-np', '2', '-t', '1', '--spec-type', 'ngram-cache']);
  try {
    const ask = (extra) => post(h.url + '/completion', { prompt: 'The tools are listed below', n_predict: 48,
                                                          temperature: 0, cache_prompt: false, ...extra });
    const off = await ask({ 'speculative.type': 'none' });
    const on = await ask({});
    assert.equal(off.status, 200, off.text);
    assert.equal(on.json.content, off.json.content);
    assert.ok(on.json.timings.draft_n_accepted > 20, JSON.stringify(on.json.timings));
  } finally {
    assert.equal(await h.stop(), 0);
  }
});
