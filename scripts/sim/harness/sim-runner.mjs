#!/usr/bin/env node
// The one-job GitHub Actions runner as the relay agent starts it, for the demo and the system
// tests. Usage (the agent's runner.command): <runner root>/run.mjs ACTIONS_BROKER_URL [LOG_STORE],
// where run.mjs is this file installed (linked) into the runner's root: like the real runner
// (run.sh finds its own dir), its root — and so its work folder `<root>/_work` — is where it is
// installed. LOG_STORE stands in for GitHub's store of job logs: the real runner uploads each
// step's log to GitHub as the job runs (actions/runner src/Runner.Common/JobServerQueue.cs), so a
// job's log outlives the runner's files; this one copies the job's log there when the job ends.
//
// It does what a real JIT runner plus the Spark workflow do, against the simulated GitHub Actions
// service (scripts/sim/harness/github-sim.ts) and the real controller:
//   1. connect with the JIT config from ACTIONS_RUNNER_INPUT_JITCONFIG (never argv), take it out
//      of the environment its job inherits (actions/runner src/Runner.Listener/CommandSettings.cs
//      removes every ACTIONS_RUNNER_INPUT_* variable) and wait until GitHub assigns the dispatched
//      job whose labels it carries (GitHub then sends workflow_job queued/in_progress);
//   2. actions/checkout: the commit in `<root>/_work/<repo>/<repo>` (src/Runner.Worker/
//      TrackingConfig.cs), HEAD detached at it; with `plan.checkout` a real `git fetch` over HTTP
//      from that repository and `git checkout --force <sha>` (which runs the user's git hooks, as
//      the real one does);
//   3. lease preflight: POST /api/v1/leases/:id/verify with the job token (fails the job if refused);
//   4. the test itself: with `plan.script` (or a real checkout holding scripts/ci/spark-test.sh) the
//      spark-test action's way — `bash scripts/ci/spark-test.sh <topology>` in the checkout, in an
//      environment without SPARK_LEASE_TOKEN / SPARK_FENCING_TOKEN, its output to the job's log and
//      never to the runner's console; else the planned duration and result (a test can hold it at
//      a gate);
//   5. POST the job's receipt (a refused receipt fails the job, as the spark-test action does),
//      print the runner's own result line and tell GitHub the job completed (workflow_job completed);
//   6. upload the job's log (LOG_STORE/job-<id>.log) and exit with the planned code. SIGTERM (the agent stopping it) cancels the job.
// Console lines are the real runner's (actions/runner v2.336.0, src/Runner.Listener/
// JobDispatcher.cs): `<time>: Running job: <name>`, `<time>: Job <name> completed with result:
// <TaskResult>`, `<time>` in .NET's `u` format; the agent reads the latter as the runner's result.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, resolve } from 'node:path';

const ROOT = dirname(resolve(process.argv[1]));
/** .NET's `{DateTime.UtcNow:u}`: `yyyy-MM-dd HH:mm:ssZ`. */
const stamp = () => `${new Date().toISOString().slice(0, 19).replace('T', ' ')}Z`;
const broker = process.argv[2];
const logStore = process.argv[3];
const env = process.env;
const say = (line) => console.log(line);
const fail = (code, msg) => {
  console.error(`sim runner: ${msg}`);
  process.exit(code);
};
if (!broker) fail(2, 'usage: sim-runner.mjs ACTIONS_BROKER_URL');
const jit = env.ACTIONS_RUNNER_INPUT_JITCONFIG;
if (!jit) fail(64, 'ACTIONS_RUNNER_INPUT_JITCONFIG is not set');
const cmdline = (pid) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
};
if (cmdline(process.pid).includes(jit) || cmdline(process.ppid).includes(jit)) {
  fail(65, 'the JIT config is on a command line');
}
delete env.ACTIONS_RUNNER_INPUT_JITCONFIG;
for (const k of ['SPARK_CONTROLLER_URL', 'SPARK_RESERVATION_ID', 'SPARK_HOST_ID', 'SPARK_FENCING_TOKEN']) {
  if (!env[k]) fail(67, `missing job environment: ${k}`);
}
const hostId = env.SPARK_HOST_ID;
const fencingToken = Number(env.SPARK_FENCING_TOKEN);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function call(url, body, headers = {}) {
  const res = await fetch(url, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { raw: text };
  }
  return { status: res.status, data };
}

