// anthropic.test.mjs - Anthropic's Messages API (src/server/srv_anthropic*.c)
// against the real server, as Anthropic's clients call it (x-api-key and
// anthropic-version headers): the message object and the same tokens as
// /v1/chat/completions for the same conversation; the SSE events (names,
// order, one start and stop per block index) adding up to the whole answer;
// stop_sequences; Claude Code's billing header dropped; thinking blocks and their signature; a forced tool_use, its
// streamed input_json_delta, and the tool_result sent back; count_tokens
// equal to the chat route's prompt_tokens; errors in Anthropic's shape.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { WORK, sharedModel, skipReason, startServer, post } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const QWEN3 = 'rand-qwen3-qwen2vocab-e64-l2-Q8_0.gguf';
const skip = skipReason(STORIES, QWEN3);
const KEY = 'anthropic-test-key';
const HDR = { 'x-api-key': KEY, 'anthropic-version': '2023-06-01' };

// Qwen3's shape: tools listed in the system turn, calls as <tool_call> JSON,
// the history's thinking in <think>, tool results as user turns, and the
// answer opened inside <think> unless enable_thinking is false.
const TEMPLATE = `{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}
{% endif %}# Tools
{%- for t in tools %}
{{ t | tojson }}
{%- endfor %}<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'user' %}<|im_start|>user
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' %}<|im_start|>assistant
{% if m.reasoning_content %}<think>
{{ m.reasoning_content }}
</think>
{% endif %}{{ m.content }}
{%- if m.tool_calls %}{% for c in m.tool_calls %}
<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments }}}
</tool_call>
{%- endfor %}{% endif %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is not defined or enable_thinking %}<think>
{% endif %}{% endif %}`;

let stories, qwen;

before(async () => {
  if (skip) return;
  mkdirSync(WORK, { recursive: true });
  const file = path.join(WORK, 'anthropic-test.jinja');
  writeFileSync(file, TEMPLATE);
  stories = await startServer(sharedModel(STORIES), ['-c', '2048', '-np', '2', '-t', '1', '--temp', '0',
    '--api-key', KEY]);
  qwen = await startServer(sharedModel(QWEN3), ['-c', '4096', '-np', '1', '-t', '1', '--temp', '0',
    '--chat-template-file', file]);
});

after(async () => {
  for (const x of [stories, qwen]) if (x) assert.equal(await x.stop(), 0);
});

const msgs = (s, body) => post(s.url + '/v1/messages', body, s === stories ? HDR : {});
const count = (s, body) => post(s.url + '/v1/messages/count_tokens', body, s === stories ? HDR : {});
const chat = (s, body) => post(s.url + '/v1/chat/completions', body, s === stories ? { authorization: 'Bearer ' + KEY } : {});

// A Messages stream as [{event, data}], checking every event line names
// the type its data says.
async function stream(s, body) {
  const r = await fetch(s.url + '/v1/messages', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(s === stories ? HDR : {}) },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const events = [];
  for (const block of (await r.text()).split('\n\n')) {
    const lines = block.split('\n').filter((l) => l && !l.startsWith(':'));
    if (!lines.length) continue;
    assert.equal(lines.length, 2, block);
    assert.ok(lines[0].startsWith('event: ') && lines[1].startsWith('data: '), block);
    const data = JSON.parse(lines[1].slice(6));
    assert.equal(lines[0].slice(7), data.type);
    events.push(data);
  }
  return events;
}

// The content blocks a stream describes, checking its grammar: message_start
// first, then per block one start, its deltas and one stop (indices 0, 1, ...
// in order), then message_delta and message_stop.
function blocksOf(events) {
  assert.equal(events[0].type, 'message_start');
  assert.deepEqual(events[0].message.content, []);
  assert.equal(events.at(-2).type, 'message_delta');
  assert.equal(events.at(-1).type, 'message_stop');
  const blocks = [];
  let open = null;
  for (const e of events.slice(1, -2)) {
    if (e.type === 'content_block_start') {
      assert.equal(open, null, 'a block starts while another is open');
      assert.equal(e.index, blocks.length);
      open = { ...e.content_block, signed: false };
      blocks.push(open);
    } else if (e.type === 'content_block_delta') {
      assert.equal(e.index, blocks.length - 1);
      const d = e.delta;
      if (d.type === 'text_delta') open.text += d.text;
      else if (d.type === 'thinking_delta') open.thinking += d.thinking;
      else if (d.type === 'signature_delta') open.signed = true;
      else if (d.type === 'input_json_delta') open.json = (open.json || '') + d.partial_json;
      else assert.fail('unknown delta ' + d.type);
    } else {
      assert.equal(e.type, 'content_block_stop');
      assert.equal(e.index, blocks.length - 1);
      open = null;
    }
  }
  assert.equal(open, null);
  return blocks;
}

