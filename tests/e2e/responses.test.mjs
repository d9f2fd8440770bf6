// responses.test.mjs - OpenAI's Responses API (/v1/responses), Vertex AI's
// predict route (AIP_MODE=PREDICTION) and the assistant prefill, against the
// real server on stories260K, greedy: output items and usage, the streamed
// event sequence, a function call round trip, a prefill that continues the
// given text (and a pool made of the same messages that the chat reuses);
// and OpenAI's own JS client, whose stream helper rebuilds the response
// from the events (so they must name items and parts consistently).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { sharedModel, skipReason, startServer, post, get, readSSE } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const skip = skipReason(STORIES);
let s, gcp;

before(async () => {
  if (skip) return;
  const flags = ['-c', '2048', '-np', '2', '-t', '1', '--temp', '0', '-n', '8'];
  s = await startServer(sharedModel(STORIES), flags);
  gcp = await startServer(sharedModel(STORIES), flags, { env: { AIP_MODE: 'PREDICTION', AIP_HTTP_PORT: '0',
    AIP_PREDICT_ROUTE: 'v1/models/m:predict', AIP_HEALTH_ROUTE: '/ready' } });
});

after(async () => {
  await s?.stop();
  await gcp?.stop();
});

const WEATHER = [{ type: 'function', name: 'get_weather', description: 'The weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } },
    required: ['city'] } }];

// A stream's events as [{event, data}], checking each data's type is its event name.
async function events(body) {
  const r = await fetch(s.url + '/v1/responses', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }) });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const text = await r.text();
  const out = [];
  for (const block of text.split('\n\n').filter((b) => b.trim())) {
    const ev = block.match(/^event: (.+)$/m), data = block.match(/^data: (.+)$/m);
    assert.ok(ev && data, block);
    const d = JSON.parse(data[1]);
    assert.equal(d.type, ev[1]);
    out.push(d);
  }
  assert.ok(!text.includes('[DONE]'));
  return out;
}

test('responses: a message item with output_text, usage, the same text as the chat route', { skip }, async () => {
  const input = [{ role: 'system', content: 'Book' }, { role: 'user', content: 'What is the best book' }];
  const r = await post(s.url + '/v1/responses', { input, max_output_tokens: 8 });
  assert.equal(r.status, 200, r.text);
  const j = r.json;
  assert.match(j.id, /^resp_/);
  assert.equal(j.object, 'response');
  assert.equal(j.status, 'completed');
  assert.equal(j.output.length, 1);
  const [msg] = j.output;
  assert.equal(msg.type, 'message');
  assert.match(msg.id, /^msg_/);
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.content[0].type, 'output_text');
  assert.equal(j.usage.output_tokens, 8);
  assert.equal(j.usage.total_tokens, j.usage.input_tokens + 8);
  // the request's settings as the response repeats them
  assert.equal(j.max_output_tokens, 8);
  assert.deepEqual(j.tools, []);
  assert.equal(j.tool_choice, 'auto');
  assert.equal(j.store, false);
  assert.equal(j.previous_response_id, null);
  const chat = await post(s.url + '/v1/chat/completions', { messages: input, max_tokens: 8 });
  assert.equal(msg.content[0].text, chat.json.choices[0].message.content);
  assert.equal(j.usage.input_tokens, chat.json.usage.prompt_tokens);
  // instructions are the system message; a string input is the user's
  const same = await post(s.url + '/responses', { instructions: 'Book', input: 'What is the best book',
    max_output_tokens: 8 });
  assert.equal(same.json.output[0].content[0].text, msg.content[0].text);
  assert.equal(same.json.usage.input_tokens, j.usage.input_tokens);
  // the count without the answer
  const count = await post(s.url + '/v1/responses/input_tokens', { input });
  assert.equal(count.status, 200);
  assert.equal(count.json.object, 'response.input_tokens');
  assert.equal(count.json.input_tokens, j.usage.input_tokens);
  assert.equal((await post(s.url + '/v1/responses/input_tokens', { input: 4 })).status, 400);
});