let job = null;
let finished = false;
const complete = async (conclusion) => {
  if (!job || finished) return;
  finished = true;
  await call(`${broker}/jobs/${job.id}/complete`, { conclusion }).catch(() => null);
};

let printed = false;
const printResult = (result) => {
  if (printed || !job) return;
  printed = true;
  say(`${stamp()}: Job spark-test completed with result: ${result}`);
};
let script = null;
process.on('SIGTERM', () => {
  say('Received SIGTERM; job cancelled');
  if (script?.pid) {
    try {
      process.kill(-script.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  printResult('Canceled');
  // GitHub loses the runner mid-job: the job ends failed, the runner goes away
  void complete('failure').finally(() => process.exit(143));
});

say('√ Connected to GitHub');
for (;;) {
  const r = await call(`${broker}/runner/acquire`, { jitConfig: jit, pid: process.pid, hostId }).catch(
    (e) => ({ status: 0, data: { message: e.message } }),
  );
  if (r.status === 200) {
    job = r.data;
    break;
  }
  if (r.status !== 202) fail(3, `GitHub refused the runner (${r.status}): ${r.data?.message ?? ''}`);
  await sleep(100);
}
const plan = job.plan;
say(`${stamp()}: Listening for Jobs`);
say(`${stamp()}: Running job: spark-test`);
const startedAt = new Date();

// actions/checkout: the commit, detached, in the runner's work folder
const name = job.repo.split('/')[1];
const ws = join(ROOT, '_work', name, name);
const jobLog = join(ROOT, '_work', '_temp', `job-${job.id}.log`);
mkdirSync(dirname(jobLog), { recursive: true });
if (plan.checkout) {
  const git = (...args) =>
    spawnSync('git', ['-C', ws, ...args], { stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' });
  // actions/checkout reuses a valid repository in the workspace and clears anything else
  // (src/git-directory-helper.ts prepareExistingDirectory)
  if (!existsSync(join(ws, '.git', 'config'))) rmSync(ws, { recursive: true, force: true });
  mkdirSync(ws, { recursive: true });
  // authenticated the way actions/checkout does it, an extra header (http.<url>.extraheader)
  const auth = `AUTHORIZATION: basic ${Buffer.from('x-access-token:sim-github-token').toString('base64')}`;
  const steps = [
    existsSync(join(ws, '.git')) ? null : ['init', '-q'],
    [
      '-c',
      `http.extraheader=${auth}`,
      'fetch',
      '-q',
      '--no-tags',
      plan.checkout.url,
      '+refs/heads/*:refs/remotes/origin/*',
    ],
    ['-c', 'advice.detachedHead=false', 'checkout', '-q', '--force', job.headSha],
  ].filter(Boolean);
  for (const st of steps) {
    const r = git(...st);
    if (r.status !== 0) {
      say(`checkout: git ${st[0]} failed (${r.status})`);
      printResult('Failed');
      await complete('failure');
      process.exit(1);
    }
  }
} else {
  rmSync(ws, { recursive: true, force: true });
  mkdirSync(join(ws, '.git'), { recursive: true });
  writeFileSync(join(ws, '.git', 'HEAD'), `${job.headSha}\n`);
  if (plan.script) {
    mkdirSync(join(ws, 'scripts', 'ci'), { recursive: true });
    writeFileSync(join(ws, 'scripts', 'ci', 'spark-test.sh'), plan.script);
  }
}
const controller = env.SPARK_CONTROLLER_URL.replace(/\/+$/, '');
const auth = { authorization: `Bearer ${env.SPARK_LEASE_TOKEN ?? ''}` };

const verify = await call(
  `${controller}/api/v1/leases/${job.reservationId}/verify`,
  { hostId, fencingToken },
  auth,
).catch((e) => ({ status: 0, data: { error: { message: e.message } } }));
if (verify.status !== 200 || verify.data?.reservation?.headSha !== job.headSha) {
  say(`lease-preflight: FAIL lease not verified (${verify.status} ${verify.data?.error?.code ?? ''})`);
  printResult('Failed');
  await complete('failure');
  process.exit(1);
}
say(`lease-preflight: ok (${hostId}, reservation ${job.reservationId})`);

const waitGate = async (gate) => {
  if (!plan.gates.includes(gate)) return;
  for (;;) {
    const g = await call(`${broker}/jobs/${job.id}/gates/${gate}`).catch(() => null);
    if (g?.data?.open) return;
    await sleep(100);
  }
};
let result = plan.result;
const scriptPath = join(ws, 'scripts', 'ci', 'spark-test.sh');
if (plan.script || (plan.checkout && existsSync(scriptPath))) {
  // the spark-test action: the repository's script without the lease credentials in its
  // environment (actions/spark-test/src/input-helper.ts childEnv), in its own process group
  const childEnv = { ...env, SPARK_TEST_SUITE: 'smoke', SPARK_HEAD_SHA: job.headSha };
  delete childEnv.SPARK_LEASE_TOKEN;
  delete childEnv.SPARK_FENCING_TOKEN;
  const out = createWriteStream(jobLog, { flags: 'a' });
  script = spawn('bash', [scriptPath, job.topology], {
    cwd: ws,
    env: childEnv,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // both streams into one log, ended by this runner (a stream that ended first must not end it)
  script.stdout.pipe(out, { end: false });
  script.stderr.pipe(out, { end: false });
  const closed = new Promise((r) => script.once('close', r));
  const code = await new Promise((r) => script.once('exit', (c) => r(c)));
  // what the script printed last is still in the pipes; a process it left behind may hold them
  // open for good, so the log takes what arrives shortly after the exit
  await Promise.race([closed, sleep(2000)]);
  script.stdout.unpipe(out);
  script.stderr.unpipe(out);
  await new Promise((r) => out.end(r));
  result = code === 0 ? 'passed' : 'failed';
  say(`spark-test.sh ${job.topology} exited ${code}`);
} else {
  await sleep(plan.workMs);
  await waitGate('work');
  for (const line of plan.lastLines) say(line);
  say(`spark-test.sh ${job.topology}: ${plan.result}`);
}

if (plan.receipt) {
  const log = `${plan.lastLines.join('\n')}\n`;
  const receipt = {
    version: 1,
    reservationId: job.reservationId,
    hostId,
    fencingToken,
    headSha: job.headSha,
    repo: job.repo,
    suite: job.suite,
    topology: job.topology,
    phases: [{ suite: 'smoke', exitCode: result === 'passed' ? 0 : 1, durationMs: plan.workMs }],
    startedAt: startedAt.toISOString(),
    endedAt: new Date().toISOString(),
    result,
    exitCode: result === 'passed' ? 0 : 1,
    log: {
      sha256: createHash('sha256').update(log).digest('hex'),
      bytes: Buffer.byteLength(log),
      lines: plan.lastLines.length,
    },
    ...(result === 'passed' ? {} : { lastLines: plan.lastLines.slice(-10) }),
    toolchain: { node: process.version },
  };
  const res = await call(`${controller}/api/v1/leases/${job.reservationId}/receipt`, receipt, auth).catch(
    (e) => ({ status: 0, data: { error: { message: e.message } } }),
  );
  const recorded = res.status === 201 || res.status === 200;
  say(
    `job receipt: ${recorded ? 'recorded' : `not recorded (${res.status} ${res.data?.error?.code ?? ''})`}`,
  );
  // the spark-test action fails the job when the controller refused its receipt
  if (!recorded) result = 'failed';
}
printResult(result === 'passed' ? 'Succeeded' : 'Failed');
if (logStore && existsSync(jobLog)) {
  try {
    copyFileSync(jobLog, join(logStore, `job-${job.id}.log`));
  } catch (e) {
    say(`job log: not uploaded (${e.message})`);
  }
}
await complete(result === 'passed' ? 'success' : 'failure');
await waitGate('exit');
process.exit(plan.exitCode);
