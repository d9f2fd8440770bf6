// hybrid.test.mjs - a Qwen3.5 hybrid (qwen35: recurrent states beside the
// KV cells, docs/hybrid.md) through the real server: a retry and a next
// turn reuse the prompt from the checkpoints; pools attach from their end
// and from the start of their last messages; a fork where the parent has
// no state is a 409 naming where it can be continued; a slot saved and
// restored continues as before; the bytes of the owners (slots, pools,
// parked histories) add up to the bytes in use, states included; /metrics
// reports the state slots; a session stops at its context's end even
// with --context-shift.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { SHARED, WORK, genModel, skipReason, startServer, post, get, words, chatml } from './lib.mjs';

const VOCAB = 'vocab/ggml-vocab-qwen35.gguf';
const skip = skipReason(VOCAB);
let srv, saveDir;

before(async () => {
  if (skip) return;
  const model = genModel('qwen35-e128-l4-q8_0.gguf', ['--arch', 'qwen35', '--vocab', path.join(SHARED, 'models', VOCAB),
    '--n-embd', '128', '--n-layer', '4', '--n-head', '4', '--n-head-kv', '2', '--head-dim', '64', '--n-ff', '256',
    '--ssm-groups', '2', '--ssm-heads', '4', '--ssm-state', '32', '--type', 'q8_0', '--seed', '5']);
  saveDir = path.join(WORK, 'hybrid-saves');
  rmSync(saveDir, { recursive: true, force: true });
  mkdirSync(saveDir, { recursive: true });
  srv = await startServer(model, ['-c', '4096', '-np', '2', '-t', '2', '--metrics', '--context-shift',
                                  '--slot-save-path', saveDir,
                                  '--chat-template-file', 'tests/jinja/qwen35/chat_template.jinja']);
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
  if (saveDir) rmSync(saveDir, { recursive: true, force: true });
});

