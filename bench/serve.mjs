// bench/serve.mjs - a `polykv serve` for a benchmark that starts its own
// (bench/load.mjs, bench/soak.mjs): spawned with the caller's arguments
// (which pick port 0), its stderr kept (the last 500 KB or more), ready once
// /health answers 200.  A later exit is reported to onExit with the log's
// tail; stop() sends SIGTERM and resolves to the exit status (or signal).
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* Resident set of process pid in KiB (/proc), 0 when it cannot be read. */
// Resident memory of pid in KiB: VmRSS (everything), or with 'RssAnon'
// the anonymous part only (heap, caches, the copied weights: what a leak
// grows; file-backed pages, which the kernel reclaims when another
// process needs memory, are left out).  0 when the process is gone.
export function rssKiB(pid, field = 'VmRSS') {
  try {
    return Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(new RegExp(`${field}:\\s+(\\d+)`))[1]);
  } catch {
    return 0;
  }
}

export async function startServer(bin, args, what, onExit) {
  const proc = spawn(bin, ['serve', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const url = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      log += d;
      if (log.length > 1e6) log = log.slice(-5e5);
      const m = log.match(/listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    proc.on('exit', (c) => reject(new Error(`server exited (${c}): ${log}`)));
  });
  proc.on('exit', (c, sig) => onExit(`server exited during the ${what} (${c ?? sig}); its log:\n${log.slice(-3000)}`));
  for (;;) {
    const r = await fetch(url + '/health').catch(() => null);
    if (r?.status === 200) break;
    await sleep(20);
  }
  return {
    proc, url,
    log: () => log,
    stop: () => {
      proc.removeAllListeners('exit');
      const exited = new Promise((r) => proc.on('exit', (c, sig) => r(c ?? sig)));
      proc.kill('SIGTERM');
      return exited;
    },
  };
}
