// harmony_stream.test.mjs - gpt-oss's harmony replies streamed through the
// real server: a random-weight model (Gemma 4's shape, Qwen3.5's
// vocabulary from ../shared, so harmony's markers are plain text cut across
// tokens) serves with gpt-oss's chat template (tests/jinja/gpt-oss), and a
// GBNF grammar makes it write exactly a harmony reply.  Streamed, the
// analysis comes as reasoning_content and the preamble as content while
// they are written, no marker's text in either, the call in the last
// delta; the deltas add up to the non-streamed answer.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { TINY_VOCAB, templateServer, skipReason, post, readSSE } from './lib.mjs';

const TEMPLATE = 'tests/jinja/gpt-oss/chat_template.jinja';
const skip = skipReason(TINY_VOCAB);
let srv;

before(async () => {
  if (!skip) srv = await templateServer(TEMPLATE);
});
after(async () => {
  if (srv) assert.equal(await srv.stop(), 0);
});

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Current weather.', parameters: { type: 'object',
    properties: { city: { type: 'string' } }, required: ['city'] } } },
];
const user = [{ role: 'user', content: 'Weather in Lima?' }];
const THOUGHT = 'The user wants the weather in Lima; call get_weather.';
const PREAMBLE = 'Checking the weather in Lima for you.';
const REPLY = `<|channel|>analysis<|message|>${THOUGHT}<|end|><|start|>assistant<|channel|>commentary<|message|>` +
  `${PREAMBLE}<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Lima"}`;

// A grammar whose only sentence is s.
const only = (s) => 'root ::= "' + s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n') + '"';

const body = (extra) => ({ messages: user, tools, max_tokens: 400, temperature: 0, grammar: only(REPLY), ...extra });

async function stream(extra) {
  const res = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body({ stream: true, ...extra })),
  });
  assert.equal(res.status, 200);
  const s = { reasoning: '', content: '', nReasoning: 0, nContent: 0, calls: null, finish: null, done: false };
  await readSSE(res, (data) => {
    if (data === '[DONE]') { s.done = true; return; }
    const ch = JSON.parse(data).choices[0];
    if (!ch) return;
    const d = ch.delta;
    if (d.reasoning_content) { s.reasoning += d.reasoning_content; s.nReasoning++; }
    if (d.content) {
      assert.ok(!d.content.includes('<|') && !d.content.includes('|>'), `marker text in content: ${d.content}`);
      s.content += d.content;
      s.nContent++;
    }
    if (d.tool_calls) { assert.equal(s.calls, null); s.calls = d.tool_calls; }
    if (ch.finish_reason) s.finish = ch.finish_reason;
  });
  assert.ok(s.done);
  return s;
}

test('harmony: analysis and preamble stream as they are written, the call at the end', { skip }, async () => {
  const whole = await post(srv.url + '/v1/chat/completions', body({}));
  assert.equal(whole.status, 200, whole.text);
  const m = whole.json.choices[0].message;
  assert.equal(m.reasoning_content, THOUGHT);
  assert.equal(m.content, PREAMBLE);
  const s = await stream({});
  assert.equal(s.reasoning, m.reasoning_content);
  assert.equal(s.content, m.content);
  assert.ok(s.nReasoning > 1, 'the reasoning streamed in pieces');
  assert.ok(s.nContent > 1, 'the content streamed in pieces');
  assert.equal(s.finish, 'tool_calls');
  assert.equal(s.calls.length, 1);
  assert.equal(s.calls[0].index, 0);
  assert.equal(s.calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(s.calls[0].function.arguments), { city: 'Lima' });
});

test('harmony: with reasoning_format none the analysis is left out, streamed or not', { skip }, async () => {
  const whole = await post(srv.url + '/v1/chat/completions', body({ reasoning_format: 'none' }));
  assert.equal(whole.json.choices[0].message.reasoning_content, undefined);
  const s = await stream({ reasoning_format: 'none' });
  assert.equal(s.reasoning, '');
  assert.equal(s.content, whole.json.choices[0].message.content);
  assert.equal(s.content, PREAMBLE);
});
