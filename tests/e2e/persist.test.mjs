// persist.test.mjs - KV state that survives a restart (issue 14, item 6)
// and the API key's reach (item 7), through the real server:
//   - llama-server's slot save / restore (the shape of its test_slot_save.py):
//     what a restored slot reuses, file names that would leave
//     --slot-save-path refused, 501 without it, a damaged file refused;
//   - --pool-dir: pinned pools restored at start, and a kill -9 in the middle
//     of a save (POLYKV_TEST_SAVE_DELAY_MS holds a save between its write and
//     its rename, the window a crash can hit): every pin that was answered is
//     restored and attaches to the same greedy tokens as before, the torn save
//     is refused with its log line; a corrupted, truncated or other-model
//     file is refused, and so is a child whose parent was;
//   - --api-key with and without --public-probes.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sharedModel, skipReason, startServer, post, get, sleep } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const QWEN = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const skip = skipReason(STORIES, QWEN);
const ARGS = ['-c', '1024', '-np', '2', '-t', '1'];

// The server's log once its start-up lines are in (stderr may trail /health).
async function startLog(s) {
  for (let i = 0; i < 500 && !/; ready/.test(s.log()); i++) await sleep(10);
  return s.log();
}

const greedy = (url, body) => post(url + '/completion', { temperature: 0, n_predict: 8, ...body });

test('slot save / restore: llama-server\'s API', { skip }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'polykv-slots-'));
  const s = await startServer(sharedModel(STORIES), [...ARGS, '--slot-save-path', dir]);
  try {
    const u = s.url;
    const first = await greedy(u, { prompt: 'Once upon a time there was a girl', id_slot: 1 });
    assert.equal(first.status, 200);
    const n_prompt = first.json.timings.prompt_n;
    const saved = await post(u + '/slots/1?action=save', { filename: 'slot1.bin' });
    assert.equal(saved.status, 200, saved.text);
    assert.equal(saved.json.id_slot, 1);
    assert.equal(saved.json.filename, 'slot1.bin');
    assert.equal(saved.json.n_saved, n_prompt + 8 - 1);        // the prompt and what was decoded
    assert.ok(saved.json.n_written > saved.json.n_saved * 4);
    assert.equal(typeof saved.json.timings.save_ms, 'number');
    assert.ok(existsSync(path.join(dir, 'slot1.bin')));
    assert.deepEqual(readdirSync(dir).filter((f) => f.endsWith('.tmp')), []);

    // Restored into slot 0: the same prompt there reads only its last token.
    const back = await post(u + '/slots/0?action=restore', { filename: 'slot1.bin' });
    assert.equal(back.status, 200, back.text);
    assert.equal(back.json.n_restored, saved.json.n_saved);
    assert.equal(back.json.n_read, saved.json.n_written);
    const again = await greedy(u, { prompt: 'Once upon a time there was a girl', id_slot: 0 });
    assert.equal(again.json.timings.prompt_n, 1);
    assert.equal(again.json.timings.cache_n, n_prompt - 1);
    assert.equal(again.json.content, first.json.content);

    // Names that could leave the directory, and bad bodies.
    for (const filename of ['../slot1.bin', '/etc/passwd', '..', '.', '.hidden', 'a/b', 'a\\b', '', 'x\u0000y',
      'x'.repeat(201), 'caf\u00e9']) {
      for (const action of ['save', 'restore']) {
        const r = await post(u + `/slots/0?action=${action}`, { filename });
        assert.equal(r.status, 400, `${action} ${JSON.stringify(filename)}: ${r.text}`);
        if (!filename.includes('\u0000')) assert.match(r.json.error.message, /Invalid filename/);   // else jansson's
      }
    }
    assert.equal((await post(u + '/slots/0?action=restore', { filename: 3 })).status, 400);
    assert.equal((await post(u + '/slots/0?action=restore', {})).status, 400);
    assert.equal((await post(u + '/slots/9?action=save', { filename: 'x' })).status, 400);
    assert.equal((await post(u + '/slots/0?action=explode', { filename: 'x' })).status, 400);
    assert.equal((await post(u + '/slots/0?action=restore', { filename: 'absent.bin' })).status, 404);

    // A damaged file is refused and the slot is still usable.
    const bytes = readFileSync(path.join(dir, 'slot1.bin'));
    bytes[bytes.length - 3] ^= 0x40;
    writeFileSync(path.join(dir, 'bad.bin'), bytes);
    const bad = await post(u + '/slots/0?action=restore', { filename: 'bad.bin' });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /checksum/);
    writeFileSync(path.join(dir, 'short.bin'), bytes.subarray(0, 200));
    const short = await post(u + '/slots/0?action=restore', { filename: 'short.bin' });
    assert.equal(short.status, 400);
    assert.match(short.json.error.message, /truncated/);
    assert.equal((await greedy(u, { prompt: 'Once', id_slot: 0 })).status, 200);
    assert.deepEqual(readdirSync(dir).sort(), ['bad.bin', 'short.bin', 'slot1.bin']);   // nothing else written
  } finally {
    assert.equal(await s.stop(), 0);
  }

  // Across a restart of the same model: restored, reused.
  const s2 = await startServer(sharedModel(STORIES), [...ARGS, '--slot-save-path', dir]);
  try {
    const back = await post(s2.url + '/slots/1?action=restore', { filename: 'slot1.bin' });
    assert.equal(back.status, 200, back.text);
    const r = await greedy(s2.url, { prompt: 'Once upon a time there was a girl', id_slot: 1 });
    assert.equal(r.json.timings.prompt_n, 1);
  } finally {
    assert.equal(await s2.stop(), 0);
  }

  // Another model refuses it by name; a server without the flag answers 501.
  const q = await startServer(sharedModel(QWEN), [...ARGS, '--slot-save-path', dir]);
  const plain = await startServer(sharedModel(STORIES), ARGS);
  try {
    const r = await post(q.url + '/slots/0?action=restore', { filename: 'slot1.bin' });
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /another model/);
    for (const action of ['save', 'restore']) {
      const n = await post(plain.url + `/slots/0?action=${action}`, { filename: 'slot1.bin' });
      assert.equal(n.status, 501);
      assert.equal(n.json.error.type, 'not_supported_error');
      assert.match(n.json.error.message, /--slot-save-path/);
    }
    assert.equal((await post(plain.url + '/slots/0?action=erase', {})).status, 200);
  } finally {
    assert.equal(await q.stop(), 0);
    assert.equal(await plain.stop(), 0);
  }
});

