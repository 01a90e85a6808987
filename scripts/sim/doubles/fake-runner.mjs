#!/usr/bin/env node
// Test double for the GitHub Actions runner started by the agent for one job. It insists that
// the JIT config came in ACTIONS_RUNNER_INPUT_JITCONFIG and not on any command line (its own or
// its parent's), that the SPARK_* job environment is complete, records what it saw in a marker
// file, writes into its work dir, sleeps and exits with the code the test put in the config.
//
// Its console is the real runner's (actions/runner v2.336.0, the lines the agent reads as the
// runner's own job result, ADR 0160): `√ Connected to GitHub` (src/Runner.Common/Terminal.cs
// WriteSuccessMessage), `<time>: Listening for Jobs` (src/Runner.Listener/Runner.cs), `<time>:
// Running job: <name>` and `<time>: Job <name> completed with result: <TaskResult>`
// (src/Runner.Listener/JobDispatcher.cs), `<time>` in .NET's `u` format (`2026-05-01 12:00:00Z`).
// With `checkout` it also leaves what actions/checkout leaves for a commit: the repository in
// `<runner root>/_work/<repo>/<repo>` (src/Runner.Worker/TrackingConfig.cs) with a detached
// HEAD, the runner root being where the runner is installed (the dir of its entry script, as
// run.sh finds its own).
//
// Two ways to get its config. By default the JIT config is the test's own (index.ts
// `fakeJitConfig`: base64 JSON carrying the behaviour). With an Actions broker URL as its
// argument (`fake-runner.mjs ACTIONS_BROKER_URL`, scripts/sim/harness/github-sim.ts) the JIT config is
// one the fake GitHub issued (opaque): like a real JIT runner it presents it to GitHub Actions,
// which hands it the job it carries the labels for, with the behaviour the test planned for that
// job; it tells GitHub when the job completed, as the real runner does before it exits.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/** .NET's `{DateTime.UtcNow:u}`: `yyyy-MM-dd HH:mm:ssZ`. */
const stamp = () => `${new Date().toISOString().slice(0, 19).replace('T', ' ')}Z`;