test('responses: the streamed event sequence adds up to the answer', { skip }, async () => {
  const body = { input: 'Tell me a story', max_output_tokens: 8, timings_per_token: true };
  const whole = (await post(s.url + '/v1/responses', body)).json;
  const evs = await events(body);
  evs.forEach((e, i) => assert.equal(e.sequence_number, i));
  const types = evs.map((e) => e.type);
  const deltas = evs.filter((e) => e.type === 'response.output_text.delta');
  assert.ok(deltas.length > 0);
  assert.deepEqual(types, ['response.created', 'response.in_progress', 'response.output_item.added',
    'response.content_part.added', ...deltas.map(() => 'response.output_text.delta'), 'response.output_text.done',
    'response.content_part.done', 'response.output_item.done', 'response.completed']);
  const msgId = evs[2].item.id;
  assert.match(msgId, /^msg_/);
  for (const e of evs.slice(3, -2)) assert.equal(e.item_id, msgId);
  assert.ok(deltas.every((d) => d.timings && 'predicted_per_second' in d.timings));
  const text = deltas.map((d) => d.delta).join('');
  const done = evs.at(-1);
  assert.equal(done.response.id, evs[0].response.id);
  assert.equal(done.response.output[0].content[0].text, text);
  assert.equal(text, whole.output[0].content[0].text);
  assert.equal(done.response.usage.output_tokens, 8);
  assert.ok(done.timings.predicted_n >= 1);
});

test('responses: a forced function call, then its output, round trip', { skip }, async () => {
  const q = { input: 'Weather in Paris?', tools: WEATHER, tool_choice: 'required', max_output_tokens: 200 };
  const r = await post(s.url + '/v1/responses', q);
  assert.equal(r.status, 200, r.text);
  const call = r.json.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r.json.output));
  assert.equal(call.name, 'get_weather');
  assert.equal(call.status, 'completed');
  assert.match(call.call_id, /^call_/);
  assert.match(call.id, /^fc_/);
  assert.ok(['Paris', 'Rome'].includes(JSON.parse(call.arguments).city));
  assert.deepEqual(r.json.tools, WEATHER);
  assert.equal(r.json.tool_choice, 'required');
  // Streamed: the call's added, arguments and done events.
  const evs = await events(q);
  const types = evs.map((e) => e.type);
  assert.deepEqual(types.slice(2), ['response.output_item.added', 'response.function_call_arguments.delta',
    'response.function_call_arguments.done', 'response.output_item.done', 'response.completed']);
  assert.equal(evs[2].item.type, 'function_call');
  assert.equal(evs[4].arguments, evs.at(-1).response.output[0].arguments);
  // The next turn sends the call and its result back; it renders as the
  // chat conversation with the assistant's tool call and the tool message.
  const next = { tools: WEATHER, max_output_tokens: 4, input: [
    { role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris?' }] },
    { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
    { type: 'function_call_output', call_id: call.call_id, output: 'sunny, 21 C' }] };
  const back = await post(s.url + '/v1/responses', next);
  assert.equal(back.status, 200, back.text);
  const chatTools = [{ type: 'function', function: { name: WEATHER[0].name, description: WEATHER[0].description,
    parameters: WEATHER[0].parameters } }];
  const asChat = (tool) => post(s.url + '/v1/chat/completions', { tools: chatTools, max_tokens: 4, messages: [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: '', tool_calls: [{ id: call.call_id, type: 'function',
      function: { name: call.name, arguments: call.arguments } }] },
    { role: 'tool', tool_call_id: call.call_id, content: tool }] });
  const chat = await asChat('sunny, 21 C');
  assert.equal(back.json.usage.input_tokens, chat.json.usage.prompt_tokens);
  assert.notEqual((await asChat('rain')).json.usage.prompt_tokens, chat.json.usage.prompt_tokens);
});

