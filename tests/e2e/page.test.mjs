// page.test.mjs - the monitor page at / (docs/monitor.md) in a real browser:
// playwright-core drives Debian's Chromium headless against a real `polykv
// serve`.  Each test saves a screenshot under build/page/ (docs/monitor.md
// shows them).  Skips with its reason when Chromium or the model is absent.
//
// The tests wait for what the page has done (polls answered, stream events
// read, elements shown), counted by a script added before the page's own
// (NET below), not for time: on a loaded machine a fixed pause or a 1 s
// bound measures the machine.  Every wait has a deadline (HANG_MS) that only
// catches a page that never gets there; the times are logged.

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
const HANG_MS = 30000;

// Runs in the page before its scripts: counts the polls of /polykv/pools
// started and answered, and the SSE events the page decoded (its stream
// and the chat read their bodies through TextDecoder).
const NET = () => {
  window.__net = { poolsStarted: 0, poolsAnswered: 0, events: 0 };
  const f = window.fetch;
  window.fetch = function (input, init) {
    const pools = new URL(String(input instanceof Request ? input.url : input), location.href).pathname === '/polykv/pools';
    if (pools) window.__net.poolsStarted++;
    const p = f.call(this, input, init);
    if (pools) p.then(() => window.__net.poolsAnswered++, () => {});
    return p;
  };
  const decode = TextDecoder.prototype.decode;
  TextDecoder.prototype.decode = function (...args) {
    const t = decode.apply(this, args);
    window.__net.events += (t.match(/^data: /gm) || []).length;
    return t;
  };
};
const net = (p = page) => p.evaluate(() => ({ ...window.__net }));

before(async () => {
  if (skip) return;
  const { chromium } = await import('playwright-core');
  mkdirSync(SHOTS, { recursive: true });
  srv = await startServer(sharedModel(QWEN), ['-c', '16384', '-np', '4', '-t', '2']);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  await page.addInitScript(NET);
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
});
after(async () => {
  if (browser) await browser.close();
  if (srv) assert.equal(await srv.stop(), 0);
});

const shot = (name, locator) => (locator || page).screenshot({ path: `${SHOTS}/${name}.png` });

// Polls fn until it returns a truthy value or ms pass; returns the value.
async function until(fn, ms = HANG_MS, what = '') {
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
  await page.waitForSelector('#live.on', { timeout: HANG_MS });
  // The browser records the paint entry after the paint itself: on a
  // loaded machine it may come after the page went live.
  const paint = await until(() => page.evaluate(() =>
    performance.getEntriesByType('paint').find((e) => e.name === 'first-contentful-paint')?.startTime),
                            HANG_MS, 'the first contentful paint entry');
  console.log(`# page: first contentful paint ${paint.toFixed(1)} ms, live after ${Date.now() - t0} ms`);
  assert.ok(paint > 0, `first contentful paint ${paint} ms`);
  // The page paints its content before any script or data: with scripts
  // off (no request to the server's routes) it still has a contentful
  // paint.  A page that drew itself from its data would have none.  The
  // time itself is logged above (docs/monitor.md: ~0.2 s); a bound in ms
  // would measure the machine.
  const bare = await browser.newContext({ javaScriptEnabled: false });
  try {
    const p0 = await bare.newPage();
    await p0.goto(srv.url + '/');
    const seen = await until(() => p0.evaluate(() => {
      const fcp = performance.getEntriesByType('paint').some((e) => e.name === 'first-contentful-paint');
      return fcp && performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname);
    }), HANG_MS, 'a contentful paint with scripts off');
    assert.ok(!seen.some((x) => !x.startsWith('/assets/')), `with scripts off it asked for ${seen}`);
  } finally {
    await bare.close();
  }
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
  const n0 = await net();   // a few stream events and answered polls
  await until(async () => { const n = await net(); return n.events >= n0.events + 2 && n.poolsAnswered >= n0.poolsAnswered + 2; },
              HANG_MS, 'two stream events and two polls');
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

// Called once the server has made what sel shows: resolves when sel is in
// the page, with the polls of /polykv/pools the page had started since
// (counted in the page, so no poll can slip in between the two reads) and
// the wall time.  The poll in flight when it was made may have missed it;
// the one after it may not: a page that shows it no later than that one
// answers with at most 1, whatever the machine's speed.
async function shownAfterPolls(sel) {
  const t0 = Date.now();
  const polls = await page.evaluate(([sel, ms]) => new Promise((resolve) => {
    const start = window.__net.poolsStarted;
    const look = () => document.querySelector(sel) && (resolve(window.__net.poolsStarted - start), true);
    if (look()) return;
    const obs = new MutationObserver(() => look() && obs.disconnect());
    obs.observe(document.body, { childList: true, subtree: true, attributes: true });
    setTimeout(() => (obs.disconnect(), resolve(-1)), ms);
  }), [sel, HANG_MS]);
  assert.ok(polls >= 0, `${sel} not shown within ${HANG_MS} ms`);
  return { polls, ms: Date.now() - t0 };
}

