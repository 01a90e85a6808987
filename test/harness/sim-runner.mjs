#!/usr/bin/env node
// The one-job GitHub Actions runner as the relay agent starts it, for the demo and the system
// tests. Usage (the agent's runner.command): sim-runner.mjs ACTIONS_BROKER_URL.
//
// It does what a real JIT runner plus the Spark workflow do, against the simulated GitHub Actions
// service (test/harness/github-sim.ts) and the real controller:
//   1. connect with the JIT config from ACTIONS_RUNNER_INPUT_JITCONFIG (never argv) and wait until
//      GitHub assigns the dispatched job whose labels it carries (GitHub then sends
//      workflow_job queued/in_progress);
//   2. lease preflight: POST /api/v1/leases/:id/verify with the job token (fails the job if refused);
//   3. the test itself (the plan GitHub handed out says how long and with what result; a test can
//      hold it at a gate);
//   4. POST the evidence receipt, then tell GitHub the job completed (workflow_job completed);
//   5. exit with the planned code. SIGTERM (the agent stopping it) cancels the job.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

const broker = process.argv[2];
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

process.on('SIGTERM', () => {
  say('Received SIGTERM; job cancelled');
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
say(`Listening for Jobs as ${job.runnerName}`);
say(`Running job: spark-test (${job.topology}, ${job.suite}) at ${job.headSha}`);
const startedAt = new Date();
const controller = env.SPARK_CONTROLLER_URL.replace(/\/+$/, '');
const auth = { authorization: `Bearer ${env.SPARK_LEASE_TOKEN ?? ''}` };

const verify = await call(
  `${controller}/api/v1/leases/${job.reservationId}/verify`,
  { hostId, fencingToken },
  auth,
).catch((e) => ({ status: 0, data: { error: { message: e.message } } }));
if (verify.status !== 200 || verify.data?.reservation?.headSha !== job.headSha) {
  say(`lease-preflight: FAIL lease not verified (${verify.status} ${verify.data?.error?.code ?? ''})`);
  await complete('failure');
  process.exit(1);
}
say(`lease-preflight: ok (${hostId}, reservation ${job.reservationId})`);

await sleep(plan.workMs);
const waitGate = async (gate) => {
  if (!plan.gates.includes(gate)) return;
  for (;;) {
    const g = await call(`${broker}/jobs/${job.id}/gates/${gate}`).catch(() => null);
    if (g?.data?.open) return;
    await sleep(100);
  }
};
await waitGate('work');
for (const line of plan.lastLines) say(line);
say(`spark-test.sh ${job.topology}: ${plan.result}`);

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
    phases: [{ suite: 'smoke', exitCode: plan.result === 'passed' ? 0 : 1, durationMs: plan.workMs }],
    startedAt: startedAt.toISOString(),
    endedAt: new Date().toISOString(),
    result: plan.result,
    exitCode: plan.result === 'passed' ? 0 : 1,
    log: {
      sha256: createHash('sha256').update(log).digest('hex'),
      bytes: Buffer.byteLength(log),
      lines: plan.lastLines.length,
    },
    ...(plan.result === 'passed' ? {} : { lastLines: plan.lastLines.slice(-10) }),
    toolchain: { node: process.version },
  };
  const res = await call(`${controller}/api/v1/leases/${job.reservationId}/receipt`, receipt, auth).catch(
    (e) => ({ status: 0, data: { error: { message: e.message } } }),
  );
  say(
    `evidence receipt: ${res.status === 201 || res.status === 200 ? 'recorded' : `not recorded (${res.status})`}`,
  );
}
await complete(plan.result === 'passed' ? 'success' : 'failure');
say(`Job spark-test completed with result: ${plan.result === 'passed' ? 'Succeeded' : 'Failed'}`);
await waitGate('exit');
process.exit(plan.exitCode);
