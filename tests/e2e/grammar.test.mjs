// grammar.test.mjs - structured output end to end: random JSON Schemas
// (nested objects, arrays, enums, anyOf, required subsets, formats, ranges)
// on a random-weight Qwen-vocabulary model and on stories260K at
// temperature 1 with every sampler in the mix; every answer must parse and
// validate under ajv (an independent validator, with ajv-formats).  Then
// GBNF on /completion, response_format and tool_choice through the openai
// package, the 400s for bad grammars and unsupported keywords, and
// LangChain.js's withStructuredOutput.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { sharedModel, skipReason, startServer, post } from './lib.mjs';

const QWEN = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const STORIES = 'stories260K.gguf';
const skip = skipReason(QWEN, STORIES);
const N_SCHEMAS = Number(process.env.POLYKV_GRAMMAR_N || 250);   // per model: 500 in all

let qwen, stories, chat;
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);

before(async () => {
  if (skip) return;
  qwen = await startServer(sharedModel(QWEN), ['-c', '8192', '-np', '2', '-t', '1', '--chat-template', 'chatml']);
  stories = await startServer(sharedModel(STORIES), ['-c', '4096', '-np', '2', '-t', '1']);
  chat = new OpenAI({ baseURL: qwen.url + '/v1', apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  if (qwen) assert.equal(await qwen.stop(), 0);
  if (stories) assert.equal(await stories.stop(), 0);
});

// A small seeded PRNG so a failure can be replayed (the seed is printed).
function rng(seed) {
  let s = seed >>> 0 || 1;
  return (n) => {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    return s % n;
  };
}

// Strings stay short (maxLength) so a random-weight model finishes them.
function randomSchema(r, depth = 0) {
  const leaf = [
    () => ({ type: 'string', maxLength: 1 + r(6) }),
    () => ({ type: 'string', minLength: 1, maxLength: 4 }),
    () => ({ type: 'integer', minimum: -r(50), maximum: r(2000) }),
    () => ({ type: 'integer', minimum: 0, maximum: 9 }),
    () => ({ type: 'boolean' }),
    () => ({ type: 'null' }),
    () => ({ enum: ['red', 'green', 'blue', 7, null].slice(0, 2 + r(4)) }),
    () => ({ const: 'fixed' }),
    () => ({ type: 'string', format: ['date', 'time', 'date-time', 'uuid'][r(4)] }),
    () => ({ type: 'string', pattern: '^[a-z]{2}-[0-9]{1,3}$' }),
    () => ({ type: ['string', 'null'], maxLength: 3 }),
  ];
  if (depth >= 3 || r(3) === 0) return leaf[r(leaf.length)]();
  const k = r(4);
  if (k === 0 || k === 1) {
    const props = {};
    const n = 1 + r(4);
    for (let i = 0; i < n; i++) props[`k${i}_${r(100)}`] = randomSchema(r, depth + 1);
    const names = Object.keys(props);
    const required = names.filter(() => r(2) === 0);
    return { type: 'object', properties: props, required, additionalProperties: r(2) === 0 ? false : undefined };
  }
  if (k === 2) {
    const min = r(2);
    return { type: 'array', items: randomSchema(r, depth + 1), minItems: min, maxItems: min + r(3) };
  }
  return { anyOf: [randomSchema(r, depth + 1), randomSchema(r, depth + 1)] };
}

// Samplers in every combination the API has: greedy, temperature 1 with
// top-k / top-p / min-p, the penalties.
function randomSampling(r) {
  const p = { temperature: 1, seed: r(1 << 30) };
  switch (r(5)) {
    case 0: p.top_k = 1 + r(40); break;
    case 1: p.top_p = 0.5 + r(50) / 100; break;
    case 2: p.min_p = 0.01 * r(10); break;
    case 3: p.repeat_penalty = 1.3; p.presence_penalty = 0.5; p.frequency_penalty = 0.5; break;
    default: if (r(4) === 0) p.temperature = 0;
  }
  return p;
}

async function runSchemas(server, name, seed, nPredict) {
  const r = rng(seed);
  let done = 0;
  const failures = [];
  const jobs = [];
  for (let i = 0; i < N_SCHEMAS; i++) {
    const schema = JSON.parse(JSON.stringify(randomSchema(r)));   // drops undefined
    const sp = randomSampling(r);
    jobs.push({ i, schema, sp });
  }
  const validateOne = async ({ i, schema, sp }) => {
    const res = await post(server.url + '/completion', {
      prompt: 'Once upon a time', n_predict: nPredict, json_schema: schema, ...sp,
    });
    const body = res.json;
    if (res.status !== 200) { failures.push(`#${i}: HTTP ${res.status} ${JSON.stringify(body)}`); return; }
    let value;
    try {
      value = JSON.parse(body.content);
    } catch (e) {
      failures.push(`#${i} (${body.stop_type}, ${body.tokens_predicted} tokens): not JSON: ${JSON.stringify(body.content).slice(0, 300)}`);
      return;
    }
    const validate = ajv.compile(schema);
    if (!validate(value)) {
      failures.push(`#${i}: ${JSON.stringify(value)} fails ${JSON.stringify(schema)}: ${ajv.errorsText(validate.errors)}`);
      return;
    }
    if (body.stop_type !== 'eos') failures.push(`#${i}: valid but stopped by ${body.stop_type}`);
    else done++;
  };
  // Two at a time: the servers have two slots, so batching is exercised.
  for (let k = 0; k < jobs.length; k += 2) await Promise.all(jobs.slice(k, k + 2).map(validateOne));
  assert.deepEqual(failures, [], `${name} (seed ${seed}): ${failures.length} of ${N_SCHEMAS} failed`);
  assert.equal(done, N_SCHEMAS);
}

test('random JSON Schemas on the random-weight Qwen-vocabulary model: all valid', { skip, timeout: 600000 }, async () => {
  await runSchemas(qwen, QWEN, 1234, 600);
});

test('random JSON Schemas on stories260K: all valid', { skip, timeout: 600000 }, async () => {
  await runSchemas(stories, STORIES, 777, 1500);
});

test('GBNF on /completion: the output is in the language and ends with it', { skip }, async () => {
  const grammar = 'root ::= "(" digits ( "," digits ){0,3} ")"\ndigits ::= [0-9]{1,3}';
  for (let seed = 1; seed <= 10; seed++) {
    const res = await post(stories.url + '/completion', { prompt: 'x', n_predict: 200, temperature: 1, seed, grammar });
    const body = res.json;
    assert.equal(res.status, 200);
    assert.match(body.content, /^\([0-9]{1,3}(,[0-9]{1,3}){0,3}\)$/);
    assert.equal(body.stop_type, 'eos');
  }
});

test('a streamed constrained completion matches the whole one', { skip }, async () => {
  const req = { prompt: 'x', n_predict: 300, temperature: 1, seed: 9, json_schema: { type: 'array', items: { type: 'integer' }, maxItems: 4 } };
  const whole = (await post(stories.url + '/completion', req)).json;
  const res = await post(stories.url + '/completion', { ...req, stream: true });
  const text = res.text;
  const content = text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)).content || '').join('');
  assert.equal(content, whole.content);
  assert.ok(Array.isArray(JSON.parse(content)));
});

