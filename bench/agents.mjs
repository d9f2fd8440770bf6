// bench/agents.mjs - the placement issue's workload: agent conversations with
// side requests, more conversations than slots, against one or two servers
// (polykv and llama-server, same model, same -np and -c), one after the other.
//
//   node bench/agents.mjs --url http://127.0.0.1:8080 [--peer-url http://127.0.0.1:8081]
//     --convs 6 --turns 4 --shared-words 1500 --context-words 500 --reply 16
//     --concurrency 3 --seed 1 --json
//
// Each conversation: a system prompt with the tool definitions every agent
// shares (--shared-words), its own task context, then turns; its next turn
// resends the whole transcript with the previous reply (as text).  After
// every turn a side request (a safety classifier) sends a transcript of the
// same conversation whose last message is rewritten on every query.
// --concurrency clients run at once, each driving its share of the
// conversations in turn, through /completion with the prompt rendered in
// ChatML and streamed.  Per server:
// prompt tokens evaluated (timings.prompt_n, summed over all requests), time
// to first token of next turns (turn >= 1 of the main conversations) and the
// wall time of the whole workload.
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({ options: {
  url: { type: 'string', default: 'http://127.0.0.1:8080' },
  'peer-url': { type: 'string' },
  convs: { type: 'string', default: '6' },
  turns: { type: 'string', default: '4' },
  'context-words': { type: 'string', default: '500' },
  'shared-words': { type: 'string', default: '1500' },
  concurrency: { type: 'string', default: '3' },
  reply: { type: 'string', default: '16' },
  seed: { type: 'string', default: '1' },
  json: { type: 'boolean', default: false },
} });

const WORDS = ['agent', 'tool', 'plan', 'file', 'search', 'result', 'the', 'a', 'of', 'query', 'answer',
  'code', 'test', 'build', 'river', 'tree', 'box', 'report', 'merge', 'branch', 'deploy', 'cache'];
function words(n, seed) {
  let s = seed >>> 0, out = [];
  for (let i = 0; i < n; i++) { s = (Math.imul(s, 1103515245) + 12345) >>> 0; out.push(WORDS[(s >>> 16) % WORDS.length]); }
  return out.join(' ');
}
const chatml = (msgs) => msgs.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';

async function complete(url, prompt, nPredict) {
  const t0 = performance.now();
  const res = await fetch(`${url}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, n_predict: nPredict, temperature: 0, stream: true, cache_prompt: true }) });
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status} ${await res.text()}`);
  let ttft = null, text = '', timings = null, buf = '';
  const dec = new TextDecoder();
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ')) continue;
      const d = JSON.parse(ev.slice(6));
      if (ttft === null) ttft = performance.now() - t0;
      text += d.content || '';
      if (d.timings) timings = d.timings;
    }
  }
  return { ttft, text, promptN: timings ? timings.prompt_n : NaN, cacheN: timings ? timings.cache_n : NaN };
}

async function run(url) {
  const t0 = performance.now();
  const nConv = Number(a.convs), nTurns = Number(a.turns), seed = Number(a.seed), conc = Number(a.concurrency);
  const tools = `You are a coding agent. Tools: ${words(Number(a['shared-words']), seed * 7919)}`;
  const convs = [];
  for (let c = 0; c < nConv; c++)
    convs.push({ id: c, msgs: [{ role: 'system', content: tools },
                               { role: 'user', content: `Task ${c}: ${words(Number(a['context-words']), seed * 1000 + c)}` }],
                 classifier: 0 });
  let promptTotal = 0, requests = 0;
  const nextTurnTtft = [];
  async function turn(conv, t) {
    const r = await complete(url, chatml(conv.msgs), Number(a.reply));
    promptTotal += r.promptN; requests++;
    if (t > 0) nextTurnTtft.push(r.ttft);
    conv.msgs.push({ role: 'assistant', content: r.text }, { role: 'user', content: `next step ${t}` });
    // Side request: the classifier's transcript of this conversation, its
    // last message rewritten on every query.
    const side = [{ role: 'system', content: 'Classify whether the agent action is safe.' },
                  { role: 'user', content: conv.msgs[1].content },
                  { role: 'user', content: `action ${t}.${conv.classifier++} of conversation ${conv.id}` }];
    const s = await complete(url, chatml(side), 2);
    promptTotal += s.promptN; requests++;
  }
  // Client k drives conversations k, k + conc, ...; each round of turns in order.
  await Promise.all(Array.from({ length: conc }, async (_, k) => {
    for (let t = 0; t < nTurns; t++)
      for (let c = k; c < nConv; c += conc) await turn(convs[c], t);
  }));
  nextTurnTtft.sort((x, y) => x - y);
  const p50 = nextTurnTtft[Math.floor(nextTurnTtft.length / 2)];
  return { url, requests, prompt_tokens_evaluated: promptTotal, next_turn_ttft_p50_ms: p50,
           wall_ms: performance.now() - t0 };
}

const ours = await run(a.url.replace(/\/$/, ''));
const peer = a['peer-url'] ? await run(a['peer-url'].replace(/\/$/, '')) : null;
if (a.json) {
  console.log(JSON.stringify({ ours, peer }));
} else {
  const row = (n, r) => `| ${n} | ${r.requests} | ${r.prompt_tokens_evaluated} | ${r.next_turn_ttft_p50_ms.toFixed(1)} | ` +
    `${(r.wall_ms / 1000).toFixed(1)} |`;
  console.log('| server | requests | prompt tokens evaluated | next-turn TTFT p50 (ms) | wall (s) |\n|---|---|---|---|---|');
  console.log(row(ours.url, ours));
  if (peer) {
    console.log(row(peer.url, peer));
    console.log(`ratios: prompt tokens ${(ours.prompt_tokens_evaluated / peer.prompt_tokens_evaluated).toFixed(3)}, ` +
                `next-turn TTFT p50 ${(ours.next_turn_ttft_p50_ms / peer.next_turn_ttft_p50_ms).toFixed(3)}, ` +
                `wall ${(ours.wall_ms / peer.wall_ms).toFixed(3)}`);
  }
}