test('responses: the openai client\'s create, and its stream helper rebuilding the response', { skip }, async () => {
  const client = new OpenAI({ baseURL: s.url + '/v1', apiKey: 'unused', maxRetries: 0 });
  const r = await client.responses.create({ model: 'm', input: 'Tell me a story', max_output_tokens: 8 });
  assert.ok(r.output_text.length > 0);
  assert.equal(r.usage.output_tokens, 8);
  const st = client.responses.stream({ model: 'm', input: 'Tell me a story', max_output_tokens: 8 });
  let deltas = '';
  for await (const ev of st) if (ev.type === 'response.output_text.delta') deltas += ev.delta;
  const fin = await st.finalResponse();
  assert.equal(fin.output_text, r.output_text);
  assert.equal(deltas, r.output_text);
  const calls = client.responses.stream({ model: 'm', input: 'Weather in Paris?', tools: WEATHER,
    tool_choice: 'required', max_output_tokens: 200 });
  for await (const ev of calls) void ev;
  const out = (await calls.finalResponse()).output;
  assert.equal(out.length, 1);
  assert.equal(out[0].type, 'function_call');
  assert.equal(out[0].name, 'get_weather');
  assert.equal(JSON.parse(out[0].arguments).city, 'Paris');
});

test('responses: bad input is a 400 naming the field', { skip }, async () => {
  const cases = [
    [{}, 'input'],
    [{ input: 5 }, 'input'],
    [{ input: [{ type: 'item_reference', id: 'x' }] }, 'input'],
    [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x' }] }] }, 'input'],
    [{ input: [{ type: 'function_call', name: 'f', arguments: '{}' }] }, 'input'],
    [{ input: 'hi', previous_response_id: 'resp_1' }, 'previous_response_id'],
    [{ input: 'hi', tools: [{ type: 'function' }] }, 'tools'],
    [{ input: 'hi', tool_choice: { type: 'file_search' } }, 'tool_choice'],
    [{ input: 'hi', n: 2 }, 'n'],
  ];
  for (const [body, param] of cases) {
    const r = await post(s.url + '/v1/responses', body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.json.error.param, param, JSON.stringify(body));
  }
});

test('prefill: a last assistant message is continued, not closed', { skip }, async () => {
  const head = [{ role: 'user', content: 'Tell me a story' }];
  const msgs = [...head, { role: 'assistant', content: 'Once upon a' }];
  const open = (await post(s.url + '/apply-template', { messages: head })).json.prompt;
  const prefilled = (await post(s.url + '/apply-template', { messages: msgs })).json.prompt;
  assert.equal(prefilled, open + 'Once upon a');
  // The chat's answer is what the model writes after that text.
  const chat = await post(s.url + '/v1/chat/completions', { messages: msgs, max_tokens: 8 });
  const plain = await post(s.url + '/completion', { prompt: prefilled, n_predict: 8 });
  assert.equal(chat.json.choices[0].message.content, plain.json.content);
  assert.equal(chat.json.usage.prompt_tokens, plain.json.tokens_evaluated);
  const counted = await post(s.url + '/v1/chat/completions/input_tokens', { messages: msgs });
  assert.equal(counted.json.input_tokens, chat.json.usage.prompt_tokens);
  // vLLM's explicit form gives the same prompt; text parts join with a blank line.
  const explicit = await post(s.url + '/apply-template', { messages: msgs, add_generation_prompt: false,
    continue_final_message: true });
  assert.equal(explicit.json.prompt, prefilled);
  const parts = await post(s.url + '/apply-template', { messages: [...head, { role: 'assistant',
    content: [{ type: 'text', text: 'Once' }, { type: 'text', text: 'upon' }] }] });
  assert.equal(parts.json.prompt, open + 'Once\n\nupon');
  // Responses input ending with the assistant's text is a prefill too.
  const resp = await post(s.url + '/v1/responses', { input: msgs, max_output_tokens: 8 });
  assert.equal(resp.json.output[0].content[0].text, plain.json.content);
});

test('prefill: contradictions are a 400', { skip }, async () => {
  const msgs = [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello' }];
  const bad = [
    { messages: msgs, add_generation_prompt: true, continue_final_message: true },
    { messages: [msgs[0]], continue_final_message: true },
    { messages: [...msgs, { role: 'assistant', content: 'again' }] },
    { messages: msgs, continue_final_message: 'sideways' },
  ];
  for (const body of bad) {
    const r = await post(s.url + '/v1/chat/completions', body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.ok(r.json.error.message.length > 0);
  }
  assert.equal((await post(s.url + '/completion', { prompt: 'a', continue_final_message: true })).status, 400);
});

test('prefill: a pool of the turns before it is the prefilled prompt\'s prefix; a pool keeps its turns closed', { skip }, async () => {
  const msgs = [{ role: 'user', content: 'Tell a story about a cat' }, { role: 'assistant', content: 'Once upon a time' }];
  const pool = await post(s.url + '/polykv/pools', { messages: msgs.slice(0, 1) });
  assert.equal(pool.status, 201, pool.text);
  const r = await fetch(s.url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: msgs, pool_id: pool.json.pool_id, max_tokens: 4 }) });
  const j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  assert.equal(r.headers.get('x-pool-id'), String(pool.json.pool_id));
  assert.ok(j.usage.prompt_tokens > pool.json.prefix_len, JSON.stringify(j.usage));
  assert.equal(Number(r.headers.get('x-cached-prefix-tokens')), pool.json.prefix_len);
  // A pool whose messages end with the assistant holds that turn finished
  // (end of turn included), not open as a prefill: the next user turn
  // follows it, and two assistant messages at the end are history too.
  const hist = await post(s.url + '/polykv/pools', { messages: [...msgs, { role: 'assistant', content: 'The end.' }] });
  assert.equal(hist.status, 201, hist.text);
  const next = await fetch(s.url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [...msgs, { role: 'assistant', content: 'The end.' }, { role: 'user', content: 'Again' }],
      pool_id: hist.json.pool_id, max_tokens: 2 }) });
  const nj = await next.json();
  assert.equal(next.status, 200, JSON.stringify(nj));
  assert.equal(Number(next.headers.get('x-cached-prefix-tokens')), hist.json.prefix_len);
  assert.ok(nj.usage.prompt_tokens > hist.json.prefix_len);
  for (const id of [pool.json.pool_id, hist.json.pool_id]) await fetch(s.url + `/polykv/pools/${id}`, { method: 'DELETE' });
});

