// openai.test.mjs - the server through the official `openai` client:
// models, chat and text completions (whole and streamed, which must agree),
// usage with cached tokens, stream_options.include_usage, log-probs, seeds,
// a conversation with tools (accepted, rendered through the template,
// tool calls and results in the history) and errors as APIError.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { sharedModel, skipReason, startServer, post } from './lib.mjs';

const QWEN = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const STORIES = 'stories260K.gguf';
const skip = skipReason(QWEN, STORIES);

let qwen, stories, chat, text;

before(async () => {
  if (skip) return;
  qwen = await startServer(sharedModel(QWEN), ['-c', '4096', '-np', '2', '-t', '1', '--chat-template', 'chatml']);
  stories = await startServer(sharedModel(STORIES), ['-c', '2048', '-np', '2', '-t', '1']);
  chat = new OpenAI({ baseURL: qwen.url + '/v1', apiKey: 'unused', maxRetries: 0 });
  text = new OpenAI({ baseURL: stories.url + '/v1', apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  if (qwen) assert.equal(await qwen.stop(), 0);
  if (stories) assert.equal(await stories.stop(), 0);
});

const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Name three colours.' },
];

test('models.list names the model', { skip }, async () => {
  const list = await chat.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].id, QWEN);
  assert.equal(list.data[0].object, 'model');
});

test('chat completion: shape, usage, cached tokens on a repeat', { skip }, async () => {
  const req = { model: 'x', messages, max_tokens: 8, temperature: 0 };
  const a = await chat.chat.completions.create(req);
  assert.equal(a.object, 'chat.completion');
  assert.match(a.id, /^chatcmpl-/);
  assert.equal(a.model, 'x');
  assert.equal(a.choices.length, 1);
  assert.equal(a.choices[0].message.role, 'assistant');
  assert.equal(typeof a.choices[0].message.content, 'string');
  assert.ok(['length', 'stop'].includes(a.choices[0].finish_reason));
  assert.ok(a.usage.completion_tokens >= 1 && a.usage.completion_tokens <= 8);
  assert.ok(a.usage.prompt_tokens > 10);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + a.usage.completion_tokens);
  assert.equal(typeof a.usage.prompt_tokens_details.cached_tokens, 'number');

  const b = await chat.chat.completions.create(req);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 1,
    `cached ${b.usage.prompt_tokens_details.cached_tokens} of ${a.usage.prompt_tokens}`);
});

test('chat stream equals the whole answer; include_usage', { skip }, async () => {
  const req = { model: 'x', messages, max_tokens: 12, temperature: 0 };
  const whole = await chat.chat.completions.create(req);
  const stream = await chat.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let content = '', finish = null, usage = null, role = null, n = 0;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    n++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(n >= 3);
  assert.equal(role, 'assistant');
  assert.equal(content, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
});

test('chat logprobs: one entry per token, alternatives sorted, greedy picks the first', { skip }, async () => {
  const r = await chat.chat.completions.create({
    model: 'x', messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3,
  });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const e of lp) {
    assert.equal(typeof e.token, 'string');
    assert.ok(Array.isArray(e.bytes));
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    for (let i = 1; i < 3; i++) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6);
  }
  const s = await chat.chat.completions.create({
    model: 'x', messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2, stream: true,
  });
  let n = 0;
  for await (const chunk of s)
    for (const c of chunk.choices) if (c.logprobs) n += c.logprobs.content.length;
  assert.equal(n, lp.length);
});

test('seeded sampling repeats', { skip }, async () => {
  const req = { model: 'x', messages, max_tokens: 10, temperature: 1.0, seed: 1234 };
  const a = await chat.chat.completions.create(req);
  const b = await chat.chat.completions.create(req);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const c = await chat.chat.completions.create({ ...req, seed: 4321 });
  assert.notEqual(c.choices[0].message.content, a.choices[0].message.content);
});