test('bad grammars and unsupported keywords are 400s that say where and what', { skip }, async () => {
  let res = await post(stories.url + '/completion', { prompt: 'x', grammar: 'root ::= "a"\nitem ::= [a-' });
  let body = res.json;
  assert.equal(res.status, 400);
  assert.equal(body.error.type, 'invalid_request_error');
  assert.match(body.error.message, /line 2, column 10/);
  res = await post(stories.url + '/completion', { prompt: 'x', json_schema: { type: 'object', properties: { a: { type: 'string', contentMediaType: 'x' } } } });
  body = res.json;
  assert.equal(res.status, 400);
  assert.match(body.error.message, /contentMediaType/);
  assert.match(body.error.message, /#\/properties\/a/);
  res = await post(stories.url + '/completion', { prompt: 'x', grammar: 'root ::= "a"', json_schema: {} });
  assert.equal(res.status, 400);
  res = await post(qwen.url + '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'xml' } });
  assert.equal(res.status, 400);
  assert.equal(res.json.error.param, 'response_format');
  res = await post(qwen.url + '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'function', function: { name: 'f', parameters: {} } }], tool_choice: { type: 'function', function: { name: 'g' } } });
  assert.equal(res.status, 400);
  assert.match(res.json.error.message, /'g'/);
});

test('patterns with stars over what may match nothing constrain; a pattern that cannot be compiled is a 400 naming it',
  { skip }, async () => {
    // Before: 400 "invalid grammar at line 1, column 1 (byte 0): left recursion through rule 'root'".
    for (const [pattern, re] of [['^(a*)*b$', /^"a*b"$/], ['^(a|b*)*c$', /^"[ab]*c"$/], ['^(x?)*y$', /^"x*y"$/]]) {
      for (let seed = 1; seed <= 3; seed++) {
        const res = await post(stories.url + '/completion', { prompt: 'x', n_predict: 64, temperature: 1, seed,
          json_schema: { type: 'string', pattern } });
        assert.equal(res.status, 200, res.text);
        if (res.json.stop_type === 'eos') assert.match(res.json.content, re);
        else assert.match(res.json.content, /^"[abcxy]*$/);
      }
    }
    // Before: the generated grammar's line, column and rule ("unexpected '*'", "range end below its start").
    for (const [pattern, says] of [['*a', /pattern: '\*' at offset 0 has nothing to repeat/],
      ['a{3,2}', /pattern: repetition '\{3,2\}' at offset 1/],
      ['[z-a]', /pattern '\[z-a\]' cannot be compiled: range end below its start/],
      ['('.repeat(300) + 'a' + ')'.repeat(300), /pattern '\(+\.\.\.' cannot be compiled: groups nested deeper than 200/]]) {
      const res = await post(stories.url + '/completion', { prompt: 'x', json_schema: { type: 'string', pattern } });
      assert.equal(res.status, 400, res.text);
      assert.equal(res.json.error.param, 'json_schema');
      assert.match(res.json.error.message, says);
      assert.doesNotMatch(res.json.error.message, /rule '|line \d+, column/);
    }
  });

test('openai package: response_format json_schema and json_object give parsed objects', { skip }, async () => {
  const schema = {
    type: 'object',
    properties: { next: { enum: ['researcher', 'coder', 'FINISH'] }, reason: { type: 'string', maxLength: 12 } },
    required: ['next', 'reason'],
    additionalProperties: false,
  };
  for (let seed = 1; seed <= 5; seed++) {
    const a = await chat.chat.completions.create({
      model: 'x', messages: [{ role: 'user', content: 'Who acts next?' }], max_tokens: 400, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'route', schema, strict: true } },
    });
    assert.equal(a.choices[0].finish_reason, 'stop');
    const v = JSON.parse(a.choices[0].message.content);
    assert.ok(ajv.validate(schema, v), JSON.stringify(v));
    const b = await chat.chat.completions.create({
      model: 'x', messages: [{ role: 'user', content: 'JSON please' }], max_tokens: 600, temperature: 1, seed,
      response_format: { type: 'json_object' },
    });
    if (b.choices[0].finish_reason === 'stop') {
      const o = JSON.parse(b.choices[0].message.content);
      assert.equal(typeof o, 'object');
      assert.ok(!Array.isArray(o) && o !== null);
    } else {
      assert.equal(b.choices[0].finish_reason, 'length');   // an unbounded object may run long
    }
  }
  const c = await chat.completions.create({
    model: 'x', prompt: 'Answer:', max_tokens: 400, temperature: 1, seed: 3,
    response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'integer', minimum: 10, maximum: 99 } } },
  });
  assert.equal(c.choices[0].finish_reason, 'stop');
  const n = JSON.parse(c.choices[0].text);
  assert.ok(Number.isInteger(n) && n >= 10 && n <= 99, c.choices[0].text);
});