test('page: a pool and its fork appear in the tree at the first poll after they are made; a click shows capacity and policy', { skip }, async () => {
  let r = await post(srv.url + '/polykv/pools', { prompt: base });
  assert.equal(r.status, 201, r.text);
  const root = r.json.pool_id;
  const shownRoot = await shownAfterPolls(`#pool-tree li[data-pool="${root}"]`);
  r = await post(srv.url + `/polykv/pools/${root}/fork`, { prompt: base + ' ' + words(20, 9) });
  assert.equal(r.status, 201, r.text);
  const fork = r.json.pool_id;
  const shownFork = await shownAfterPolls(`#pool-tree li[data-pool="${root}"] > ul li[data-pool="${fork}"]`);
  console.log(`# page: pool shown after ${shownRoot.ms} ms (${shownRoot.polls} polls), ` +
              `fork after ${shownFork.ms} ms (${shownFork.polls} polls)`);
  assert.ok(shownRoot.polls <= 1 && shownFork.polls <= 1, JSON.stringify({ shownRoot, shownFork }));
  await page.click(`#pool-tree button[data-pool="${fork}"]`);
  const cap = (await get(srv.url + `/polykv/pools/${fork}/capacity`)).json;
  await page.waitForFunction((reason) => document.querySelector('#pool-detail [data-field=reason]')?.textContent === reason,
                             cap.reason, { timeout: HANG_MS });
  assert.match(await page.textContent('#pool-detail'), /Admission policy/);
  // the fork's prompt extends the root's: D is the root's whole prefix
  assert.equal(r.json.branch_pos, (await get(srv.url + `/polykv/pools/${root}`)).json.pools.find((p) => p.pool_id === root).prefix_len);
  assert.match(await page.textContent(`#pool-tree button[data-pool="${fork}"]`), new RegExp(`extend of #${root}`));
  // keyboard: the pool buttons are reachable and activate with Enter
  await page.focus(`#pool-tree button[data-pool="${root}"]`);
  await page.keyboard.press('Enter');
  await page.waitForSelector(`#pool-tree button[data-pool="${root}"][aria-selected="true"]`, { timeout: HANG_MS });
  await shot('pools', page.locator('#pools'));
});

test('page: a streaming session shows a rising sparkline and leaves "decoding" when done', { skip }, async () => {
  const resp = await fetch(srv.url + '/completion', {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-session-id': 'watched-agent' },
    body: JSON.stringify({ prompt: base + ' go', n_predict: 3800, ignore_eos: true, stream: true, temperature: 0 }),
  });
  assert.equal(resp.status, 200);
  const done = readSSE(resp, () => {});
  const row = 'tr[data-key="s:watched-agent"]';
  await page.waitForSelector(`${row}[data-state="decode"]`, { timeout: HANG_MS });
  // Read at each stream event the page decodes, until the sparkline has
  // grown by two points: rising while the session decodes, each point a
  // speed.  (Its 3,800 tokens, nearly its slot's 4,096 cells, take 3.8 s
  // at this model's 1,000 tok/s on the 2-core EPYC, where 1,200 ended
  // before a third point at 500 ms each: it is still decoding at the end.)
  const sample = () => page.$eval(`${row} canvas`, (c) => ({ n: Number(c.dataset.points), tps: Number(c.dataset.last) }));
  const samples = [await sample()];
  await until(async () => {
    const ev = (await net()).events;
    await page.waitForFunction((e) => window.__net.events > e, ev, { timeout: HANG_MS });
    samples.push(await sample());
    return samples.at(-1).n >= samples[0].n + 2;
  }, HANG_MS, 'the sparkline grows by two points');
  assert.equal(await page.$eval(row, (r) => r.dataset.state), 'decode', 'still decoding while it rose');
  await shot('sessions', page.locator('#sessions'));
  await shot('throughput', page.locator('#throughput'));
  assert.ok(samples.every((s) => s.tps > 0), JSON.stringify(samples));
  await done;
  await page.waitForSelector(`${row}[data-state="done"]`, { timeout: HANG_MS });
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
  }, HANG_MS, `the bar shows ${cache.kv_used} used cells`);
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
  const row = await page.waitForSelector(`#ev-body tr[data-decision="reject"]:not([hidden])`, { timeout: HANG_MS });
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
                             { timeout: HANG_MS });
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
  // The charts follow the width in their resize handlers, a frame or more
  // later: wait until the page fits (the deadline fails a page that never does).
  const fits = await page.waitForFunction(() => document.documentElement.scrollWidth <= window.innerWidth, null,
                                          { timeout: HANG_MS }).then(() => true, () => false);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(fits && overflow <= 0, `the page is ${overflow} px wider than a phone`);
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
    await p2.waitForSelector('#key-needed:not([hidden])', { timeout: HANG_MS });
    await p2.fill('#key', 'sekrit');
    await p2.press('#key', 'Enter');
    await p2.waitForSelector('#live.on', { timeout: HANG_MS });
    await p2.waitForSelector('#key-needed[hidden]', { state: 'attached', timeout: HANG_MS });
    assert.equal(await p2.evaluate(() => sessionStorage.getItem('polykv.apikey')), 'sekrit');
    await p2.reload();
    await p2.waitForSelector('#live.on', { timeout: HANG_MS });
    assert.equal(await p2.$eval('#key-needed', (e) => e.hidden), true);
    assert.deepEqual(errors, []);
    await p2.screenshot({ path: `${SHOTS}/api-key.png` });
  } finally {
    await p2.close();
    assert.equal(await keyed.stop(), 0);
  }
});