async function complete(prompt, extra = {}) {
  const r = await post(srv.url + '/completion', { prompt, n_predict: 6, temperature: 0, cache_prompt: true, ...extra });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

async function accounting() {
  const [pools, slots] = [await get(srv.url + '/polykv/pools'), await get(srv.url + '/slots')];
  const own = pools.json.pools.reduce((s, p) => s + p.own_kv_bytes, 0);
  const sess = slots.json.reduce((s, x) => s + x.kv_owned_bytes, 0);
  return { sum: own + sess + pools.json.parked_kv_bytes, used: pools.json.kv_bytes_used };
}

test('hybrid: retries and next turns continue from the checkpoints', { skip }, async () => {
  const msgs = [{ role: 'system', content: 'You are an agent. ' + words(120, 3) },
                { role: 'user', content: 'Task: ' + words(40, 4) }];
  const first = await complete(chatml(msgs));
  const n = first.timings.prompt_n + first.timings.cache_n;
  const again = await complete(chatml(msgs));
  assert.equal(again.content, first.content, 'a retry gives the same greedy text');
  assert.equal(again.timings.cache_n, n - 1, 'a retry continues one token before the prompt\'s end');
  // the next turn sends the reply back and a new message
  const next = chatml([...msgs, { role: 'assistant', content: first.content }, { role: 'user', content: 'go on' }]);
  const r = await complete(next);
  assert.ok(r.timings.cache_n >= n - 1, `next turn reused ${r.timings.cache_n} of ${n}`);
  const acc = await accounting();
  assert.equal(acc.sum, acc.used);
});

test('hybrid: pools, and forks where the parent has no state', { skip }, async () => {
  const sys = { role: 'system', content: 'You are a sub-agent. ' + words(150, 5) };
  const ctx = { role: 'user', content: 'Shared task: ' + words(60, 6) };
  let r = await post(srv.url + '/polykv/pools', { prompt: chatml([sys, ctx]).replace(/<\|im_start\|>assistant\n$/, '') });
  assert.equal(r.status, 201, r.text);
  const pool = r.json;
  // a session on the whole pool, and one that shares only the system block
  const a = await complete(chatml([sys, ctx, { role: 'assistant', content: 'ok' }, { role: 'user', content: 'x' }]),
                           { pool_id: pool.pool_id });
  assert.ok(a.timings.cache_n >= pool.prefix_len, `attached ${a.timings.cache_n} of ${pool.prefix_len}`);
  const b = await complete(chatml([sys, { role: 'user', content: 'another task' }]), { pool_id: pool.pool_id });
  assert.ok(b.timings.cache_n > 100, `the system block reused (${b.timings.cache_n}) from the pool's checkpoint`);
  // a fork inside the pool: no state there
  const tok = (await post(srv.url + '/tokenize', { content: chatml([sys, ctx]), parse_special: true })).json.tokens;
  r = await post(srv.url + `/polykv/pools/${pool.pool_id}/fork`, { tokens: tok, branch_pos: 20 });
  assert.equal(r.status, 409, r.text);
  assert.match(r.json.error.message, new RegExp(`continued only at positions? ${pool.prefix_len}`));
  r = await post(srv.url + `/polykv/pools/${pool.pool_id}/fork`, { tokens: tok, branch_pos: pool.prefix_len });
  assert.equal(r.status, 201, r.text);
  const acc = await accounting();
  assert.equal(acc.sum, acc.used);
  const m = await fetch(srv.url + '/metrics').then((x) => x.text());
  const used = Number(m.match(/^polykv:recurrent_states_used (\d+)/m)[1]);
  const total = Number(m.match(/^polykv:recurrent_states_total (\d+)/m)[1]);
  assert.ok(used >= 3 && used <= total && total === 14, `states ${used} of ${total}`);
  assert.match(m, /^polykv:recurrent_state_bytes \d+/m);
});

test('hybrid: a slot saved and restored continues as before', { skip }, async () => {
  const prompt = chatml([{ role: 'user', content: 'Remember: ' + words(80, 8) }]);
  const first = await complete(prompt, { id_slot: 0 });
  let r = await post(srv.url + '/slots/0?action=save', { filename: 'h.bin' });
  assert.equal(r.status, 200, r.text);
  const cont = prompt + first.content + '<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n';
  const want = await complete(cont, { id_slot: 0 });
  await post(srv.url + '/slots/0?action=erase', {});
  await post(srv.url + '/slots/1?action=erase', {});
  r = await post(srv.url + '/slots/1?action=restore', { filename: 'h.bin' });
  assert.equal(r.status, 200, r.text);
  const got = await complete(cont, { id_slot: 1 });
  assert.equal(got.content, want.content);
  assert.ok(got.timings.cache_n >= r.json.n_restored - 1, `reused ${got.timings.cache_n} of ${r.json.n_restored}`);
});

test('hybrid: a session stops at its context\'s end, --context-shift or not', { skip }, async () => {
  const r = await post(srv.url + '/completion', { prompt: 'Once ' + words(40, 9), n_predict: 4000, temperature: 0,
                                                   ignore_eos: true });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.stop_type, 'limit');
  assert.equal(r.json.truncated, true);
  assert.ok(r.json.tokens_predicted + r.json.tokens_evaluated <= 2048);
});

test('hybrid: tool_choice forces a call in Qwen3.5\'s XML form, returned as tool_calls', { skip }, async () => {
  const tools = [
    { type: 'function', function: { name: 'set_level', parameters: { type: 'object',
      properties: { level: { type: 'integer' }, mode: { type: 'string', enum: ['fast', 'safe'] } },
      required: ['level', 'mode'] } } },
    { type: 'function', function: { name: 'now', parameters: { type: 'object', properties: {} } } },
  ];
  for (const [choice, name] of [['required', null], [{ type: 'function', function: { name: 'set_level' } }, 'set_level']]) {
    const r = await post(srv.url + '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Set the level.' }], tools, tool_choice: choice, max_tokens: 400,
      temperature: 0, chat_template_kwargs: { enable_thinking: false } });
    assert.equal(r.status, 200, r.text);
    const ch = r.json.choices[0];
    assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(ch));
    assert.equal(ch.message.tool_calls.length, 1);
    const call = ch.message.tool_calls[0].function;
    if (name) assert.equal(call.name, name);
    assert.ok(['set_level', 'now'].includes(call.name));
    if (call.name === 'set_level') {
      const args = JSON.parse(call.arguments);
      assert.ok(Number.isInteger(args.level), call.arguments);
      assert.ok(['fast', 'safe'].includes(args.mode), call.arguments);
    }
  }
});