const hello = [{ role: 'user', content: 'Once upon a time' }];

test('a message answers as the chat route does, in Anthropic\'s shape', { skip }, async () => {
  const a = await msgs(stories, { model: 'claude-test', max_tokens: 12, system: 'Tell a story.', messages: hello });
  assert.equal(a.status, 200, a.text);
  assert.match(a.json.id, /^msg_/);
  assert.equal(a.json.type, 'message');
  assert.equal(a.json.role, 'assistant');
  assert.equal(a.json.model, 'claude-test');
  assert.equal(a.json.content.length, 1);
  assert.equal(a.json.content[0].type, 'text');
  assert.equal(a.json.stop_reason, 'max_tokens');
  assert.equal(a.json.stop_sequence, null);
  assert.equal(a.json.timings, undefined);
  const o = await chat(stories, { max_tokens: 12, messages: [{ role: 'system', content: 'Tell a story.' }, ...hello] });
  assert.equal(o.status, 200);
  assert.equal(a.json.content[0].text, o.json.choices[0].message.content);   // greedy: the same tokens
  const u = a.json.usage;
  assert.equal(u.output_tokens, 12);
  assert.equal(u.input_tokens + u.cache_read_input_tokens, o.json.usage.prompt_tokens);
  assert.ok(u.input_tokens >= 1);
  // system as text blocks and content as blocks render the same prompt
  const blocks = await msgs(stories, { max_tokens: 12, system: [{ type: 'text', text: 'Tell a story.' }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Once upon a time' }] }] });
  assert.equal(blocks.json.content[0].text, a.json.content[0].text);
  assert.equal(blocks.json.model, 'stories260K.gguf');
});

test('Claude Code\'s billing header, a new hash each request, leaves the prompt: the prefix is reused', { skip }, async () => {
  const story = 'You tell short stories about a dog named Rex who lives by the sea.';
  const sys = (h) => [{ type: 'text', text: `x-anthropic-billing-header: cc_version=2.1.1.e51; cc_entrypoint=cli; cch=${h};` },
    { type: 'text', text: story }];
  const plain = await count(stories, { system: story, messages: hello });
  assert.equal((await count(stories, { system: sys('a5145'), messages: hello })).json.input_tokens, plain.json.input_tokens);
  const a = await msgs(stories, { max_tokens: 2, system: sys('a5145'), messages: hello });
  const b = await msgs(stories, { max_tokens: 2, system: sys('9f0e1'), messages: hello });
  assert.equal(a.json.usage.input_tokens + a.json.usage.cache_read_input_tokens, plain.json.input_tokens);
  assert.equal(b.json.usage.input_tokens + b.json.usage.cache_read_input_tokens, plain.json.input_tokens);
  assert.ok(b.json.usage.input_tokens <= 2, JSON.stringify(b.json.usage));
});

test('a stream\'s events add up to the whole answer', { skip }, async () => {
  const body = { max_tokens: 10, messages: [...hello, { role: 'assistant', content: 'there was' },
    { role: 'user', content: 'a cat' }] };
  const whole = await msgs(stories, body);
  const events = await stream(stories, body);
  const blocks = blocksOf(events);
  assert.equal(blocks.length, 1);
  assert.equal(blocks[0].type, 'text');
  assert.equal(blocks[0].text, whole.json.content[0].text);
  const start = events[0].message, end = events.at(-2);
  assert.match(start.id, /^msg_/);
  assert.equal(start.usage.output_tokens, 0);
  assert.equal(start.usage.input_tokens + start.usage.cache_read_input_tokens,
    whole.json.usage.input_tokens + whole.json.usage.cache_read_input_tokens);
  assert.deepEqual(end.delta, { stop_reason: 'max_tokens', stop_sequence: null });
  assert.equal(end.usage.output_tokens, 10);
});

test('stop_sequences end the answer with stop_reason stop_sequence', { skip }, async () => {
  const free = await msgs(stories, { max_tokens: 16, messages: hello });
  const text = free.json.content[0].text;
  const word = text.trim().split(/\s+/)[1];
  assert.ok(word, text);
  const stopped = await msgs(stories, { max_tokens: 16, messages: hello, stop_sequences: [word, 'zzqx'] });
  assert.equal(stopped.json.stop_reason, 'stop_sequence');
  assert.equal(stopped.json.stop_sequence, word);
  assert.equal(stopped.json.content[0].text, text.slice(0, text.indexOf(word)));
  const bad = await msgs(stories, { max_tokens: 4, messages: hello, stop_sequences: 'x' });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error.message, /stop_sequences/);
});

test('an answer inside <think> is a thinking block, signed, streamed at index 0', { skip }, async () => {
  const body = { max_tokens: 8, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: hello };
  const a = await msgs(qwen, body);
  assert.equal(a.status, 200, a.text);
  assert.equal(a.json.content[0].type, 'thinking');
  assert.ok(a.json.content[0].thinking.length > 0);
  assert.equal(a.json.content[0].signature, '');
  const blocks = blocksOf(await stream(qwen, body));
  assert.equal(blocks[0].type, 'thinking');
  assert.equal(blocks[0].thinking, a.json.content[0].thinking);
  assert.ok(blocks[0].signed, 'signature_delta before the thinking block stops');
  assert.deepEqual(blocks.map((b) => b.type), a.json.content.map((b) => b.type));
});

const weather = {
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { enum: ['Paris', 'Oslo'] } }, required: ['city'] },
};

