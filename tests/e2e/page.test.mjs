// page.test.mjs - the monitor page at / (docs/monitor.md) in a real browser:
// playwright-core drives Debian's Chromium headless against a real `polykv
// serve`.  Each test saves a screenshot under build/page/ (docs/monitor.md
// shows them).  Skips with its reason when Chromium or the model is absent.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import http from 'node:http';
import { sharedModel, skipReason, startServer, post, get, words, readSSE, sleep } from './lib.mjs';

const QWEN = 'rand-qwen2-qwen2vocab-e64-l2-F16.gguf';
const CHROMIUM = process.env.POLYKV_CHROMIUM || '/usr/bin/chromium';
const SHOTS = 'build/page';
const skip = skipReason(QWEN) || (!existsSync(CHROMIUM) && `${CHROMIUM} absent (Debian's chromium: make deps)`);

let srv, browser, page;
const consoleErrors = [];

before(async () => {
  if (skip) return;
  const { chromium } = await import('playwright-core');
  mkdirSync(SHOTS, { recursive: true });
  srv = await startServer(sharedModel(QWEN), ['-c', '8192', '-np', '4', '-t', '2']);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
});
after(async () => {
  if (browser) await browser.close();
  if (srv) assert.equal(await srv.stop(), 0);
});

const shot = (name, locator) => (locator || page).screenshot({ path: `${SHOTS}/${name}.png` });

// Polls fn until it returns a truthy value or ms pass; returns the value.
async function until(fn, ms, what) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() - t0 > ms) assert.fail(`not within ${ms} ms: ${what}`);
    await sleep(25);
  }
}

const base = 'You are a careful agent. ' + words(60, 7);

test('page: loads from the binary, small, live, no console error', { skip }, async () => {
  const t0 = Date.now();
  await page.goto(srv.url + '/');
  await page.waitForSelector('#live.on', { timeout: 5000 });
  const paint = await page.evaluate(() =>
    performance.getEntriesByType('paint').find((e) => e.name === 'first-contentful-paint')?.startTime);
  console.log(`# page: first contentful paint ${paint?.toFixed(1)} ms, live after ${Date.now() - t0} ms`);
  assert.ok(paint > 0 && paint < 1000, `first contentful paint ${paint} ms`);
  // Every asset is served gzip-compressed, well under 200 KiB together
  // (node:http: fetch would inflate the body).
  const raw = (p) => new Promise((resolve, reject) => {
    http.get(srv.url + p, { headers: { 'accept-encoding': 'gzip' } }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode, enc: res.headers['content-encoding'], body: Buffer.concat(parts) }));
    }).on('error', reject);
  });
  const html = await raw('/');
  assert.equal(html.enc, 'gzip');
  const text = gunzipSync(html.body).toString();
  let gz = 0;
  for (const p of ['/', ...text.match(/\/assets\/[\w.-]+/g)]) {
    const r = await raw(p);
    assert.equal(r.status, 200, p);
    assert.equal(r.enc, 'gzip', p);
    gz += r.body.length;
  }
  console.log(`# page: assets ${gz} bytes gzip`);
  assert.ok(gz < 200 * 1024, `${gz} bytes`);
  assert.equal((await get(srv.url + '/assets/none.js')).json.error.code, 404);
  await sleep(1200);      // a few SSE events and polls
  assert.deepEqual(consoleErrors, []);
  // no layout shift when the data came in
  const cls = await page.evaluate(() => new Promise((resolve) => {
    let sum = 0;
    new PerformanceObserver((l) => { for (const e of l.getEntries()) if (!e.hadRecentInput) sum += e.value; })
      .observe({ type: 'layout-shift', buffered: true });
    setTimeout(() => resolve(sum), 100);
  }));
  console.log(`# page: cumulative layout shift ${cls.toFixed(4)}`);
  assert.ok(cls < 0.001, `cumulative layout shift ${cls}`);
  await shot('page');
});

test('page: a pool and its fork appear in the tree within 1 s; a click shows capacity and policy', { skip }, async () => {
  let r = await post(srv.url + '/polykv/pools', { prompt: base });
  assert.equal(r.status, 201, r.text);
  const root = r.json.pool_id;
  let t = Date.now();
  await page.waitForSelector(`#pool-tree li[data-pool="${root}"]`, { timeout: 1000 });
  const rootMs = Date.now() - t;
  r = await post(srv.url + `/polykv/pools/${root}/fork`, { prompt: base + ' ' + words(20, 9) });
  assert.equal(r.status, 201, r.text);
  const fork = r.json.pool_id;
  t = Date.now();
  await page.waitForSelector(`#pool-tree li[data-pool="${root}"] > ul li[data-pool="${fork}"]`, { timeout: 1000 });
  console.log(`# page: pool shown after ${rootMs} ms, fork after ${Date.now() - t} ms`);
  await page.click(`#pool-tree button[data-pool="${fork}"]`);
  const cap = (await get(srv.url + `/polykv/pools/${fork}/capacity`)).json;
  await page.waitForFunction((reason) => document.querySelector('#pool-detail [data-field=reason]')?.textContent === reason,
                             cap.reason, { timeout: 2000 });
  assert.match(await page.textContent('#pool-detail'), /Admission policy/);
  // the fork's prompt extends the root's: D is the root's whole prefix
  assert.equal(r.json.branch_pos, (await get(srv.url + `/polykv/pools/${root}`)).json.pools.find((p) => p.pool_id === root).prefix_len);
  assert.match(await page.textContent(`#pool-tree button[data-pool="${fork}"]`), new RegExp(`extend of #${root}`));
  // keyboard: the pool buttons are reachable and activate with Enter
  await page.focus(`#pool-tree button[data-pool="${root}"]`);
  await page.keyboard.press('Enter');
  await page.waitForSelector(`#pool-tree button[data-pool="${root}"][aria-selected="true"]`, { timeout: 2000 });
  await shot('pools', page.locator('#pools'));
});