const SYS = 'Once upon a time there was a little girl named Lily. She lived in a small house with her mom.';
const BRANCH = SYS + ' One day she went to the park and saw a big dog.';
const OTHER = 'The cat sat on the mat and looked at the bird in the tree. It was a sunny day.';

test('--pool-dir: pinned pools survive kill -9; the torn save and damaged files are refused', { skip }, async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'polykv-pools-'));
  const args = [...ARGS, '--pool-dir', dir];
  let s = await startServer(sharedModel(STORIES), args, { env: { POLYKV_TEST_SAVE_DELAY_MS: '1500' } });
  let root, child, before;
  try {
    root = (await post(s.url + '/polykv/pools', { prompt: SYS })).json;
    child = (await post(s.url + `/polykv/pools/${root.pool_id}/fork`, { prompt: BRANCH })).json;
    assert.ok(child.branch_pos > 0);
    // Pinning the child saves it and its ancestor; the answer comes once both are on disk.
    assert.equal((await post(s.url + `/polykv/pools/${child.pool_id}/pin`, {})).status, 200);
    assert.deepEqual(readdirSync(dir).sort(), [`pool-${child.pool_id}.pkv`, `pool-${root.pool_id}.pkv`].sort());
    before = await greedy(s.url, { prompt: BRANCH + ' The dog', pool_id: child.pool_id });
    assert.equal(before.status, 200);
    // A third pool: kill -9 while its save sleeps between write and rename.
    const third = (await post(s.url + '/polykv/pools', { prompt: OTHER })).json;
    const pin = post(s.url + `/polykv/pools/${third.pool_id}/pin`, {}).catch(() => null);
    for (let i = 0; i < 200 && !readdirSync(dir).some((f) => f.endsWith('.tmp')); i++) await sleep(10);
    assert.ok(readdirSync(dir).includes(`pool-${third.pool_id}.pkv.tmp`), 'the save was under way');
    assert.equal(await s.kill9(), 'SIGKILL');
    await pin;
  } finally {
    await s.kill9();
  }

  s = await startServer(sharedModel(STORIES), args);
  try {
    const log = await startLog(s);
    assert.match(log, /pool-3\.pkv\.tmp refused: an unfinished save/);
    assert.match(log, /2 pools restored \(\d+ tokens\) in [\d.]+ ms, 0 refused/);
    const tree = (await get(s.url + '/polykv/pools')).json.pools;
    assert.deepEqual(tree.map((p) => [p.pool_id, p.parent, p.branch_pos, p.prefix_len, p.residency, p.pinned]), [
      [root.pool_id, -1, 0, root.prefix_len, 'resident', false],
      [child.pool_id, root.pool_id, child.branch_pos, child.prefix_len, 'resident', true],
    ]);
    const after = await greedy(s.url, { prompt: BRANCH + ' The dog', pool_id: child.pool_id });
    assert.equal(after.status, 200);
    assert.deepEqual(after.json.content, before.json.content);
    assert.equal(after.headers.get('x-cached-prefix-tokens'), before.headers.get('x-cached-prefix-tokens'));
    assert.ok(Number(after.headers.get('x-cached-prefix-tokens')) >= child.prefix_len - 1);
    // Ids go on past the restored ones (and past the refused one).
    const next = (await post(s.url + '/polykv/pools', { prompt: OTHER })).json;
    assert.equal(next.pool_id, 4);
  } finally {
    assert.equal(await s.stop(), 0);
  }

  // Damage: the root's payload flipped (its child is refused with it), a
  // truncated copy and a stray file under another pool's name.
  const rootFile = path.join(dir, `pool-${root.pool_id}.pkv`);
  const good = readFileSync(rootFile);
  const flipped = Buffer.from(good);
  flipped[flipped.length - 1] ^= 1;
  writeFileSync(rootFile, flipped);
  writeFileSync(path.join(dir, 'pool-9.pkv'), good.subarray(0, good.length - 10));
  writeFileSync(path.join(dir, 'pool-10.pkv'), good);
  s = await startServer(sharedModel(STORIES), args);
  try {
    const log = await startLog(s);
    assert.match(log, new RegExp(`pool-${root.pool_id}\\.pkv refused: payload checksum mismatch`));
    assert.match(log, new RegExp(`pool-${child.pool_id}\\.pkv refused: its parent pool ${root.pool_id} was not restored`));
    assert.match(log, /pool-9\.pkv refused: truncated/);
    assert.match(log, /pool-10\.pkv refused: it holds pool 1, not pool 10/);
    assert.deepEqual((await get(s.url + '/polykv/pools')).json.pools, []);
    assert.equal((await greedy(s.url, { prompt: 'Once' })).status, 200);
  } finally {
    assert.equal(await s.stop(), 0);
  }

  // Another model: every file refused by its fingerprint.
  writeFileSync(rootFile, good);
  const q = await startServer(sharedModel(QWEN), args);
  try {
    assert.match(await startLog(q), new RegExp(`pool-${root.pool_id}\\.pkv refused: saved by another model`));
    assert.deepEqual((await get(q.url + '/polykv/pools')).json.pools, []);
  } finally {
    assert.equal(await q.stop(), 0);
  }
});

