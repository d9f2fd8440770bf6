// gemma4_tools.test.mjs - Gemma 4's answers through the real server: a
// random-weight Gemma 4 model (gen-model --arch gemma4, Qwen3.5's
// vocabulary from ../shared) serves with Gemma 4's own chat template
// (tests/jinja/gemma4), and a GBNF grammar makes it write exactly a reply
// in Gemma 4's format.  Its thought channel comes back as
// reasoning_content and its calls as tool_calls, whole and streamed (the
// reasoning streamed as it comes, no marker's text sent as content, the
// calls in the last delta); the answer sent back with the tools' results
// renders the model's own text again; reasoning_format none, thinking off
// and a request without tools leave the markers alone.  A forced call
// (tool_choice required or named, whole and streamed) is written in Gemma
// 4's own syntax and comes back as a call whose arguments validate under
// its schema (ajv), through Anthropic's and the Responses API too.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { TINY_VOCAB, templateServer, skipReason, post, readSSE } from './lib.mjs';

const TEMPLATE = 'tests/jinja/gemma4/chat_template.jinja';
const skip = skipReason(TINY_VOCAB);
let srv;

before(async () => {
  if (!skip) srv = await templateServer(TEMPLATE);
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
});

const Q = '<|"|>';
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather.', parameters: { type: 'object',
    properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } } },
  { type: 'function', function: { name: 'search', description: 'Search.', parameters: { type: 'object',
    properties: { query: { type: 'string' }, filters: { type: 'object' } } } } },
];
const user = [{ role: 'user', content: 'Weather in Paris, and find the docs.' }];
const THOUGHT = 'Two things: the weather, then the docs.';
// What the model is made to write: the template's own layout of a turn
// with thinking and two calls (keys sorted, no content), so the turn sent
// back must render as these very bytes.
const CALLS = `<|tool_call>call:get_weather{city:${Q}Paris${Q},days:3}<tool_call|>` +
  `<|tool_call>call:search{filters:{lang:${Q}C, "C++"${Q},stars:{min:100}},query:${Q}pools {x}: a\nb ü${Q}}<tool_call|>`;
const REPLY = `<|channel>thought\n${THOUGHT}\n<channel|>${CALLS}`;
const WANT = [
  { name: 'get_weather', arguments: { city: 'Paris', days: 3 } },
  { name: 'search', arguments: { filters: { lang: 'C, "C++"', stars: { min: 100 } }, query: 'pools {x}: a\nb ü' } },
];

// A grammar whose only sentence is s.
const only = (s) => 'root ::= "' + s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n') + '"';

const chat = (extra) => post(srv.url + '/v1/chat/completions', { messages: user, tools, max_tokens: 400,
                                                                  temperature: 0, ...extra });

function checkCalls(calls) {
  assert.equal(calls.length, WANT.length, JSON.stringify(calls));
  calls.forEach((c, i) => {
    assert.equal(c.type, 'function');
    assert.match(c.id, /^call_/);
    assert.equal(c.function.name, WANT[i].name);
    assert.deepEqual(JSON.parse(c.function.arguments), WANT[i].arguments);
  });
}

test('gemma 4: thought channel and calls come back as reasoning_content and tool_calls', { skip }, async () => {
  const r = await chat({ grammar: only(REPLY) });
  assert.equal(r.status, 200, r.text);
  const ch = r.json.choices[0];
  assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(ch));
  assert.equal(ch.message.reasoning_content, THOUGHT);
  assert.equal(ch.message.content, null);
  checkCalls(ch.message.tool_calls);

  // Content before the calls stays content.
  const withText = await chat({ grammar: only(`<|channel>thought\n${THOUGHT}\n<channel|>Let me check.\n${CALLS}`) });
  assert.equal(withText.json.choices[0].message.content, 'Let me check.');
  checkCalls(withText.json.choices[0].message.tool_calls);
});

