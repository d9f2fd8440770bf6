// bench/spawn_workload.mjs - the agents' text of the admission benches
// (bench/spawn.mjs, bench/lone.mjs): the pool's system prompt and the
// deterministic words of each agent's task and tool results.
const WORDS = ['agent', 'tool', 'plan', 'file', 'search', 'result', 'query', 'answer', 'code', 'test', 'build'];

export const words = (n, seed) => {
  let s = seed >>> 0, out = [];
  for (let i = 0; i < n; i++) { s = (Math.imul(s, 1103515245) + 12345) >>> 0; out.push(WORDS[(s >>> 16) % WORDS.length]); }
  return out.join(' ');
};

export const SYSTEM = 'You are one of many sub-agents. Tools: ' + words(600, 1);
