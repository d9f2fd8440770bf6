// load.test.mjs - the 60-second version of bench/load.mjs (600 s in `make
// bench`): 64 clients mixing streamed and whole completions, pool
// operations, capacity polls and disconnects; zero 5xx, memory steady
// after warm-up (10%: 60 s is short for the 5% of the long run; off under
// the sanitizers, whose allocators grow the resident size by design), the
// shared prefix intact, nothing left in the KV cache at the end.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { BIN, sharedModel, skipReason } from './lib.mjs';

const STORIES = 'stories260K.gguf';
const skip = skipReason(STORIES);

test('load: 64 clients, pools, capacity polls, disconnects, 60 s', { skip, timeout: 300000 }, async () => {
  const args = ['bench/load.mjs', '--model', sharedModel(STORIES), '--bin', BIN, '--duration', '60', '--clients', '64',
    '--mem-tolerance', '0.10'];
  if (process.env.ASAN_OPTIONS !== undefined || process.env.TSAN_OPTIONS !== undefined) args.push('--no-memcheck');
  const { stdout } = await promisify(execFile)(process.execPath, args, { maxBuffer: 1 << 24 }).catch((e) => {
    assert.fail(`load failed:\n${e.stdout}\n${e.stderr}`);
  });
  console.log(stdout.trim().split('\n').map((l) => `# ${l}`).join('\n'));
  assert.match(stdout, /^load: ok$/m);
});
