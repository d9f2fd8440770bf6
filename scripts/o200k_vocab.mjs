// o200k_vocab.mjs - writes gpt-oss's vocabulary as a vocabulary-only GGUF
// (the keys llama.cpp's converter writes for it), from the o200k_base ranks
// that the npm package js-tiktoken ships (pinned in tests/e2e), so the
// tokenizer tests need no download from the hub.
//
//   node scripts/o200k_vocab.mjs OUT.gguf [TEMPLATE.jinja]
//
// - tokens 0 .. 199,997: o200k_base's, each byte string in the byte-level
//   BPE alphabet (GPT-2's byte-to-character table), type NORMAL;
// - merges: for every token of two or more bytes, in rank order, the last
//   merge byte-pair encoding makes when only lower ranks may merge, which
//   is how a ranked vocabulary becomes a merge list (llama.cpp's converter
//   reads the same list from the model's tokenizer.json);
// - 199,998 .. 201,087: the harmony format's special tokens (o200k_harmony:
//   <|startoftext|>, <|endoftext|>, <|return|>, <|constrain|>, <|channel|>,
//   <|start|>, <|end|>, <|message|>, <|call|>, <|endofprompt|>, the rest
//   <|reserved_N|>), type CONTROL; BOS <|startoftext|>, EOS <|return|>,
//   padding <|endoftext|>; pre-tokenizer "gpt-4o".
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'tests/e2e/package.json'));
const ranks = require('js-tiktoken/ranks/o200k_base');

/* ---- the ranked byte strings ---- */
const byRank = [];
for (const line of ranks.bpe_ranks.split('\n')) {
  if (!line) continue;
  const [, offset, ...toks] = line.split(' ');
  toks.forEach((t, i) => { byRank[Number(offset) + i] = Buffer.from(t, 'base64'); });
}
const N_BPE = 199998;
if (byRank.length !== N_BPE) throw new Error(`o200k_base: ${byRank.length} ranks, expected ${N_BPE}`);
const rankOf = new Map(byRank.map((b, r) => [b.toString('latin1'), r]));

/* GPT-2's table: printable bytes stand for themselves, the others for 256+ */
const byteChar = [];
{
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byteChar[b] = String.fromCodePoint(printable ? b : 256 + n++);
  }
}
const text = (bytes) => Array.from(bytes, (b) => byteChar[b]).join('');

/* The two parts byte-pair encoding joins last to make token r: merge the
 * lowest-ranked adjacent pair, among ranks below r, until two parts remain. */
function lastMerge(bytes, r) {
  let parts = Array.from(bytes, (b) => Buffer.from([b]));
  while (parts.length > 2) {
    let best = -1, bestRank = Infinity;
    for (let i = 0; i + 1 < parts.length; i++) {
      const k = rankOf.get(Buffer.concat([parts[i], parts[i + 1]]).toString('latin1'));
      if (k !== undefined && k < r && k < bestRank) { best = i; bestRank = k; }
    }
    if (best < 0) throw new Error(`token ${r} cannot be built from lower ranks`);
    parts = [...parts.slice(0, best), Buffer.concat([parts[best], parts[best + 1]]), ...parts.slice(best + 2)];
  }
  return parts;
}

const tokens = byRank.map(text), types = new Array(N_BPE).fill(1), merges = [];
byRank.forEach((b, r) => {
  if (b.length < 2) return;
  const [a, c] = lastMerge(b, r);
  merges.push(`${text(a)} ${text(c)}`);
});
const special = { 199998: '<|startoftext|>', 199999: '<|endoftext|>', 200002: '<|return|>', 200003: '<|constrain|>',
                  200005: '<|channel|>', 200006: '<|start|>', 200007: '<|end|>', 200008: '<|message|>',
                  200012: '<|call|>', 200018: '<|endofprompt|>' };
for (let id = N_BPE; id < 201088; id++) {
  tokens.push(special[id] || `<|reserved_${id}|>`);
  types.push(3);
}

/* ---- GGUF v3, no tensors ---- */
const chunks = [];
const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); chunks.push(b); };
const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); chunks.push(b); };
const str = (s) => { const b = Buffer.from(s, 'utf8'); u64(b.length); chunks.push(b); };
const T = { u32: 4, i32: 5, f32: 6, bool: 7, str: 8, arr: 9 };
const kvs = [];
const kv = (key, type, value) => kvs.push([key, type, value]);
const arch = 'gpt-oss';
kv('general.architecture', T.str, arch);
kv('general.name', T.str, 'gpt-oss vocabulary (o200k_harmony)');
for (const [k, v] of [['block_count', 24], ['context_length', 131072], ['embedding_length', 2880],
                      ['feed_forward_length', 2880], ['attention.head_count', 64], ['attention.head_count_kv', 8],
                      ['attention.key_length', 64], ['attention.value_length', 64], ['expert_count', 32],
                      ['expert_used_count', 4], ['expert_feed_forward_length', 2880],
                      ['attention.sliding_window', 128]])
  kv(`${arch}.${k}`, T.u32, v);
kv(`${arch}.rope.freq_base`, T.f32, 150000);
kv(`${arch}.attention.layer_norm_rms_epsilon`, T.f32, 1e-5);
kv('tokenizer.ggml.model', T.str, 'gpt2');
kv('tokenizer.ggml.pre', T.str, 'gpt-4o');
kv('tokenizer.ggml.tokens', T.arr, [T.str, tokens]);
kv('tokenizer.ggml.token_type', T.arr, [T.i32, types]);
kv('tokenizer.ggml.merges', T.arr, [T.str, merges]);
kv('tokenizer.ggml.bos_token_id', T.u32, 199998);
kv('tokenizer.ggml.eos_token_id', T.u32, 200002);
kv('tokenizer.ggml.padding_token_id', T.u32, 199999);
kv('tokenizer.ggml.add_bos_token', T.bool, false);
if (process.argv[3]) kv('tokenizer.chat_template', T.str, readFileSync(process.argv[3], 'utf8'));

chunks.push(Buffer.from('GGUF'));
u32(3);
u64(0);
u64(kvs.length);
for (const [key, type, value] of kvs) {
  str(key);
  u32(type);
  if (type === T.str) str(value);
  else if (type === T.u32) u32(value);
  else if (type === T.f32) { const b = Buffer.alloc(4); b.writeFloatLE(value); chunks.push(b); }
  else if (type === T.bool) chunks.push(Buffer.from([value ? 1 : 0]));
  else {
    const [et, items] = value;
    u32(et);
    u64(items.length);
    for (const it of items) {
      if (et === T.str) str(it);
      else { const b = Buffer.alloc(4); b.writeInt32LE(it); chunks.push(b); }
    }
  }
}
writeFileSync(process.argv[2], Buffer.concat(chunks));
console.log(`${process.argv[2]}: ${tokens.length} tokens, ${merges.length} merges`);