const fail = (code, msg) => {
  console.error(`fake runner: ${msg}`);
  process.exit(code);
};
const cfg = process.env.ACTIONS_RUNNER_INPUT_JITCONFIG;
if (!cfg) fail(64, 'ACTIONS_RUNNER_INPUT_JITCONFIG is not set');
const cmdline = (pid) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
};
if (
  process.argv.some((a) => a.includes(cfg)) ||
  cmdline(process.pid).includes(cfg) ||
  cmdline(process.ppid).includes(cfg)
) {
  fail(65, 'the JIT config is on a command line');
}
const broker = process.argv[2];
let jit;
let job = null;
if (broker) {
  // GitHub Actions assigns the job once the runner connects with its config (202: none yet)
  for (;;) {
    const res = await fetch(`${broker}/runner/acquire`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jitConfig: cfg, pid: process.pid, hostId: process.env.SPARK_HOST_ID }),
      signal: AbortSignal.timeout(30_000),
    }).catch((e) => ({ status: 0, text: async () => e.message }));
    if (res.status === 200) {
      job = await res.json();
      break;
    }
    if (res.status !== 202) fail(3, `GitHub refused the runner (${res.status}): ${await res.text()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  jit = { runnerName: job.runnerName, fake: job.plan?.runner ?? {} };
} else {
  try {
    jit = JSON.parse(Buffer.from(cfg, 'base64').toString('utf8'));
  } catch {
    fail(66, 'the JIT config is not base64 JSON');
  }
}
/** Tells GitHub the job completed (broker mode), as the runner does before it exits. */
const completeJob = async (conclusion) => {
  if (!job) return;
  await fetch(`${broker}/jobs/${job.id}/complete`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ conclusion }),
    signal: AbortSignal.timeout(10_000),
  }).catch(() => null);
};
const required = [
  'SPARK_CONTROLLER_URL',
  'SPARK_RESERVATION_ID',
  'SPARK_HOST_ID',
  'SPARK_FENCING_TOKEN',
  'SPARK_LEASE_TOKEN',
  'SPARK_TOPOLOGY',
  'SPARK_WORK_DIR',
  'SPARK_MODEL_CACHE',
];
const missing = required.filter((k) => !process.env[k]);
if (missing.length) fail(67, `missing job environment: ${missing.join(', ')}`);

const fake = jit.fake ?? {};
let gpuAtStart;
try {
  gpuAtStart = execFileSync(
    'nvidia-smi',
    ['--query-compute-apps=pid,process_name,used_memory', '--format=csv,noheader,nounits'],
    {
      encoding: 'utf8',
    },
  )
    .split('\n')
    .filter((l) => l.trim());
} catch (e) {
  gpuAtStart = [`error: ${e.message}`];
}
writeFileSync(join(process.env.SPARK_WORK_DIR, 'job-output.txt'), 'partial build output\n');

// A stand-in for hostile job code: what can it reach of the agent and of other
// reservations? Each attempt records the error code it got, or "ok".
const attempt = (fn) => {
  try {
    fn();
    return 'ok';
  } catch (e) {
    return e.code ?? String(e.message);
  }
};
const ppidOf = (pid) => {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return null;
  }
};
let probe = null;
if (fake.probe) {
  // the agent is the wrapper shell's parent (while it lives): exactly what a job can find via /proc
  const agentPid = ppidOf(process.ppid);
  probe = {
    agentPid,
    read: Object.fromEntries(fake.probe.read.map((p) => [p, attempt(() => readFileSync(p))])),
    agentEnviron: attempt(() => readFileSync(`/proc/${agentPid}/environ`)),
    agentCmdline: cmdline(agentPid).split('\0').join(' ').trim(),
    signalAgent: attempt(() => process.kill(agentPid, 0)),
  };
}
let daemonPid = null;
if (fake.leaveDaemon) {
  // leaves its process group (setsid) and keeps trying to write into every other work dir
  const script = `
    const fs = require('node:fs'), path = require('node:path');
    const [root, own, log] = process.argv.slice(1);
    setInterval(() => {
      let names = [];
      try { names = fs.readdirSync(root); } catch {}
      for (const n of names) {
        const d = path.join(root, n);
        if (d === own) continue;
        try { fs.writeFileSync(path.join(d, 'intruder.txt'), 'left by an earlier job'); fs.appendFileSync(log, d + '\\n'); } catch {}
      }
    }, 25);
    setTimeout(() => process.exit(0), 120000);`;
  const child = spawn(
    process.execPath,
    [
      '-e',
      script,
      dirname(process.env.SPARK_WORK_DIR),
      process.env.SPARK_WORK_DIR,
      join(fake.markerDir, 'intrusions.log'),
    ],
    { detached: true, stdio: 'ignore' },
  );
  child.unref();
  daemonPid = child.pid;
}
let shell = null;
if (fake.shell) {
  // job code: what the PR's steps would run, with the job's environment, in the work dir
  const r = spawnSync('/bin/sh', ['-c', fake.shell], {
    cwd: process.env.SPARK_WORK_DIR,
    encoding: 'utf8',
    timeout: 60_000,
  });
  shell = { code: r.status, output: `${r.stdout ?? ''}${r.stderr ?? ''}`.slice(-20_000) };
}
if (fake.markerDir) {
  mkdirSync(fake.markerDir, { recursive: true });
  writeFileSync(
    join(fake.markerDir, `${jit.runnerName}.json`),
    JSON.stringify({
      runnerName: jit.runnerName,
      pid: process.pid,
      // when this process started (not when it got here): the spawn-to-start latency is the agent's
      startedAt: Math.round(performance.timeOrigin),
      hostId: process.env.SPARK_HOST_ID,
      reservationId: process.env.SPARK_RESERVATION_ID,
      fencingToken: Number(process.env.SPARK_FENCING_TOKEN),
      jobTokenPrefix: process.env.SPARK_LEASE_TOKEN.slice(0, 8),
      // a digest only: tests prove which config arrived without the marker holding it
      jitSha256: createHash('sha256').update(cfg).digest('hex'),
      workDir: process.env.SPARK_WORK_DIR,
      cwd: process.cwd(),
      uid: process.getuid(),
      env: Object.keys(process.env).sort(),
      gpuAtStart,
      probe,
      daemonPid,
      shell,
    }),
  );
}
if (fake.onGpu && process.env.FAKE_NVIDIA_SMI_STATE) {
  // a job on the GPU: listed by the fake nvidia-smi while this process lives (bin/nvidia-smi live-*)
  writeFileSync(
    join(process.env.FAKE_NVIDIA_SMI_STATE, `live-${process.pid}`),
    `${process.pid}, python3, 1024\n`,
  );
}
if (fake.checkout) {
  // actions/checkout of a commit: the work tree in the runner's work folder, HEAD detached at it
  const root = dirname(resolve(process.argv[1]));
  const git = join(root, '_work', fake.checkout.repo, fake.checkout.repo, '.git');
  mkdirSync(git, { recursive: true });
  writeFileSync(join(git, 'HEAD'), `${fake.checkout.sha}\n`);
}
console.log('√ Connected to GitHub');
console.log('');
console.log("Current runner version: '2.336.0'");
console.log(`${stamp()}: Listening for Jobs`);
console.log(`${stamp()}: Running job: spark-test`);
let ended = false;
process.on('SIGTERM', () => {
  console.log('Received SIGTERM; job cancelled');
  // the listener cancels the worker and prints the cancelled result (JobDispatcher.cs)
  if (!ended) console.log(`${stamp()}: Job spark-test completed with result: Canceled`);
  ended = true;
  void completeJob('cancelled').finally(() => setTimeout(() => process.exit(143), fake.ignoreTermMs ?? 0));
});
const exitCode = fake.exitCode ?? 0;
setTimeout(() => {
  for (const line of fake.lastLines ?? []) console.log(line);
  // the job's result; the real runner then exits 0 whatever it was (Runner.cs, one-job runner)
  const result = fake.jobResult ?? (exitCode === 0 ? 'Succeeded' : 'Failed');
  if (!ended) console.log(`${stamp()}: Job spark-test completed with result: ${result}`);
  ended = true;
  void completeJob(result === 'Succeeded' ? 'success' : 'failure').finally(() => process.exit(exitCode));
}, fake.sleepMs ?? 100);