test('predict: instances through our routes, in order, errors in place', { skip }, async () => {
  assert.equal((await get(gcp.url + '/ready')).json.status, 'ok');
  const messages = [{ role: 'user', content: 'Say hello' }];
  const r = await post(gcp.url + '/v1/models/m:predict', { instances: [
    { '@requestFormat': 'chatCompletions', messages, max_tokens: 6, stream: true },
    { '@requestFormat': '/tokenize', content: 'hello' },
    { '@requestFormat': 'responses', input: 'Say hello', max_output_tokens: 6 },
    { '@requestFormat': 'noSuchRoute' },
    { messages },
  ] });
  assert.equal(r.status, 200, r.text);
  const p = r.json.predictions;
  assert.equal(p.length, 5);
  const direct = await post(gcp.url + '/v1/chat/completions', { messages, max_tokens: 6 });
  assert.equal(p[0].object, 'chat.completion');
  assert.equal(p[0].choices[0].message.content, direct.json.choices[0].message.content);
  assert.deepEqual(p[1].tokens, (await post(gcp.url + '/tokenize', { content: 'hello' })).json.tokens);
  assert.equal(p[2].output[0].content[0].text, direct.json.choices[0].message.content);
  assert.equal(p[3].error.code, 400);
  assert.match(p[4].error.message, /@requestFormat/);
  assert.equal((await post(gcp.url + '/v1/models/m:predict', { instances: {} })).status, 400);
  assert.equal((await post(gcp.url + '/v1/models/m:predict', { instances: Array(129).fill({}) })).status, 400);
  // Without AIP_MODE there is no predict route.
  assert.equal((await post(s.url + '/predict', { instances: [] })).status, 404);
});
