// router.test.mjs - router mode (`polykv serve` without -m) against the real
// binary: a --models-dir of two models, listed by their file stems; each
// completes (whole and streamed) with the same greedy tokens as a direct
// `polykv serve -m` of the same file; --models-max 1 unloads the first when
// the second loads; unload; an unknown model's 400; a child killed shows
// `failed` and the next request starts it again; the router's API key and
// CORS; stopping the router stops its children.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { BIN, WORK, sharedModel, skipReason, sleep, startServer, post, get, readSSE } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const QWEN = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const NAMES = ['rand-qwen2-qwen2vocab-e64-l2-F16', 'stories260K'];
const skip = skipReason(STORIES, QWEN);
const FLAGS = ['-t', '1', '-c', '256', '-np', '1'];
const DIR = path.resolve(WORK, 'router-models');
let router, keyed, preset;

before(async () => {
  if (skip) return;
  rmSync(DIR, { recursive: true, force: true });
  mkdirSync(DIR, { recursive: true });
  for (const m of [STORIES, QWEN]) symlinkSync(path.resolve(sharedModel(m)), path.join(DIR, m));
  router = await startServer(null, ['--models-dir', DIR, '--models-max', '1', ...FLAGS]);
});

after(async () => {
  await router?.stop();
  await keyed?.stop();
  await preset?.stop();
});

const models = async (url = router.url, headers = {}) => {
  const r = await get(url + '/models', headers);
  assert.equal(r.status, 200, r.text);
  return Object.fromEntries(r.json.data.map((m) => [m.id, m.status]));
};

async function waitStatus(name, want, url = router.url, headers = {}) {
  for (let i = 0; i < 1000; i++) {
    const st = (await models(url, headers))[name];
    if (st.value === want) return st;
    await sleep(10);
  }
  assert.fail(`${name} never became ${want}`);
}

// The router's children: processes whose parent is the router.
function children() {
  const out = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== router.pid) continue;
      out.push({ pid: Number(d), args: readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0') });
    } catch {}
  }
  return out;
}

const childOf = (file) => children().find((c) => c.args.includes(path.join(DIR, file)));

const REQ = { prompt: 'Once upon a time', n_predict: 8, temperature: 0, return_tokens: true };

async function complete(url, model) {
  const whole = await post(url + '/completion', { ...REQ, model });
  assert.equal(whole.status, 200, whole.text);
  const r = await fetch(url + '/completion', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...REQ, model, stream: true }) });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const streamed = [];
  let events = 0;
  await readSSE(r, (data) => {
    events++;
    streamed.push(...JSON.parse(data).tokens);
  });
  return { tokens: whole.json.tokens, content: whole.json.content, streamed, events };
}

test('the models of --models-dir are listed by their stems, unloaded', { skip }, async () => {
  const r = await get(router.url + '/v1/models');
  assert.deepEqual(r.json.data.map((m) => m.id), NAMES);
  for (const m of r.json.data) {
    assert.equal(m.status.value, 'unloaded');
    assert.ok(m.status.args.includes(path.join(DIR, m.id + '.gguf')), m.status.args.join(' '));
  }
  const props = await get(router.url + '/props');
  assert.equal(props.json.role, 'router');
  assert.equal(props.json.max_instances, 1);
  assert.equal(props.json.models_autoload, true);
  assert.equal(children().length, 0);
});

test('each model completes as a direct server of its file does; --models-max 1 unloads the other', { skip },
  async () => {
    for (const [i, file] of [STORIES, QWEN].entries()) {
      const name = file.replace(/\.gguf$/, '');
      const direct = await startServer(sharedModel(file), FLAGS);
      const want = await complete(direct.url, undefined);
      await direct.stop();
      const got = await complete(router.url, name);
      assert.equal(got.tokens.length, 8);
      assert.deepEqual(got.tokens, want.tokens, name);
      assert.equal(got.content, want.content);
      assert.deepEqual(got.streamed, want.tokens, name + ' streamed');
      assert.ok(got.events > 8, `one event per token, got ${got.events}`);
      const st = await models();
      assert.equal(st[name].value, 'loaded');
      if (i === 1) assert.equal(st.stories260K.value, 'unloaded');
      assert.equal(children().length, 1);
    }
  });

test('chat goes through too, and the answer names the model', { skip }, async () => {
  const r = await post(router.url + '/v1/chat/completions', { model: 'stories260K', max_tokens: 4, temperature: 0,
    messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.model, 'stories260K');
  assert.equal(r.json.usage.completion_tokens, 4);
});

test('unload, load, and the errors of unknown or missing models', { skip }, async () => {
  let r = await post(router.url + '/models/unload', { model: 'stories260K' });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.success, true);
  assert.equal((await models()).stories260K.value, 'unloaded');
  assert.equal(children().length, 0);
  r = await post(router.url + '/models/unload', { model: 'stories260K' });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /not running/);
  r = await post(router.url + '/models/load', { model: 'stories260K' });
  assert.equal(r.json.success, true);
  await waitStatus('stories260K', 'loaded');
  r = await post(router.url + '/models/load', { model: 'stories260K' });
  assert.equal(r.status, 400);
  r = await post(router.url + '/models/load', { model: 'no-such-model' });
  assert.equal(r.status, 404);
  r = await post(router.url + '/completion', { model: 'no-such-model', prompt: 'x' });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /no-such-model.*not found/);
  r = await post(router.url + '/completion', { prompt: 'x' });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /model/);
  r = await post(router.url + '/completion', { model: 7, prompt: 'x' });
  assert.equal(r.status, 400);
  r = await post(router.url + '/completion', '{"model": ');
  assert.equal(r.status, 400);
  r = await post(router.url + '/completion?autoload=false', { model: NAMES[0], prompt: 'x' });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /not loaded/);
});

