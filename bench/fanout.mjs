// bench/fanout.mjs - the pools issue's workload against one server: an agent
// tree that fans out, cache pressure from unrelated conversations, then a
// second wave on the tree.
//
//   node bench/fanout.mjs --url http://127.0.0.1:8080 --mode pools|implicit [--json]
//
//   1. root: a 2,000-token system prompt + tool definitions
//   2. extend: + 500 tokens of task context
//   3. wave 1: 8 sub-agents at once on the extend, each a ~100-token suffix,
//      64 tokens generated
//   4. branch: the root's system prompt with a different 300-token tool set,
//      and 4 sub-agents on it
//   5. pressure: 30 unrelated conversations of ~1,500 tokens
//   6. wave 2: 8 new sub-agents on the extend
//
// --mode pools creates the root, the extend (a fork) and the branch (a fork
// at the end of the system prompt) with /polykv/pools and attaches every
// sub-agent with pool_id; --mode implicit sends the same prompts with no
// pool (what llama-server and polykv without pools do with them).  Every
// request is a streamed /completion with ignore_eos, so each generates
// exactly its tokens.  Reported: prompt tokens evaluated (timings.prompt_n)
// per phase and in all, tokens restored from polykv's RAM tier
// (/polykv/cache tokens_restored; 0 where the server has none), wall time.
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' },
  mode: { type: 'string', default: 'pools' },
  'root-tokens': { type: 'string', default: '2000' },
  json: { type: 'boolean', default: false },
} });
const url = a.url;
const WORDS = ['agent', 'tool', 'plan', 'file', 'search', 'result', 'the', 'a', 'of', 'query', 'answer',
  'code', 'test', 'build', 'river', 'tree', 'box', 'report', 'merge', 'branch', 'deploy', 'cache'];
function words(n, seed) {
  let s = seed >>> 0, out = [];
  for (let i = 0; i < n; i++) { s = (Math.imul(s, 1103515245) + 12345) >>> 0; out.push(WORDS[(s >>> 16) % WORDS.length]); }
  return out.join(' ');
}