test('a forced tool_use, streamed and whole, and its tool_result sent back', { skip }, async () => {
  const ask = [{ role: 'user', content: 'Weather in Paris?' }];
  const body = { max_tokens: 60, tools: [weather], tool_choice: { type: 'tool', name: 'get_weather' },
    thinking: { type: 'disabled' }, messages: ask };
  const a = await msgs(qwen, body);
  assert.equal(a.status, 200, a.text);
  assert.equal(a.json.stop_reason, 'tool_use');
  const use = a.json.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(a.json.content));
  assert.match(use.id, /^toolu_/);
  assert.equal(use.name, 'get_weather');
  assert.ok(['Paris', 'Oslo'].includes(use.input.city), JSON.stringify(use.input));

  const events = await stream(qwen, body);
  const blocks = blocksOf(events);
  const su = blocks.find((b) => b.type === 'tool_use');
  assert.equal(su.name, 'get_weather');
  assert.match(su.id, /^toolu_/);
  assert.deepEqual(su.input, {});
  assert.deepEqual(JSON.parse(su.json), use.input);
  assert.equal(events.at(-2).delta.stop_reason, 'tool_use');

  // The result goes back; the conversation renders as its OpenAI twin does.
  const convo = [...ask, { role: 'assistant', content: [{ type: 'text', text: 'Let me look.' }, use] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: 'Sunny' }] },
      { type: 'text', text: 'And tomorrow?' }] }];
  const back = await msgs(qwen, { max_tokens: 4, tools: [weather], messages: convo });
  assert.equal(back.status, 200, back.text);
  const twin = [...ask,
    { role: 'assistant', content: 'Let me look.', tool_calls: [{ id: use.id, type: 'function',
      function: { name: 'get_weather', arguments: JSON.stringify(use.input) } }] },
    { role: 'tool', tool_call_id: use.id, content: 'Sunny' }, { role: 'user', content: 'And tomorrow?' }];
  const tools = [{ type: 'function', function: { name: weather.name, description: weather.description,
    parameters: weather.input_schema } }];
  const o = await chat(qwen, { max_tokens: 1, tools, messages: twin });
  const n = await count(qwen, { tools: [weather], messages: convo });
  assert.equal(n.status, 200);
  assert.deepEqual(Object.keys(n.json), ['input_tokens']);
  assert.equal(n.json.input_tokens, o.json.usage.prompt_tokens);
  assert.equal(back.json.usage.input_tokens + back.json.usage.cache_read_input_tokens, n.json.input_tokens);
  // an is_error result is accepted; one naming no tool_use_id is not
  const err = structuredClone(convo);
  err[2].content[0].is_error = true;
  assert.equal((await count(qwen, { tools: [weather], messages: err })).status, 200);
  delete err[2].content[0].tool_use_id;
  assert.equal((await count(qwen, { tools: [weather], messages: err })).status, 400);
});