test('--api-key: every route needs it; --public-probes opens /health and /metrics only', { skip }, async () => {
  const s = await startServer(sharedModel(STORIES), [...ARGS, '--api-key', 'k3y', '--metrics']);
  const p = await startServer(sharedModel(STORIES), [...ARGS, '--api-key', 'k3y', '--metrics', '--public-probes']);
  try {
    const routes = ['/health', '/v1/health', '/metrics', '/slots', '/props', '/v1/models', '/models', '/polykv/tps',
      '/polykv/cache', '/polykv/pools', '/polykv/capacity', '/polykv/admission'];
    for (const r of routes) {
      assert.equal((await get(s.url + r)).status, 401, r);
      assert.equal((await get(s.url + r, { authorization: 'Bearer k3y' })).status, 200, r);
      assert.equal((await get(s.url + r, { authorization: 'Bearer k3yk3y' })).status, 401, r + ' (longer)');
      assert.equal((await get(s.url + r, { authorization: 'Bearer k3' })).status, 401, r + ' (a prefix)');
      const open = ['/health', '/v1/health', '/metrics'].includes(r);
      assert.equal((await get(p.url + r)).status, open ? 200 : 401, r + ' with --public-probes');
    }
    for (const [route, body] of [['/completion', { prompt: 'x', n_predict: 1 }], ['/slots/0?action=erase', {}],
      ['/polykv/pools', { tokens: [1, 2] }], ['/tokenize', { content: 'x' }]]) {
      assert.equal((await post(s.url + route, body)).status, 401, route);
      assert.equal((await post(p.url + route, body)).status, 401, route);
    }
    // Error bodies quote the request only JSON-escaped, as valid UTF-8, never sniffed as HTML.
    for (const url of ['/polykv/pools/1/%3Cscript%3Ealert(1)%3C%2Fscript%3E', '/polykv/pools/1/%ff%fe%0d%0aX-Evil:%201',
      '/slots/%ff?action=save']) {
      const r = await fetch(s.url + url, { method: 'POST', headers: { authorization: 'Bearer k3y' }, body: '{}' });
      const raw = new Uint8Array(await r.arrayBuffer());
      assert.ok(r.status >= 400 && r.status < 500, url);
      assert.match(r.headers.get('content-type'), /^application\/json/);
      assert.equal(r.headers.get('x-content-type-options'), 'nosniff');
      assert.equal(r.headers.get('x-evil'), null);
      const text = new TextDecoder('utf-8', { fatal: true }).decode(raw);   // throws on invalid UTF-8
      assert.equal(typeof JSON.parse(text).error.message, 'string');
      assert.ok(!/[\r\n]/.test(text), 'no raw line breaks');
    }

    // The page itself loads; what it shows comes from the routes above.
    const page = await get(s.url + '/');
    assert.equal(page.status, 200);
    assert.match(page.text, /<html/i);
  } finally {
    assert.equal(await s.stop(), 0);
    assert.equal(await p.stop(), 0);
  }
});