test('page: a streaming session shows a rising sparkline and leaves "decoding" when done', { skip }, async () => {
  const resp = await fetch(srv.url + '/completion', {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-session-id': 'watched-agent' },
    body: JSON.stringify({ prompt: base + ' go', n_predict: 1200, ignore_eos: true, stream: true, temperature: 0 }),
  });
  assert.equal(resp.status, 200);
  const done = readSSE(resp, () => {});
  const row = 'tr[data-key="s:watched-agent"]';
  await page.waitForSelector(`${row}[data-state="decode"]`, { timeout: 3000 });
  const samples = [];
  for (let i = 0; i < 4; i++) {
    await sleep(500);
    samples.push(await page.$eval(`${row} canvas`, (c) => ({ n: Number(c.dataset.points), tps: Number(c.dataset.last) })));
  }
  await shot('sessions', page.locator('#sessions'));
  await shot('throughput', page.locator('#throughput'));
  assert.ok(samples[3].n > samples[0].n, JSON.stringify(samples));
  assert.ok(samples.every((s) => s.tps > 0), JSON.stringify(samples));
  await done;
  await page.waitForSelector(`${row}[data-state="done"]`, { timeout: 3000 });
  assert.equal(await page.$(`${row}[data-state="decode"]`), null);
});

test('page: the KV bar\'s owner segments add up to the server\'s used cells', { skip }, async () => {
  // quiet now: pools and the finished session's history hold cells
  const cache = (await get(srv.url + '/polykv/cache')).json;
  assert.ok(cache.kv_used > 0);
  const bar = await until(async () => {
    const b = await page.$eval('#kv-bar', (el) => ({
      used: Number(el.dataset.used), total: Number(el.dataset.total),
      segs: [...el.children].map((d) => ({ cls: d.className, cells: Number(d.dataset.cells) })),
    }));
    return b.used === cache.kv_used ? b : null;
  }, 3000, `the bar shows ${cache.kv_used} used cells`);
  const owned = bar.segs.filter((s) => s.cls !== 'free').reduce((a, s) => a + s.cells, 0);
  assert.equal(owned, cache.kv_used, JSON.stringify(bar));
  assert.equal(owned + bar.segs.find((s) => s.cls === 'free').cells, cache.kv_total);
  assert.ok(bar.segs.some((s) => s.cls === 'pool') && bar.segs.some((s) => s.cls === 'slot'), JSON.stringify(bar));
  await shot('kv', page.locator('#kv'));
});

test('page: a request refused by an enforced pool appears in the events log with its reason', { skip }, async () => {
  let r = await post(srv.url + '/polykv/pools', { prompt: 'Enforced pool. ' + words(40, 11) });
  assert.equal(r.status, 201, r.text);
  const pool = r.json.pool_id;
  r = await post(srv.url + `/polykv/pools/${pool}/admission`,
                 { target_tps_per_session: 100000, mode: 'enforced', settle_tokens: 0, settle_max_ms: 0 });
  assert.equal(r.status, 200, r.text);
  // Two new sessions together: the first (guaranteed) decodes, the second
  // is refused while it does.
  const one = (id) => fetch(srv.url + '/completion', {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-session-id': id },
    body: JSON.stringify({ prompt: 'Enforced pool. ' + words(40, 11) + ' ' + id, pool_id: pool, n_predict: 600,
                           ignore_eos: true, stream: true }),
  });
  const first = await one('enf-a');
  assert.equal(first.status, 200);
  let n = 0, warmed;
  const warm = new Promise((res) => { warmed = res; });
  const firstDone = readSSE(first, () => { if (++n === 12) warmed(); });
  await warm;
  const second = await one('enf-b');
  const refusal = await second.text();
  assert.equal(second.status, 429, refusal);
  const reason = JSON.parse(refusal).capacity.reason;
  assert.ok(reason, refusal);
  await firstDone;
  await page.fill('#ev-text', 'reject');
  const row = await page.waitForSelector(`#ev-body tr[data-decision="reject"]:not([hidden])`, { timeout: 2000 });
  const text = await row.textContent();
  assert.ok(text.includes(reason) && text.includes(`pool #${pool}`), text);
  // the filter hides the rest
  const visible = await page.$$eval('#ev-body tr:not([hidden])', (rows) => rows.map((x) => x.dataset.text));
  assert.ok(visible.length >= 1 && visible.every((t) => t.includes('reject')), JSON.stringify(visible));
  await shot('events', page.locator('#events'));
  await page.fill('#ev-text', '');
  await page.uncheck('#ev-filters input[value="placement"]');
  assert.equal(await page.$('#ev-body tr[data-kind="placement"]:not([hidden])'), null);
  await page.check('#ev-filters input[value="placement"]');
  await shot('throughput-decisions', page.locator('#throughput'));
});

