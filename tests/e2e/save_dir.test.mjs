// save_dir.test.mjs - what others may have put in --slot-save-path and
// --pool-dir, through the real server: FIFOs and symbolic links never block
// or redirect the engine's file I/O; a save's temporary is never a client's
// file; --slot-save-path and --pool-dir apart, and no slot file named as a
// pool's.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync, lstatSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BIN, sharedModel, skipReason, startServer, post } from './lib.mjs';

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

test('--slot-save-path and --pool-dir: one directory, or one inside the other, stops the start', { skip },
  async () => {
    const top = mkdtempSync(path.join(tmpdir(), 'polykv-dirs-'));
    mkdirSync(path.join(top, 'inner'));
    symlinkSync(top, path.join(top, 'alias'));
    const cases = [[top, top], [top, path.join(top, 'inner')], [path.join(top, 'inner'), top],
      [path.join(top, 'alias'), path.join(top, 'inner', '..')]];
    for (const [slots, pools] of cases) {
      const r = spawnSync(BIN, ['serve', '-m', sharedModel(STORIES), '--port', '0', ...ARGS, '--slot-save-path', slots,
        '--pool-dir', pools], { encoding: 'utf8', timeout: 10000 });
      assert.ok(r.status > 0, `${slots} ${pools}: exit ${r.status} ${r.stderr}`);
      assert.match(r.stderr, /--slot-save-path .* and --pool-dir .* overlap/);
    }
    // Apart, even with a shared prefix of their names: it starts.
    mkdirSync(path.join(top, 'inner2'));
    const s = await startServer(sharedModel(STORIES), [...ARGS, '--slot-save-path', path.join(top, 'inner'),
      '--pool-dir', path.join(top, 'inner2')]);
    try {
      assert.equal((await fill(s.url)).status, 200);
      for (const filename of ['pool-1.pkv', 'pool-12.pkv.tmp']) {
        for (const action of ['save', 'restore']) {
          const r = await post(s.url + `/slots/0?action=${action}`, { filename });
          assert.equal(r.status, 400, `${action} ${filename}: ${r.text}`);
          assert.match(r.json.error.message, /--pool-dir's files/);
        }
      }
      assert.equal((await post(s.url + '/slots/0?action=save', { filename: 'pool-1.pkv.bak' })).status, 200);
    } finally {
      await s.stop();
    }
  });

// Bytes of the regular files in dir (what --slot-save-max-bytes bounds).
const dirBytes = (dir) => readdirSync(dir).map((n) => lstatSync(path.join(dir, n)))
  .filter((st) => st.isFile()).reduce((a, st) => a + st.size, 0);

test('--slot-save-max-bytes: a save past the bound is a 507 that writes nothing; a replacement still fits',
  { skip }, async () => {
    for (const bad of ['-1', '12X', '8GB', '', '20000000T']) {
      const r = spawnSync(BIN, ['serve', '-m', sharedModel(STORIES), '--port', '0', ...ARGS,
        '--slot-save-max-bytes', bad], { encoding: 'utf8', timeout: 10000 });
      assert.ok(r.status > 0, `'${bad}': exit ${r.status} ${r.stderr}`);
      assert.match(r.stderr, /--slot-save-max-bytes: .* is not a byte count/);
    }
    const slots = mkdtempSync(path.join(tmpdir(), 'polykv-slots-'));
    const bound = 64 * 1024;
    // Before: 200 saves of 200 names, every one written (195 MB in 0.7 s in the probe).
    const s = await startServer(sharedModel(STORIES), [...ARGS, '--slot-save-path', slots,
      '--slot-save-max-bytes', '64K']);
    try {
      assert.equal((await fill(s.url)).status, 200);
      const save = (filename) => post(s.url + '/slots/0?action=save', { filename });
      let r = await save('a');
      assert.equal(r.status, 200, r.text);
      const one = r.json.n_written;
      assert.ok(one > 0 && 3 * one < bound, `a file of ${one} bytes`);
      assert.equal((await save('b')).status, 200);
      // A file of the client's size to bring the third save exactly to the bound.
      writeFileSync(path.join(slots, 'filler'), Buffer.alloc(bound - 3 * one));
      assert.equal((await save('c')).status, 200);
      assert.equal(dirBytes(slots), bound);
      for (let i = 0; i < 200; i++) {
        r = await save(`x${i}`);
        assert.equal(r.status, 507, r.text);
      }
      assert.equal(r.json.error.code, 507);
      assert.match(r.json.error.message, /^Unable to save slot: a save of \d+ bytes .* over its bound of 65536/);
      assert.equal(dirBytes(slots), bound);
      assert.deepEqual(readdirSync(slots).sort(), ['a', 'b', 'c', 'filler']);
      // At the bound, a save that replaces a file of its size: 200, and it restores.
      r = await save('b');
      assert.equal(r.status, 200, r.text);
      assert.equal(dirBytes(slots), bound);
      r = await post(s.url + '/slots/1?action=restore', { filename: 'b' });
      assert.equal(r.status, 200, r.text);
      const again = await post(s.url + '/slots/0?action=restore', { filename: 'a' });
      assert.equal(r.json.n_restored, again.json.n_restored);
    } finally {
      await s.stop();
    }
  });
