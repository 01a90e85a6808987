#!/usr/bin/env node
// Test double for Deckard's service control (systemctl/docker in production).
// Usage: deckard-ctl.mjs drain|stop|start STATE_DIR. Every call is appended to STATE_DIR/ctl.log.
//   drain: POST /drain (after STATE_DIR/drain-delay-ms, if present)
//   stop:  SIGTERM and wait until gone — or, with STATE_DIR/stop-mode = "pause", SIGSTOP only,
//          which leaves the process on the GPU like a paused container (after stop-delay-ms)
//   start: resume a paused or drained Deckard, or spawn a new one and wait until it listens; fails while
//          STATE_DIR/start-fails exists
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, openSync, readFileSync, statSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';

const [cmd, dir] = process.argv.slice(2);
if (!cmd || !dir) {
  console.error('usage: deckard-ctl.mjs drain|stop|start STATE_DIR');
  process.exit(2);
}
appendFileSync(join(dir, 'ctl.log'), `${Date.now()} ${cmd}\n`);
const cfg = JSON.parse(readFileSync(join(dir, 'deckard.json'), 'utf8'));
// node:http rather than fetch: it loads in a fraction of the time, and these run on every lend
const post = (path) =>
  new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: cfg.port, path, method: 'POST', timeout: 5000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const num = (f) => (existsSync(join(dir, f)) ? Number(readFileSync(join(dir, f), 'utf8')) : 0);
const procState = (pid) => {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return s.slice(s.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return null;
  }
};
// When a process started (ms since the epoch; btime is whole seconds, so never later than it did).
const startedMs = (p) => {
  try {
    const s = readFileSync(`/proc/${p}/stat`, 'utf8');
    const ticks = Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[19]);
    const btime = Number(/^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1]);
    return btime * 1000 + ticks * 10;
  } catch {
    return null;
  }
};
const pidFile = join(dir, 'pid');
const recorded = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8')) : null;
// Deckard writes its pid file once it listens: a process with that pid that started later got the
// number after ours exited (pid reuse on a busy machine) and must never be signalled
const pid =
  recorded != null && (startedMs(recorded) ?? Number.POSITIVE_INFINITY) <= statSync(pidFile).mtimeMs
    ? recorded
    : null;
const alive = (p) => p != null && procState(p) != null && procState(p) !== 'Z';

if (cmd === 'drain') {
  await sleep(num('drain-delay-ms'));
  if (alive(pid)) {
    const res = await post('/drain').catch((e) => e);
    if (res instanceof Error) {
      console.error(`drain failed: ${res.message}`);
      process.exit(1);
    }
  }
  process.exit(0);
}
if (cmd === 'stop') {
  await sleep(num('stop-delay-ms'));
  if (!alive(pid)) process.exit(0);
  const mode = existsSync(join(dir, 'stop-mode'))
    ? readFileSync(join(dir, 'stop-mode'), 'utf8').trim()
    : 'kill';
  if (mode === 'pause') {
    process.kill(pid, 'SIGSTOP');
    process.exit(0);
  }
  process.kill(pid, 'SIGCONT');
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + 10_000;
  while (alive(pid) && Date.now() < deadline) await sleep(20);
  if (alive(pid)) process.kill(pid, 'SIGKILL');
  process.exit(0);
}
if (cmd === 'start') {
  if (existsSync(join(dir, 'start-fails'))) {
    console.error(readFileSync(join(dir, 'start-fails'), 'utf8') || 'deckard failed to start');
    process.exit(1);
  }
  if (alive(pid)) {
    // a paused or drained server is resumed, like `docker unpause` + undrain
    if (procState(pid) === 'T') process.kill(pid, 'SIGCONT');
    await post('/resume').catch(() => null);
    process.exit(0);
  }
  const log = openSync(join(dir, 'deckard.log'), 'a');
  const child = spawn(process.execPath, [new URL('./fake-deckard.mjs', import.meta.url).pathname, dir], {
    detached: true,
    stdio: ['ignore', log, log],
  });
  child.unref();
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (existsSync(join(dir, 'pid')) && Number(readFileSync(join(dir, 'pid'), 'utf8')) === child.pid)
      process.exit(0);
    await sleep(20);
  }
  console.error('deckard did not start listening within 10 s');
  process.exit(1);
}
console.error(`unknown command ${cmd}`);
process.exit(2);