test('openai package: tool_choice required / named forces a call whose arguments validate', { skip }, async () => {
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, unit: { enum: ['C', 'F'] } }, required: ['city', 'unit'] } } },
    { type: 'function', function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 100 }, b: { type: 'integer', minimum: 0, maximum: 100 } }, required: ['a', 'b'] } } },
  ];
  for (let seed = 1; seed <= 6; seed++) {
    const named = seed % 2 === 0 ? { type: 'function', function: { name: 'add' } } : 'required';
    const a = await chat.chat.completions.create({
      model: 'x', messages: [{ role: 'user', content: 'Weather in Paris?' }], max_tokens: 400, temperature: 1, seed,
      tools, tool_choice: named,
    });
    assert.equal(a.choices[0].finish_reason, 'tool_calls');
    const calls = a.choices[0].message.tool_calls;
    assert.equal(calls.length, 1);
    const fn = tools.find((t) => t.function.name === calls[0].function.name);
    assert.ok(fn, calls[0].function.name);
    if (typeof named === 'object') assert.equal(calls[0].function.name, 'add');
    const args = JSON.parse(calls[0].function.arguments);
    assert.ok(ajv.validate(fn.function.parameters, args), JSON.stringify(args));
  }
});

test('a constrained request on a pool is constrained the same', { skip }, async () => {
  let res = await post(stories.url + '/polykv/pools', { prompt: 'Once upon a time there was' });
  if (res.status !== 200 && res.status !== 201) {
    assert.fail(`pool creation failed: ${res.status} ${res.text}`);
  }
  const pool = res.json;
  const id = pool.id ?? pool.pool_id;
  const schema = { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['a'] };
  for (const extra of [{}, { pool_id: id }]) {
    res = await post(stories.url + '/completion', { prompt: 'Once upon a time there was a cat', n_predict: 300, temperature: 0, json_schema: schema, ...extra });
    const body = res.json;
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.ok(ajv.validate(schema, JSON.parse(body.content)), body.content);
    assert.equal(body.stop_type, 'eos');
  }
});

test("LangChain's withStructuredOutput (json_schema and a forced tool call) returns parsed objects", { skip }, async () => {
  const { ChatOpenAI } = await import('@langchain/openai');
  const schema = {
    title: 'Route',
    type: 'object',
    properties: { next: { type: 'string', enum: ['researcher', 'coder', 'FINISH'] }, confidence: { type: 'integer', minimum: 0, maximum: 10 } },
    required: ['next', 'confidence'],
    additionalProperties: false,
  };
  const llm = new ChatOpenAI({ model: 'x', apiKey: 'unused', temperature: 1, maxTokens: 300, maxRetries: 0,
    configuration: { baseURL: qwen.url + '/v1' } });
  for (const method of ['jsonSchema', 'functionCalling']) {
    const structured = llm.withStructuredOutput(schema, { method, name: 'route' });
    const out = await structured.invoke('Who acts next?');
    assert.ok(ajv.validate(schema, out), `${method}: ${JSON.stringify(out)}`);
  }
});