test('page: the chat box streams a reply, attached to a pool', { skip }, async () => {
  const pools = (await get(srv.url + '/polykv/pools')).json.pools;
  const pool = pools.find((p) => !p.admission.set).pool_id;
  await page.selectOption('#chat-pool', String(pool));
  await page.fill('#chat-max', '48');
  await page.fill('#chat-input', 'Tell me about the cache.');
  // count the separate updates of the reply as it streams in
  await page.evaluate(() => {
    window.__updates = 0;
    new MutationObserver((recs) => { window.__updates += recs.length; })
      .observe(document.getElementById('chat-log'), { childList: true, subtree: true, characterData: true });
  });
  await page.click('#chat-send');
  await page.waitForFunction(() => /chunks/.test(document.getElementById('chat-status').textContent), null,
                             { timeout: 10000 });
  const reply = await page.$eval('#chat-log .msg.assistant', (p) => ({ text: p.textContent, chunks: Number(p.dataset.chunks) }));
  const updates = await page.evaluate(() => window.__updates);
  assert.ok(reply.text.length > 0 && reply.chunks >= 2 && updates >= 3, JSON.stringify({ reply, updates }));
  assert.match(await page.textContent('#chat-status'), new RegExp(`pool #${pool}`));
  await shot('chat', page.locator('#chat'));
  // sessions, pools, events and the chat came and went: still no shift
  const shifts = await page.evaluate(() => new Promise((resolve) => {
    const out = [];
    const where = (n) => !n ? '?' : n.id ? '#' + n.id : n.nodeName + (n.className ? '.' + String(n.className).split(' ')[0] : '') +
      (n.parentElement ? ' in ' + where(n.parentElement) : '');
    const rect = (r) => `${Math.round(r.x)},${Math.round(r.y)} ${Math.round(r.width)}x${Math.round(r.height)}`;
    new PerformanceObserver((l) => {
      for (const e of l.getEntries()) if (!e.hadRecentInput)
        out.push({ value: e.value, at: Math.round(e.startTime),
                   sources: (e.sources || []).map((s) => `${where(s.node)}: ${rect(s.previousRect)} -> ${rect(s.currentRect)}`) });
    }).observe({ type: 'layout-shift', buffered: true });
    setTimeout(() => resolve(out), 100);
  }));
  const cls = shifts.reduce((a, e) => a + e.value, 0);
  console.log(`# page: cumulative layout shift after every view updated ${cls.toFixed(4)}`);
  assert.ok(cls < 0.01, `cumulative layout shift ${cls}: ${JSON.stringify(shifts, null, 1)}`);
  await page.click('#theme');
  assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
  await shot('page-dark');
  await page.setViewportSize({ width: 390, height: 844 });
  await sleep(300);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page is ${overflow} px wider than a phone`);
  await shot('phone');
  assert.deepEqual(consoleErrors, []);
});

test('page: with --api-key, the key is typed once and kept for the tab', { skip }, async () => {
  const keyed = await startServer(sharedModel(QWEN), ['-c', '2048', '-np', '2', '-t', '1', '--api-key', 'sekrit']);
  const p2 = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  p2.on('pageerror', (e) => errors.push(String(e)));
  try {
    await p2.goto(keyed.url + '/');
    await p2.waitForSelector('#key-needed:not([hidden])', { timeout: 3000 });
    await p2.fill('#key', 'sekrit');
    await p2.press('#key', 'Enter');
    await p2.waitForSelector('#live.on', { timeout: 3000 });
    await p2.waitForSelector('#key-needed[hidden]', { state: 'attached', timeout: 3000 });
    assert.equal(await p2.evaluate(() => sessionStorage.getItem('polykv.apikey')), 'sekrit');
    await p2.reload();
    await p2.waitForSelector('#live.on', { timeout: 3000 });
    assert.equal(await p2.$eval('#key-needed', (e) => e.hidden), true);
    assert.deepEqual(errors, []);
    await p2.screenshot({ path: `${SHOTS}/api-key.png` });
  } finally {
    await p2.close();
    assert.equal(await keyed.stop(), 0);
  }
});