test('gemma 4: streamed, the reasoning comes as it is written and no marker leaks into content', { skip }, async () => {
  const res = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: user, tools, max_tokens: 400, temperature: 0, stream: true,
                           grammar: only(`<|channel>thought\n${THOUGHT}\n<channel|>Let me check.\n${CALLS}`) }),
  });
  assert.equal(res.status, 200);
  let reasoning = '', content = '', nReasoning = 0, calls = null, finish = null, done = false;
  await readSSE(res, (data) => {
    if (data === '[DONE]') { done = true; return; }
    const ch = JSON.parse(data).choices[0];
    if (!ch) return;
    const d = ch.delta;
    if (d.reasoning_content) { reasoning += d.reasoning_content; nReasoning++; }
    if (d.content) {
      assert.ok(!d.content.includes('<|') && !d.content.includes('|>'), `marker text in content: ${d.content}`);
      content += d.content;
    }
    if (d.tool_calls) calls = d.tool_calls;
    if (ch.finish_reason) finish = ch.finish_reason;
  });
  assert.ok(done);
  assert.equal(reasoning, THOUGHT);
  assert.ok(nReasoning > 1, 'the reasoning streamed in pieces');
  assert.equal(content, 'Let me check.');
  assert.equal(finish, 'tool_calls');
  calls.forEach((c, i) => assert.equal(c.index, i));
  checkCalls(calls);
});

test('gemma 4: the answer sent back with the results renders the model\'s own text again', { skip }, async () => {
  const r = await chat({ grammar: only(REPLY) });
  const m = r.json.choices[0].message;
  const back = [...user, { role: 'assistant', content: m.content, reasoning_content: m.reasoning_content,
                           tool_calls: m.tool_calls },
                { role: 'tool', tool_call_id: m.tool_calls[0].id, content: '{"temp": 18}' },
                { role: 'tool', tool_call_id: m.tool_calls[1].id, content: 'pools.md' }];
  const p = await post(srv.url + '/apply-template', { messages: back, tools });
  assert.equal(p.status, 200, p.text);
  assert.ok(p.json.prompt.endsWith(`<|turn>model\n${REPLY}<|tool_response>response:get_weather{value:${Q}{"temp": 18}${Q}}` +
                                   `<tool_response|><|tool_response>response:search{value:${Q}pools.md${Q}}<tool_response|>`),
            p.json.prompt);
});

