// soak.test.mjs - the short version of bench/soak.mjs (20 s instead of 2
// minutes): 8 streaming clients on 4 slots with random disconnects and bad
// requests; every completed response well formed, no slot leaked, the
// server alive and its memory steady (within 10%: the 5 s after a 10 s
// warm-up is too short for the 5% of the 2-minute run; under ASan the
// check is off, its quarantine grows the resident size by design).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { BIN, sharedModel, skipReason } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const skip = skipReason(STORIES);

test('soak: 8 clients, random disconnects, 20 s', { skip, timeout: 120000 }, async () => {
  const args = ['bench/soak.mjs', '--model', sharedModel(STORIES), '--bin', BIN, '--duration', '20', '--clients', '8',
    '--slots', '4', '--mem-tolerance', '0.10'];
  if (process.env.ASAN_OPTIONS !== undefined) args.push('--no-memcheck');
  const { stdout } = await promisify(execFile)(process.execPath, args).catch((e) => {
    assert.fail(`soak failed:\n${e.stdout}\n${e.stderr}`);
  });
  console.log(stdout.trim().split('\n').map((l) => `# ${l}`).join('\n'));
  assert.match(stdout, /^soak: ok:/m);
});
