// page_chart.test.mjs - the monitor page's throughput chart on a fresh
// server (docs/monitor.md) in headless Chromium: its time axis spans the
// last minutes, not years (uPlot's own range pads a lone point by its
// magnitude, and a Unix time is 1.8e9).  The chart writes the span it drew
// on its element (data-x-min, data-x-max, in s).  Skips with its reason when
// Chromium or the model is absent.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { sharedModel, skipReason, startServer, post, sleep } from './lib.mjs';

const MODEL = 'stories260K.gguf';
const CHROMIUM = process.env.POLYKV_CHROMIUM || '/usr/bin/chromium';
const skip = skipReason(MODEL) || (!existsSync(CHROMIUM) && `${CHROMIUM} absent (Debian's chromium: make deps)`);

let srv, browser, page;
before(async () => {
  if (skip) return;
  const { chromium } = await import('playwright-core');
  srv = await startServer(sharedModel(MODEL), ['-c', '1024', '-np', '2', '-t', '1']);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
});
after(async () => {
  if (browser) await browser.close();
  if (srv) assert.equal(await srv.stop(), 0);
});

const span = () => page.evaluate(() => {
  const d = document.getElementById('tp-chart').dataset;
  return d.xMin === undefined ? null : { min: Number(d.xMin), max: Number(d.xMax) };
});

test('the throughput chart of a fresh server spans the last minutes', { skip, timeout: 60000 }, async () => {
  await page.goto(srv.url + '/');
  await page.waitForSelector('#live.on', { timeout: 10000 });
  let s = null;
  for (let i = 0; !s && i < 200; i++) {
    s = await span();
    if (!s) await sleep(50);
  }
  assert.ok(s, 'the chart never drew a time axis');
  const check = (x, when) => {
    const now = Date.now() / 1000, width = x.max - x.min;
    assert.ok(Math.abs(x.max - now) < 30, `${when}: the axis ends at ${new Date(x.max * 1000).toISOString()}`);
    assert.ok(width >= 120 && width <= 600, `${when}: the axis spans ${width.toFixed(0)} s, not the last minutes`);
  };
  check(s, 'one point');
  const r = await post(srv.url + '/completion', { prompt: 'Once', n_predict: 32 });
  assert.equal(r.status, 200, r.text);
  await sleep(1500);                                /* more points, one of them decoding */
  check(await span(), 'after a completion');
});