test('text completion: whole, streamed, logprobs, stop', { skip }, async () => {
  const req = { model: 'stories', prompt: 'Once upon a time', max_tokens: 16, temperature: 0 };
  const a = await text.completions.create(req);
  assert.equal(a.object, 'text_completion');
  assert.match(a.choices[0].text, /^, there was/);
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 16);

  const s = await text.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let t = '', usage = null;
  for await (const chunk of s) {
    for (const c of chunk.choices) t += c.text;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(t, a.choices[0].text);
  assert.equal(usage.completion_tokens, 16);

  const l = await text.completions.create({ ...req, max_tokens: 5, logprobs: 2 });
  const lp = l.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.token_logprobs.length, 5);
  assert.equal(lp.top_logprobs.length, 5);
  assert.equal(lp.tokens.join(''), l.choices[0].text);
  assert.deepEqual(lp.text_offset.slice(0, 2), [0, lp.tokens[0].length]);

  const st = await text.completions.create({ ...req, max_tokens: 64, stop: [' little'] });
  assert.equal(st.choices[0].finish_reason, 'stop');
  assert.ok(!st.choices[0].text.includes(' little'));
});

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];

test('tools: accepted, rendered through the template, history with calls and results', { skip }, async () => {
  const req = {
    model: 'x', max_tokens: 8, temperature: 0, tools, tool_choice: 'auto',
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
  };
  const r = await chat.chat.completions.create(req);
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  const m = r.choices[0].message;
  assert.ok(typeof m.content === 'string' || (m.content === null && m.tool_calls.length > 0));

  // The prompt the model saw: Qwen's tool block with the definition.
  const t = await post(qwen.url + '/apply-template', req);
  assert.equal(t.status, 200);
  assert.ok(t.json.prompt.includes('<tools>\n{"type": "function", "function": {"name": "get_weather"'), t.json.prompt);
  assert.ok(t.json.prompt.endsWith('<|im_start|>assistant\n'));
  // The usage shows more prompt tokens than without tools.
  const plain = await chat.chat.completions.create({ ...req, tools: undefined, tool_choice: undefined });
  assert.ok(r.usage.prompt_tokens > plain.usage.prompt_tokens + 50);

  // A follow-up turn carrying the call and its result.
  const history = {
    ...req,
    messages: [
      ...req.messages,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21}' },
    ],
  };
  const h = await chat.chat.completions.create(history);
  assert.ok(h.usage.prompt_tokens > r.usage.prompt_tokens);
  const hp = await post(qwen.url + '/apply-template', history);
  assert.ok(hp.json.prompt.includes('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'));
  assert.ok(hp.json.prompt.includes('<|im_start|>user\n<tool_response>\n{"temp_c": 21}\n</tool_response><|im_end|>'));

  // Streamed with tools: a well-formed stream that ends with a finish reason.
  const s = await chat.chat.completions.create({ ...req, stream: true });
  let finish = null;
  for await (const chunk of s) for (const c of chunk.choices) if (c.finish_reason) finish = c.finish_reason;
  assert.ok(['stop', 'length', 'tool_calls'].includes(finish));
});

test('n > 1: several choices through the client', { skip }, async () => {
  const r = await chat.chat.completions.create({ model: 'x', messages, n: 2, max_tokens: 3 });
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  assert.ok(r.system_fingerprint.startsWith('b'));
});

test('errors come back as APIError with status and field', { skip }, async () => {
  await assert.rejects(chat.chat.completions.create({ model: 'x', messages, n: 17 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.error?.param ?? e.param, 'n');
    return true;
  });
  await assert.rejects(chat.chat.completions.create({ model: 'x', messages: [{ role: 'wizard', content: 'hi' }] }),
    (e) => e.status === 400);
  await assert.rejects(chat.chat.completions.create({ model: 'x', messages, max_tokens: 'many' }),
    (e) => e.status === 400 && /max_tokens/.test(e.message));
});