test('count_tokens: the chat route\'s prompt_tokens, thinking history included', { skip }, async () => {
  const convo = (thinking) => [{ role: 'user', content: 'Fix the bug' },
    { role: 'assistant', content: [...(thinking ? [{ type: 'thinking', thinking: 'Look at the files first.' }] : []),
      { type: 'text', text: 'Checking.' }] },
    { role: 'user', content: 'Go on' }];
  const without = await count(qwen, { system: 'You fix code.', messages: convo(false) });
  const withT = await count(qwen, { system: 'You fix code.', messages: convo(true) });
  assert.ok(withT.json.input_tokens > without.json.input_tokens, JSON.stringify([withT.json, without.json]));
  const o = await chat(qwen, { max_tokens: 1, messages: [{ role: 'system', content: 'You fix code.' },
    { role: 'user', content: 'Fix the bug' },
    { role: 'assistant', content: 'Checking.', reasoning_content: 'Look at the files first.' },
    { role: 'user', content: 'Go on' }] });
  assert.equal(withT.json.input_tokens, o.json.usage.prompt_tokens);
  // the OpenAI route's own count agrees (it renders with the same template)
  const oc = await post(qwen.url + '/v1/chat/completions/input_tokens', { messages: [{ role: 'system', content: 'You fix code.' },
    { role: 'user', content: 'Fix the bug' },
    { role: 'assistant', content: 'Checking.', reasoning_content: 'Look at the files first.' },
    { role: 'user', content: 'Go on' }] });
  assert.equal(oc.json.input_tokens, o.json.usage.prompt_tokens);
  // thinking disabled reaches the template: no <think> opened for the answer
  const off = await count(qwen, { messages: hello, thinking: { type: 'disabled' } });
  const on = await count(qwen, { messages: hello });
  assert.ok(off.json.input_tokens < on.json.input_tokens);
});

test('errors come in Anthropic\'s shape, and the server goes on', { skip }, async () => {
  const shape = (r, status, type) => {
    assert.equal(r.status, status, r.text);
    assert.equal(r.json.type, 'error');
    assert.equal(r.json.error.type, type);
    assert.equal(typeof r.json.error.message, 'string');
  };
  const noKey = await post(stories.url + '/v1/messages', { max_tokens: 2, messages: hello });
  shape(noKey, 401, 'authentication_error');
  shape(await msgs(stories, { max_tokens: 2 }), 400, 'invalid_request_error');
  shape(await msgs(stories, { messages: [{ role: 'system', content: 'x' }] }), 400, 'invalid_request_error');
  shape(await msgs(stories, { messages: [{ role: 'user', content: [{ type: 'tool_use', id: 'a', name: 'f' }] }] }),
    400, 'invalid_request_error');
  shape(await msgs(stories, { messages: hello, tool_choice: { type: 'tool' } }), 400, 'invalid_request_error');
  shape(await msgs(stories, { messages: hello, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }),
    400, 'invalid_request_error');
  shape(await msgs(stories, { messages: hello, max_tokens: 'many' }), 400, 'invalid_request_error');
  shape(await count(stories, { messages: 3 }), 400, 'invalid_request_error');
  const img = await msgs(stories, { messages: [{ role: 'user', content: [{ type: 'image',
    source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }, { type: 'text', text: 'What?' }] }] });
  shape(img, 500, 'api_error');
  assert.match(img.json.error.message, /image input is not supported/);
  const bad = await fetch(stories.url + '/v1/messages', { method: 'POST', headers: HDR, body: '{"messages": [' });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).type, 'error');
  // an empty conversation is one empty user turn
  const empty = await msgs(stories, { max_tokens: 2, messages: [] });
  assert.equal(empty.status, 200);
  assert.equal(empty.json.type, 'message');
  assert.equal((await msgs(stories, { max_tokens: 2, messages: hello })).status, 200);
});
