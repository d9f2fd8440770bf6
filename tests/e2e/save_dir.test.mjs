// save_dir.test.mjs - what others may have put in --slot-save-path and
// --pool-dir, through the real server: FIFOs and symbolic links never block
// or redirect the engine's file I/O; a save's temporary is never a client's
// file.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync, lstatSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sharedModel, skipReason, startServer, post } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const skip = skipReason(STORIES);
const ARGS = ['-c', '1024', '-np', '2', '-t', '1'];

const mkfifo = (p) => assert.equal(spawnSync('mkfifo', [p]).status, 0, 'mkfifo ' + p);
const fill = (url) => post(url + '/completion', { prompt: 'Once upon a time', n_predict: 4, temperature: 0,
  id_slot: 0 });

test('FIFOs and symbolic links in the save directories: refused, never waited on or followed', { skip },
  async () => {
    const slots = mkdtempSync(path.join(tmpdir(), 'polykv-slots-'));
    const pools = mkdtempSync(path.join(tmpdir(), 'polykv-pools-'));
    const outside = mkdtempSync(path.join(tmpdir(), 'polykv-outside-'));
    mkfifo(path.join(pools, 'pool-1.pkv'));     // the start-up scan reads pool files
    mkfifo(path.join(slots, 'fifo'));
    const victim = path.join(outside, 'victim');
    writeFileSync(victim, 'keep');
    symlinkSync(victim, path.join(slots, 'x.tmp'));
    symlinkSync(victim, path.join(slots, 'ln'));
    // Before: the start never ended (503 "Loading model" for ever).
    const s = await startServer(sharedModel(STORIES), [...ARGS, '--slot-save-path', slots, '--pool-dir', pools]);
    try {
      assert.match(s.log(), /pool-1\.pkv refused: not a regular file/);
      let r = await post(s.url + '/slots/0?action=restore', { filename: 'fifo' });
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.message, /not a regular file/);
      r = await post(s.url + '/slots/0?action=restore', { filename: 'ln' });
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.message, /symbolic link/);
      assert.equal((await fill(s.url)).status, 200);
      r = await post(s.url + '/slots/0?action=save', { filename: 'x' });
      assert.equal(r.status, 200, r.text);
      assert.equal(readFileSync(victim, 'utf8'), 'keep');
      assert.ok(lstatSync(path.join(slots, 'x')).isFile());
      r = await post(s.url + '/slots/1?action=restore', { filename: 'x' });
      assert.equal(r.status, 200, r.text);
    } finally {
      await s.stop();
    }
  });

test('saving a slot as NAME leaves a client\'s NAME.tmp alone, and no temporary behind', { skip }, async () => {
  const slots = mkdtempSync(path.join(tmpdir(), 'polykv-slots-'));
  const s = await startServer(sharedModel(STORIES), [...ARGS, '--slot-save-path', slots]);
  try {
    assert.equal((await fill(s.url)).status, 200);
    let r = await post(s.url + '/slots/0?action=save', { filename: 'keep.tmp' });
    assert.equal(r.status, 200, r.text);
    const theirs = readFileSync(path.join(slots, 'keep.tmp'));
    r = await post(s.url + '/slots/0?action=save', { filename: 'keep' });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(readFileSync(path.join(slots, 'keep.tmp')), theirs);   // before: gone
    assert.deepEqual(readdirSync(slots).sort(), ['keep', 'keep.tmp']);
    r = await post(s.url + '/slots/1?action=restore', { filename: 'keep.tmp' });
    assert.equal(r.status, 200, r.text);
  } finally {
      await s.stop();
    }
  });