test('a killed child shows failed; the next request starts it again', { skip }, async () => {
  await waitStatus('stories260K', 'loaded');
  const child = childOf(STORIES);
  assert.ok(child, 'the child of stories260K runs');
  process.kill(child.pid, 'SIGKILL');
  const st = await waitStatus('stories260K', 'failed');
  assert.equal(st.failed, true);
  assert.equal(st.exit_code, 137);
  const again = await complete(router.url, 'stories260K');
  assert.equal(again.tokens.length, 8);
  assert.equal((await models()).stories260K.value, 'loaded');
  assert.notEqual(childOf(STORIES).pid, child.pid);
});

test('--no-models-autoload, the API key (children get it too) and CORS preflights', { skip }, async () => {
  keyed = await startServer(null, ['--models-dir', DIR, '--api-key', 'k1', '--no-models-autoload', ...FLAGS]);
  assert.equal((await get(keyed.url + '/models')).status, 401);
  assert.equal((await post(keyed.url + '/completion', { model: 'stories260K', prompt: 'x' })).status, 401);
  const auth = { authorization: 'Bearer k1' };
  const req = { model: 'stories260K', prompt: 'Once', n_predict: 2 };
  let r = await post(keyed.url + '/completion', req, auth);
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /not loaded/);
  assert.equal((await get(keyed.url + '/props', auth)).json.models_autoload, false);
  assert.equal((await post(keyed.url + '/models/load', { model: 'stories260K' })).status, 401);
  assert.equal((await post(keyed.url + '/models/load', { model: 'stories260K' }, auth)).status, 200);
  await waitStatus('stories260K', 'loaded', keyed.url, auth);
  r = await post(keyed.url + '/completion', req, auth);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.tokens_predicted, 2);
  const pre = await fetch(keyed.url + '/completion', { method: 'OPTIONS', headers: { Origin: 'http://localhost:3000',
    'Access-Control-Request-Method': 'POST' } });
  assert.equal(pre.status, 200);
  assert.equal(pre.headers.get('access-control-allow-origin'), 'http://localhost:3000');
  // With a key and no --cors-origins, llama-server's default: any origin is
  // echoed (the key still guards every call; docs/security.md).
  const other = await fetch(keyed.url + '/models', { headers: { ...auth, Origin: 'http://evil.example' } });
  assert.equal(other.headers.get('access-control-allow-origin'), 'http://evil.example');
  await keyed.stop();
  keyed = null;
});

test('--models-preset: flags per model and for all, a model of its own file, load-on-startup', { skip },
  async () => {
    const ini = path.join(WORK, 'router-preset.ini');
    writeFileSync(ini, `version = 1\n[*]\nc = 512\nparallel = 2\n[stories260K]\nnp = 1\nload-on-startup = true\n` +
      `[tiny]\nmodel = ${path.resolve(sharedModel(STORIES))}\n`);
    // -c on the router's command line wins over the preset's; -np of the model's section over [*].
    preset = await startServer(null, ['--models-dir', DIR, '--models-preset', ini, '-t', '1', '-c', '256']);
    const r = await get(preset.url + '/models');
    assert.deepEqual(r.json.data.map((m) => [m.id, m.source]),
      [[NAMES[0], 'models_dir'], ['stories260K', 'preset'], ['tiny', 'preset']]);
    await waitStatus('stories260K', 'loaded', preset.url);
    const props = await get(preset.url + '/props?model=stories260K');
    assert.equal(props.json.total_slots, 1);
    assert.equal(props.json.polykv.n_ctx_total, 256);
    const tiny = await post(preset.url + '/completion', { ...REQ, model: 'tiny' });
    assert.equal(tiny.status, 200, tiny.text);
    assert.equal((await get(preset.url + '/props?model=tiny')).json.total_slots, 2);
    await preset.stop();
    preset = null;
    writeFileSync(ini, '[stories260K]\nno-such-flag = true\n');
    const bad = spawnSync(BIN, ['serve', '--models-dir', DIR, '--models-preset', ini, '--port', '0'], { encoding: 'utf8' });
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /unknown option --no-such-flag/);
    assert.match(bad.stderr, /model stories260K/);
  });

test('stopping the router stops its children', { skip }, async () => {
  await waitStatus('stories260K', 'loaded');
  const pids = children().map((c) => c.pid);
  assert.equal(pids.length, 1);
  assert.equal(await router.stop(), 0);
  router = null;
  for (const pid of pids) assert.equal(existsSync(`/proc/${pid}`), false, `child ${pid} still runs`);
});
