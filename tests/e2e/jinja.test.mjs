// jinja.test.mjs - the server's Jinja chat templates (src/server/srv_chat.c):
// --chat-template-file rendered by the Jinja engine with tools and
// chat_template_kwargs, a template's raise_exception as a 400 on
// /apply-template and /v1/chat/completions, a template that does not compile
// stopping the start, and --no-jinja going back to the built-in layouts.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { BIN, WORK, sharedModel, skipReason, startServer, post, get } from './lib.mjs';

const QWEN3 = 'rand-qwen3-qwen2vocab-e64-l2-Q8_0.gguf';
const skip = skipReason(QWEN3);

// A template in the style of Qwen3's: tools as JSON lines, a <think> block
// when enable_thinking is false, raise_exception on an unknown role.
const TEMPLATE = `{%- if tools %}<|im_start|>system
{%- for t in tools %}
{{ t | tojson }}
{%- endfor %}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('unknown role ' ~ m.role) }}{% endif %}
<|im_start|>{{ m.role }}
{{ m.content | trim }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif %}`;

let srv, plain, file;

before(async () => {
  if (skip) return;
  mkdirSync(WORK, { recursive: true });
  file = path.join(WORK, 'jinja-test.jinja');
  writeFileSync(file, TEMPLATE);
  srv = await startServer(sharedModel(QWEN3), ['-c', '1024', '-np', '1', '-t', '1', '--chat-template-file', file]);
  plain = await startServer(sharedModel(QWEN3), ['-c', '1024', '-np', '1', '-t', '1', '--no-jinja']);
});

after(async () => {
  for (const x of [srv, plain]) if (x) assert.equal(await x.stop(), 0);
});

const user = [{ role: 'user', content: ' hi ' }];
const tool = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } };

test('the template file renders with chat_template_kwargs and tools', { skip }, async () => {
  const on = await post(srv.url + '/apply-template', { messages: user });
  assert.equal(on.status, 200);
  assert.equal(on.json.prompt, '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n');
  const off = await post(srv.url + '/apply-template', { messages: user, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(off.json.prompt, '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
  const tools = await post(srv.url + '/apply-template', { messages: user, tools: [tool] });
  assert.ok(tools.json.prompt.startsWith('<|im_start|>system{"type": "function", "function": {"name": "get_weather", '
    + '"parameters": {"type": "object"}}}<|im_end|>\n'), tools.json.prompt);
  const none = await post(srv.url + '/apply-template', { messages: user, tools: [tool], tool_choice: 'none' });
  assert.equal(none.json.prompt, on.json.prompt);
  const props = await get(srv.url + '/props');
  assert.equal(props.json.chat_template, TEMPLATE);
});

test('a template error is a 400 with its message; bad kwargs are a 400', { skip }, async () => {
  const msgs = [{ role: 'wizard', content: 'x' }];
  const at = await post(srv.url + '/apply-template', { messages: msgs });
  assert.equal(at.status, 400);
  assert.match(at.json.error.message, /chat template: line \d+: unknown role wizard/);
  const chat = await post(srv.url + '/v1/chat/completions', { messages: msgs, max_tokens: 2 });
  assert.equal(chat.status, 400);
  assert.match(chat.json.error.message, /unknown role wizard/);
  const kw = await post(srv.url + '/apply-template', { messages: user, chat_template_kwargs: [1] });
  assert.equal(kw.status, 400);
  assert.equal(kw.json.error.param, 'chat_template_kwargs');
  // the server still answers
  const ok = await post(srv.url + '/v1/chat/completions', { messages: user, max_tokens: 2 });
  assert.equal(ok.status, 200);
});

test('a template file that does not compile stops the start with its line', { skip }, () => {
  const bad = path.join(WORK, 'jinja-broken.jinja');
  writeFileSync(bad, 'ok\n{% for m in messages %}\n{{ m.content }\n');
  const r = spawnSync(BIN, ['serve', '-m', sharedModel(QWEN3), '--port', '0', '-t', '1', '--chat-template-file', bad],
    { encoding: 'utf8', timeout: 60000 });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--chat-template-file .*jinja-broken\.jinja: line 3: /);
});

test('--no-jinja uses the built-in layouts (tools laid out by tmpl_tools)', { skip }, async () => {
  const t = await post(plain.url + '/apply-template', { messages: user, tools: [tool] });
  assert.equal(t.status, 200);
  assert.ok(t.json.prompt.includes('<tools>\n{"type": "function", "function": {"name": "get_weather"'), t.json.prompt);
});

test('--chat-template TEXT that names no layout is Jinja source (llama-server under --jinja); broken source stops the start', { skip }, async () => {
  const inline = await startServer(sharedModel(QWEN3), ['-c', '512', '-np', '1', '-t', '1', '--chat-template',
    '{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}{% if add_generation_prompt %}>{% endif %}']);
  try {
    const t = await post(inline.url + '/apply-template', { messages: user });
    assert.equal(t.status, 200, t.text);
    assert.equal(t.json.prompt, `[user] ${user[0].content}>`);
    // text with no tags at all is a template that renders itself
    const lit = await startServer(sharedModel(QWEN3), ['-c', '512', '-np', '1', '-t', '1', '--chat-template', 'Not a template']);
    try {
      assert.equal((await post(lit.url + '/apply-template', { messages: user })).json.prompt, 'Not a template');
    } finally { await lit.stop(); }
  } finally { await inline.stop(); }
  const r = spawnSync(BIN, ['serve', '-m', sharedModel(QWEN3), '--port', '0', '-t', '1', '--chat-template', '{{ x'],
    { encoding: 'utf8', timeout: 60000 });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--chat-template: line 1: /);
  const named = spawnSync(BIN, ['serve', '-m', sharedModel(QWEN3), '--port', '0', '-t', '1', '--no-jinja', '--chat-template', 'nosuch'],
    { encoding: 'utf8', timeout: 60000 });
  assert.notEqual(named.status, 0);
  assert.match(named.stderr, /unknown chat template 'nosuch'/);
});