test('gemma 4: reasoning_format none, thinking off and no tools leave the markers as text', { skip }, async () => {
  let r = await chat({ grammar: only(REPLY), reasoning_format: 'none' });
  assert.equal(r.json.choices[0].message.reasoning_content, undefined);
  assert.equal(r.json.choices[0].message.tool_calls.length, 2);
  r = await chat({ grammar: only('<|channel>thought\nx\n<channel|>Hi.'), reasoning_format: 'none', tools: undefined });
  assert.equal(r.json.choices[0].message.content, '<|channel>thought\nx\n<channel|>Hi.');

  // Thinking off: the template closes an empty thought channel itself.
  const off = await post(srv.url + '/apply-template', { messages: user, chat_template_kwargs: { enable_thinking: false } });
  assert.ok(off.json.prompt.endsWith('<|turn>model\n<|channel>thought\n<channel|>'), off.json.prompt);
  r = await chat({ grammar: only('Sunny.'), tools: undefined, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(r.json.choices[0].message.content, 'Sunny.');
  assert.equal(r.json.choices[0].message.reasoning_content, undefined);

  // Without tools in the request a call's text is the model talking.
  r = await chat({ grammar: only(CALLS), tools: undefined });
  assert.equal(r.json.choices[0].finish_reason, 'stop');
  assert.equal(r.json.choices[0].message.content, CALLS);
  assert.equal(r.json.choices[0].message.tool_calls, undefined);
});

// Tools for forced calls whose every string, array and number is bounded,
// so a random-weight model always finishes its call within max_tokens.
const forcedTools = [
  { type: 'function', function: { name: 'set_level', parameters: { type: 'object', properties: {
    level: { type: 'integer', minimum: 0, maximum: 100 }, mode: { type: 'string', enum: ['fast', 'safe'] },
    note: { type: 'string', maxLength: 8 } }, required: ['level', 'mode'] } } },
  { type: 'function', function: { name: 'book', parameters: { type: 'object', properties: {
    Title: { type: 'string', maxLength: 10 },
    when: { type: 'object', properties: { date: { type: 'string', format: 'date' },
                                          hour: { type: 'integer', minimum: 0, maximum: 23 } }, required: ['date'] },
    guests: { type: 'array', maxItems: 2, items: { type: 'object', properties: {
      name: { type: 'string', maxLength: 6 }, age: { type: 'integer', minimum: 0, maximum: 120 } }, required: ['name'] } },
    price: { type: 'number' }, vip: { type: 'boolean' }, ratio: { type: ['number', 'null'] } },
    required: ['Title', 'when'] } } },
];
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
const schemaOf = (name) => forcedTools.find((t) => t.function.name === name)?.function.parameters;

function checkForced(name, args, only) {
  const schema = schemaOf(name);
  assert.ok(schema, `a call of ${name}`);
  if (only) assert.equal(name, only);
  assert.ok(ajv.validate(schema, args), `${name} ${JSON.stringify(args)}: ${ajv.errorsText()}`);
}

const choices = [['required', null], [{ type: 'function', function: { name: 'book' } }, 'book'],
                 [{ type: 'function', function: { name: 'set_level' } }, 'set_level']];

test('gemma 4: a forced call is written in Gemma 4\'s syntax and validates, whole and streamed', { skip }, async () => {
  for (const [choice, only] of choices) {
    for (const seed of [1, 2, 3]) {
      const req = { messages: user, tools: forcedTools, tool_choice: choice, max_tokens: 400, temperature: 1, seed,
                    logprobs: true };
      const r = await post(srv.url + '/v1/chat/completions', req);
      assert.equal(r.status, 200, r.text);
      const ch = r.json.choices[0];
      assert.equal(ch.finish_reason, 'tool_calls', JSON.stringify(ch));
      assert.equal(ch.message.content, null);
      assert.equal(ch.message.tool_calls.length, 1);
      const fn = ch.message.tool_calls[0].function;
      const args = JSON.parse(fn.arguments);
      checkForced(fn.name, args, only);
      // What the model wrote, token by token: the template's own call syntax.
      const raw = ch.logprobs.content.map((t) => t.token).join('');
      assert.ok(raw.startsWith(`<|tool_call>call:${fn.name}{`) && raw.endsWith('}<tool_call|>'), raw);

      // Streamed: the same call, in the last delta, with no content before it.
      const res = await fetch(srv.url + '/v1/chat/completions', { method: 'POST',
        headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...req, stream: true }) });
      assert.equal(res.status, 200);
      let calls = null, content = '', finish = null;
      await readSSE(res, (data) => {
        if (data === '[DONE]') return;
        const c = JSON.parse(data).choices[0];
        if (!c) return;
        if (c.delta.content) content += c.delta.content;
        if (c.delta.tool_calls) calls = c.delta.tool_calls;
        if (c.finish_reason) finish = c.finish_reason;
      });
      assert.equal(content, '');
      assert.equal(finish, 'tool_calls');
      assert.equal(calls.length, 1);
      assert.equal(calls[0].function.name, fn.name);
      assert.deepEqual(JSON.parse(calls[0].function.arguments), args);
    }
  }
});

test('gemma 4: forced calls through Anthropic\'s Messages and the Responses API come back valid', { skip }, async () => {
  const anthropicTools = forcedTools.map((t) => ({ name: t.function.name, input_schema: t.function.parameters }));
  for (const [tc, only] of [[{ type: 'any' }, null], [{ type: 'tool', name: 'set_level' }, 'set_level']]) {
    const a = await post(srv.url + '/v1/messages', { max_tokens: 400, tools: anthropicTools, tool_choice: tc,
                                                     messages: user });
    assert.equal(a.status, 200, a.text);
    assert.equal(a.json.stop_reason, 'tool_use');
    const use = a.json.content.find((b) => b.type === 'tool_use');
    assert.ok(use, JSON.stringify(a.json.content));
    checkForced(use.name, use.input, only);
  }
  const responsesTools = forcedTools.map((t) => ({ type: 'function', name: t.function.name,
                                                   parameters: t.function.parameters }));
  for (const [tc, only] of [['required', null], [{ type: 'function', name: 'book' }, 'book']]) {
    const r = await post(srv.url + '/v1/responses', { input: user[0].content, tools: responsesTools, tool_choice: tc,
                                                      max_output_tokens: 400 });
    assert.equal(r.status, 200, r.text);
    const call = r.json.output.find((o) => o.type === 'function_call');
    assert.ok(call, JSON.stringify(r.json.output));
    checkForced(call.name, JSON.parse(call.arguments), only);
  }
});