async function post(path, body) {
  const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' },
                                      body: JSON.stringify(body) });
  const text = await r.text();
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status} ${text}`);
  return JSON.parse(text);
}

async function tokens(text, add_special) {
  return (await post('/tokenize', { content: text, add_special })).tokens;
}

/* Words until the text has n tokens (the model's own tokenizer decides). */
async function textOf(n, seed) {
  let w = Math.ceil(n * 0.9), t = words(w, seed), k = (await tokens(t, false)).length;
  while (k < n) { w += Math.max(1, Math.ceil((n - k) * 0.9)); t = words(w, seed); k = (await tokens(t, false)).length; }
  return t;
}

async function complete(prompt, pool, nPredict) {
  const body = { prompt, n_predict: nPredict, temperature: 0, stream: true, cache_prompt: true, ignore_eos: true };
  if (pool) body.pool_id = pool;
  const res = await fetch(url + '/completion', { method: 'POST', headers: { 'content-type': 'application/json' },
                                                 body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`/completion: HTTP ${res.status} ${await res.text()}`);
  let timings = null, buf = '';
  const dec = new TextDecoder();
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ')) continue;
      const d = JSON.parse(ev.slice(6));
      if (d.timings) timings = d.timings;
    }
  }
  return timings;
}

async function restored() {
  const r = await fetch(url + '/polykv/cache').catch(() => null);
  if (!r || !r.ok) return 0;
  return (await r.json()).tokens_restored || 0;
}

const usePools = a.mode === 'pools';
const rootN = Number(a['root-tokens']);
const system = '<|im_start|>system\n' + await textOf(rootN - 300, 1);
const toolsA = '\n# Tools\n' + await textOf(300, 2);
const toolsB = '\n# Tools\n' + await textOf(300, 3);
const task = '<|im_end|>\n<|im_start|>user\nTask: ' + await textOf(500, 4);
const agent = async (k) => '\nSub-agent ' + k + ': ' + await textOf(100, 100 + k) + '<|im_end|>\n<|im_start|>assistant\n';

const phases = [];
const t0 = performance.now();
let r0 = await restored();
async function phase(name, prompts, pool, nPredict) {
  const ts = performance.now();
  const tim = await Promise.all(prompts.map((p) => complete(p, pool, nPredict)));
  const r1 = await restored();
  phases.push({ name, requests: prompts.length, prompt_n: tim.reduce((s, t) => s + (t ? t.prompt_n : 0), 0),
                restored: r1 - r0, ms: performance.now() - ts });
  r0 = r1;
}

let extId = 0, brId = 0;
const ts = performance.now();
if (usePools) {
  const root = await post('/polykv/pools', { prompt: system + toolsA });
  const ext = await post(`/polykv/pools/${root.pool_id}/fork`, { prompt: system + toolsA + task });
  const sysN = (await tokens(system, true)).length;
  const br = await post(`/polykv/pools/${root.pool_id}/fork`, { prompt: system + toolsB, branch_pos: sysN - 1 });
  extId = ext.pool_id;
  brId = br.pool_id;
  phases.push({ name: 'pools', requests: 3, prompt_n: root.prefilled_tokens + ext.prefilled_tokens + br.prefilled_tokens,
                restored: 0, ms: performance.now() - ts });
}
const wave1 = await Promise.all([...Array(8).keys()].map(async (k) => system + toolsA + task + await agent(k)));
await phase('wave 1 (8 on the extend)', wave1, extId, 64);
const branch = await Promise.all([...Array(4).keys()].map(async (k) => system + toolsB + await agent(20 + k)));
await phase('branch (4)', branch, brId, 64);
const pressure = [];
for (let k = 0; k < 30; k++) pressure.push('<|im_start|>system\nUnrelated ' + k + ' ' + await textOf(1500, 500 + k) +
                                            '<|im_end|>\n<|im_start|>assistant\n');
{ /* 30 conversations, 4 at a time */
  const ts2 = performance.now(), rr = await restored();
  let n = 0;
  for (let i = 0; i < pressure.length; i += 4) {
    const tim = await Promise.all(pressure.slice(i, i + 4).map((p) => complete(p, 0, 16)));
    n += tim.reduce((s, t) => s + (t ? t.prompt_n : 0), 0);
  }
  const r1 = await restored();
  phases.push({ name: 'pressure (30 unrelated)', requests: 30, prompt_n: n, restored: r1 - rr, ms: performance.now() - ts2 });
  r0 = r1;
}
const wave2 = await Promise.all([...Array(8).keys()].map(async (k) => system + toolsA + task + await agent(40 + k)));
const uniq2 = (await Promise.all([...Array(8).keys()].map(async (k) => (await tokens(await agent(40 + k), false)).length)))
  .reduce((s, x) => s + x, 0);
await phase('wave 2 (8 on the extend)', wave2, extId, 64);
const total = { prompt_n: phases.reduce((s, p) => s + p.prompt_n, 0), restored: phases.reduce((s, p) => s + p.restored, 0),
                ms: performance.now() - t0, wave2_unique_tokens: uniq2 };
if (a.json) {
  console.log(JSON.stringify({ mode: a.mode, url, phases, total }));
} else {
  console.log(`fanout against ${url}, mode ${a.mode}`);
  for (const p of phases)
    console.log(`  ${p.name.padEnd(28)} ${String(p.requests).padStart(3)} requests  prompt ${String(p.prompt_n).padStart(6)}` +
                `  restored ${String(p.restored).padStart(6)}  ${(p.ms / 1000).toFixed(1)} s`);
  console.log(`  total: prompt ${total.prompt_n}, restored ${total.restored}, ${(total.ms / 1000).toFixed(1)} s; ` +
              `wave 2's unique suffix tokens ${uniq2}`);
}
