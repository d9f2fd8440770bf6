// chat_tokens.mjs - the end-to-end check of Jinja chat templates against
// llama-server: for each template, one request with tools and one with
// reasoning (an assistant turn carrying reasoning_content, enable_thinking
// on, and a history with a tool call and its result) go to /apply-template and then /tokenize on llama-server (--jinja
// --chat-template-file T) and on polykv (--chat-template-file T), same model;
// prints a markdown table: prompt tokens each side and whether they agree.
//
// Usage: node bench/chat_tokens.mjs [POLYKV_BIN] [LLAMA_SERVER] [MODEL] [TEMPLATE_DIR]
// (defaults: build/polykv, /work/peers/llama.cpp/build/bin/llama-server,
// ../shared/models/rand-qwen3-qwen2vocab-e64-l2-Q8_0.gguf, build/jinja/templates).
// Needs the reference build beside the project; nothing here is a test.

import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

const [BIN = 'build/polykv', LLAMA = '/work/peers/llama.cpp/build/bin/llama-server',
  MODEL = '../shared/models/rand-qwen3-qwen2vocab-e64-l2-Q8_0.gguf', TDIR = 'build/jinja/templates'] = process.argv.slice(2);
const TEMPLATES = {
  'Qwen3': 'Qwen-Qwen3-0.6B.jinja',
  'Llama 3.1': 'meta-llama-Llama-3.1-8B-Instruct.jinja',
  'DeepSeek-R1-Distill': 'deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja',
  'Gemma 2': 'google-gemma-2-2b-it.jinja',
  'Phi-3.5': 'microsoft-Phi-3.5-mini-instruct.jinja',
  'Mistral-Nemo': 'mistralai-Mistral-Nemo-Instruct-2407.jinja',
  'gpt-oss': 'openai-gpt-oss-120b.jinja',
};
const tool = { type: 'function', function: { name: 'get_weather', description: 'Current weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
const REQUESTS = {
  tools: { messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [tool] },
  reasoning: {
    messages: [{ role: 'user', content: 'Is 17 prime?' },
      { role: 'assistant', content: 'Yes.', reasoning_content: 'No divisor below its square root.' },
      { role: 'user', content: 'Is 21?' }],
    chat_template_kwargs: { enable_thinking: true },
  },
  // an OpenAI client's history: the call's arguments as a JSON string
  tool_history: {
    messages: [{ role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '18 C' }],
    tools: [tool],
  },
};
let port = 18600 + Math.floor(Math.random() * 300);

async function start(cmd, args) {
  const p = port++;
  const proc = spawn(cmd, [...args, '--host', '127.0.0.1', '--port', String(p)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  const url = `http://127.0.0.1:${p}`;
  for (let i = 0; i < 600; i++) {
    if (proc.exitCode !== null) return { url, proc, log: () => log, dead: true };
    const r = await fetch(url + '/health').catch(() => null);
    if (r && r.status === 200) return { url, proc, log: () => log };
    await new Promise((res) => setTimeout(res, 50));
  }
  return { url, proc, log: () => log, dead: true };
}

async function tokens(srv, body) {
  const at = await fetch(srv.url + '/apply-template', { method: 'POST', body: JSON.stringify(body),
    headers: { 'content-type': 'application/json' } });
  const aj = await at.json();
  if (at.status !== 200) return { error: (aj.error && aj.error.message || JSON.stringify(aj)).slice(0, 80) };
  const tk = await fetch(srv.url + '/tokenize', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ content: aj.prompt, add_special: false, parse_special: true }) });
  return { prompt: aj.prompt, ids: (await tk.json()).tokens };
}

function firstDiff(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

console.log('| template | request | llama-server tokens | polykv tokens | same tokens | note |');
console.log('|---|---|---|---|---|---|');
for (const [family, file] of Object.entries(TEMPLATES)) {
  const t = path.join(TDIR, file);
  if (!existsSync(t)) { console.log(`| ${family} | - | - | - | - | ${t} absent |`); continue; }
  const ls = await start(LLAMA, ['-m', MODEL, '--jinja', '--chat-template-file', t, '-c', '2048', '-t', '1', '-np', '1']);
  const pk = await start(BIN, ['serve', '-m', MODEL, '--chat-template-file', t, '-c', '2048', '-t', '1', '-np', '1']);
  for (const [kind, body] of Object.entries(REQUESTS)) {
    const a = ls.dead ? { error: 'llama-server did not start' } : await tokens(ls, body);
    const b = pk.dead ? { error: 'polykv did not start' } : await tokens(pk, body);
    let same = 'n/a', note = '';
    if (a.ids && b.ids) {
      same = JSON.stringify(a.ids) === JSON.stringify(b.ids) ? 'yes' : 'no';
      if (same === 'no') {
        const k = firstDiff(a.prompt, b.prompt);
        note = `text differs at ${k}: llama-server ${JSON.stringify(a.prompt.slice(k, k + 30))} polykv ${JSON.stringify(b.prompt.slice(k, k + 30))}`;
      }
    } else {
      note = [a.error && `llama-server: ${a.error}`, b.error && `polykv: ${b.error}`].filter(Boolean).join('; ');
    }
    console.log(`| ${family} | ${kind} | ${a.ids ? a.ids.length : '-'} | ${b.ids ? b.ids.length : '-'} | ${same} | ${note.replace(/\|/g, '\\|').replace(/\n/g, '\\n')} |`);
  }
  for (const s of [ls, pk]) { s.proc.kill('SIGTERM'); }
}
