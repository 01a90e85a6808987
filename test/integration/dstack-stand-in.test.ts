import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { RunSpec } from '../../agent/executor/dstack-api.ts';
import { createDstackClient, type DstackClient, DstackRefused } from '../../agent/executor/dstack-client.ts';
import {
  AMD64_ONLY_IMAGE,
  type DstackStandIn,
  MULTI_ARCH_IMAGE,
  outputOf,
  startDstackStandIn,
} from '../../scripts/sim/doubles/dstack/server.ts';
import { waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * The agent's dstack client against the stand-in (scripts/sim/doubles/dstack/): what a dstack 0.21.2
 * server refuses and how (422, 400, 403, 404), the run and job statuses with `terminating` and
 * their termination reasons, log paging with `next_token`, and what `image` and the fleet's
 * architecture decide. Real HTTP on loopback, real jobs in the stand-in's container namespace.
 */

let d: DstackStandIn | null = null;
let dir: string | null = null;
afterEach(async () => {
  await d?.close();
  d = null;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = null;
});

async function kit(opts: Parameters<typeof startDstackStandIn>[0] = {}) {
  d = await startDstackStandIn(opts);
  dir = mkdtempSync(join(tmpdir(), 'spark-dstack-it-'));
  const client = createDstackClient({ url: d.url, project: d.project, token: d.token, timeoutMs: 5000 });
  return { d, client, dir };
}

const task = (name: string, commands: string[], extra: Record<string, unknown> = {}): RunSpec => ({
  run_name: name,
  configuration: {
    type: 'task',
    name,
    commands,
    nodes: 1,
    image: MULTI_ARCH_IMAGE,
    fleets: ['spark-2'],
    ...extra,
  } as RunSpec['configuration'],
});

const post = (s: DstackStandIn, route: string, body: unknown, token = s.token) =>
  fetch(`${s.url}/api/project/${s.project}/${route}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  }).then(async (r) => ({ status: r.status, body: (await r.json()) as unknown }));

/** Follows a run through `runs/get` until it is finished; every status the client saw, in order. */
async function follow(client: DstackClient, name: string): Promise<string[]> {
  const seen: string[] = [];
  await waitFor(
    `${name} finished`,
    async () => {
      const r = await client.get(name);
      if (r && seen.at(-1) !== r.status) seen.push(r.status);
      return r && ['done', 'failed', 'terminated'].includes(r.status);
    },
    30_000,
    20,
  );
  return seen;
}

describe('dstack stand-in played from dstack 0.21.2, through the agent client', { timeout: 60_000 }, () => {
  it('answers what a real server rejects with its status and shape', async () => {
    const { d, client } = await kit();
    // an unknown key (CoreModel extra=forbid) and a missing `force`: FastAPI's 422
    const extra = await post(d, 'runs/apply', {
      plan: { run_spec: { configuration: { type: 'task', commands: ['true'], image: 'x', gpus: 1 } } },
      force: false,
    });
    expect(extra.status).toBe(422);
    expect(extra.body).toMatchObject({
      detail: expect.arrayContaining([
        expect.objectContaining({
          type: 'extra_forbidden',
          loc: ['body', 'plan', 'run_spec', 'configuration', 'gpus'],
        }),
      ]),
    });
    const missing = await post(d, 'runs/stop', { runs_names: ['x'] });
    expect(missing).toMatchObject({
      status: 422,
      body: { detail: [{ type: 'missing', loc: ['body', 'abort'] }] },
    });
    // ServerClientError: 400 with a list of {msg, code}; the client says dstack's words
    await expect(client.apply(task('Bad_Name', ['true']))).rejects.toThrow(
      new DstackRefused("dstack apply refused: Resource name should match regex '^[a-z][a-z0-9-]{1,40}$'"),
    );
    await expect(
      client.apply({
        ...task('arm-no-image', ['true'], { resources: { cpu: { arch: 'arm' } } }),
        configuration: { type: 'task', commands: ['true'], resources: { cpu: { arch: 'arm' } } } as never,
      }),
    ).rejects.toThrow('`image` must be set when ARM CPU requested');
    await expect(
      client.apply(task('no-such-image', ['true'], { image: 'ghcr.io/nobody/none:0' })),
    ).rejects.toThrow(
      "Error pulling configuration for image 'ghcr.io/nobody/none:0' from the docker registry",
    );
    expect(await client.get('never-applied')).toBeNull();
    // HTTPException bodies: one object, not a list
    expect(await post(d, 'runs/get', { run_name: 'x' }, 'wrong')).toEqual({
      status: 403,
      body: { detail: { msg: 'Invalid token', code: null } },
    });
    const wrongProject = await fetch(`${d.url}/api/project/other/runs/get`, {
      method: 'POST',
      headers: { authorization: `Bearer ${d.token}` },
      body: '{}',
    });
    expect([wrongProject.status, await wrongProject.json()]).toEqual([
      404,
      { detail: { msg: 'Not found', code: null } },
    ]);
    expect(d.invalid.map((i) => i.status)).toEqual([422, 422]);
  });

  it('every end passes through terminating, with dstack termination reasons and exit statuses', async () => {
    const { d, client } = await kit();
    await client.apply(task('ok', ['echo hi']));
    await client.apply(task('bad', ['echo no', 'exit 3']));
    await Promise.all([follow(client, 'ok'), follow(client, 'bad')]);
    expect(d.runs.get('ok')!.history).toEqual([
      'submitted',
      'provisioning',
      'running',
      'terminating',
      'done',
    ]);
    expect(d.runs.get('bad')!.history).toEqual([
      'submitted',
      'provisioning',
      'running',
      'terminating',
      'failed',
    ]);
    expect(d.runs.get('bad')!.job.history).toEqual([
      'submitted',
      'provisioning',
      'pulling',
      'running',
      'terminating',
      'failed',
    ]);
    const ok = (await client.get('ok'))!;
    expect([ok.status, ok.termination_reason, ok.latest_job_submission?.termination_reason]).toEqual([
      'done',
      'all_jobs_done',
      'done_by_runner',
    ]);
    expect(ok.latest_job_submission?.exit_status).toBe(0);
    const bad = (await client.get('bad'))!;
    expect([bad.status, bad.termination_reason, bad.latest_job_submission?.termination_reason]).toEqual([
      'failed',
      'job_failed',
      'container_exited_with_error',
    ]);
    expect(bad.latest_job_submission?.exit_status).toBe(3);
    // the runner joined the commands with ' && ' and ran them with `/bin/sh -i -c` (an image is set)
    expect(d.runs.get('bad')!.job.commands).toEqual(['/bin/sh', '-i', '-c', 'echo no && exit 3']);

    // a stop: terminating at once, the container removed after the graceful-stop window, no exit status
    await client.apply(task('long', ['trap "" INT; sleep 60']));
    await waitFor('long running', async () => (await client.get('long'))?.status === 'running', 15_000);
    await client.stop(['long'], false);
    expect((await client.get('long'))?.status).toBe('terminating');
    expect(await follow(client, 'long')).toEqual(['terminating', 'terminated']);
    const long = (await client.get('long'))!;
    expect([long.termination_reason, long.latest_job_submission?.termination_reason]).toEqual([
      'stopped_by_user',
      'terminated_by_user',
    ]);
    expect(long.latest_job_submission?.exit_status).toBeNull();
    expect(d.runs.get('long')!.job.proc).toBeNull();
    // abort: the job ends `aborted`, the run `terminated`
    await client.apply(task('abort-me', ['sleep 60']));
    await waitFor(
      'abort-me running',
      async () => (await client.get('abort-me'))?.status === 'running',
      15_000,
    );
    await client.stop(['abort-me'], true);
    await follow(client, 'abort-me');
    const ab = (await client.get('abort-me'))!;
    expect([ab.status, ab.termination_reason, ab.latest_job_submission?.status]).toEqual([
      'terminated',
      'aborted_by_user',
      'aborted',
    ]);
    // an active run's name cannot be applied again
    await client.apply(task('busy', ['sleep 60']));
    await expect(client.apply(task('busy', ['true']))).rejects.toThrow(
      'Cannot override active run. Stop the run first.',
    );
    await client.stop(['busy', 'no-such-run'], true);
    await follow(client, 'busy');
  });

  it('pages logs with next_token: the client reads the whole output, and the last lines come newest-first', async () => {
    const { d, client } = await kit();
    await client.apply(task('chatty', ['echo start']));
    await follow(client, 'chatty');
    const run = d.runs.get('chatty')!;
    // more events than two pages of 1000: appended as the runner would ship them
    for (let i = 0; i < 2345; i++) run.job.log.append(Buffer.from(`line ${i}\r\n`));
    const before = d.calls.filter((c) => c.route === 'logs/poll').length;
    const all = await client.readLogs('chatty', run.job.submissionId);
    expect(all).toEqual({ text: outputOf(run), complete: true });
    expect(d.calls.filter((c) => c.route === 'logs/poll').length - before).toBe(3);
    // exactly two full pages: dstack gives no token after the last one, and the output is whole
    await client.apply(task('even', ['true']));
    await follow(client, 'even');
    const even = d.runs.get('even')!;
    for (let i = 0; i < 2000; i++) even.job.log.append(Buffer.from(`e${i}\n`));
    expect(await client.readLogs('even', even.job.submissionId)).toEqual({
      text: outputOf(even),
      complete: true,
    });
    const tail = await client.tailLogs('chatty', run.job.submissionId, 3);
    expect(tail).toBe('line 2342\r\nline 2343\r\nline 2344\r\n');
    // dstack's own pages: descending tokens are byte offsets, a bad token is a ServerClientError
    const p1 = await post(d, 'logs/poll', {
      run_name: 'chatty',
      job_submission_id: run.job.submissionId,
      descending: true,
      limit: 2,
    });
    const token = (p1.body as { next_token: string }).next_token;
    expect(token).toMatch(/^\d+$/);
    const p2 = await post(d, 'logs/poll', {
      run_name: 'chatty',
      job_submission_id: run.job.submissionId,
      descending: true,
      limit: 2,
      next_token: token,
    });
    const msgs = (b: unknown) =>
      (b as { logs: { message: string }[] }).logs.map((e) => Buffer.from(e.message, 'base64').toString());
    expect([...msgs(p1.body), ...msgs(p2.body)]).toEqual([
      'line 2344\r\n',
      'line 2343\r\n',
      'line 2342\r\n',
      'line 2341\r\n',
    ]);
    expect(
      await post(d, 'logs/poll', {
        run_name: 'chatty',
        job_submission_id: run.job.submissionId,
        next_token: 'x',
      }),
    ).toEqual({
      status: 400,
      body: { detail: [{ msg: 'Invalid next_token: x. Must be a non-negative integer.', code: 'error' }] },
    });
  });

  it('no image on the aarch64 fleet, or an amd64-only one, never starts: failed for no capacity; a multi-arch image runs', async () => {
    const { d, client } = await kit({ arch: 'arm' });
    const noImage = task('default-image', ['true']);
    delete (noImage.configuration as { image?: string }).image;
    await client.apply(noImage);
    await client.apply(task('amd64-only', ['true'], { image: AMD64_ONLY_IMAGE }));
    await client.apply(task('multi-arch', ['true']));
    for (const name of ['default-image', 'amd64-only']) {
      await follow(client, name);
      // never placed on an instance: submitted → terminating → failed, no container, no output
      expect(d.runs.get(name)!.history).toEqual(['submitted', 'terminating', 'failed']);
      expect(d.runs.get(name)!.job.arch).toBe('x86');
      const r = (await client.get(name))!;
      expect(r.latest_job_submission).toMatchObject({
        status: 'failed',
        termination_reason: 'failed_to_start_due_to_no_capacity',
        termination_reason_message: 'Failed to use specified fleets',
        exit_status: null,
      });
    }
    await follow(client, 'multi-arch');
    expect((await client.get('multi-arch'))?.status).toBe('done');
  });

  it("runs the job in its own namespace: the host's dirs hidden unless mounted, a fresh /proc, the image's PATH", async () => {
    const { d, client, dir } = await kit();
    const secret = join(dir, 'agent-work');
    const cache = join(dir, 'models');
    const seen = join(dir, 'seen');
    mkdirSync(secret);
    writeFileSync(join(secret, 'state.json'), '{}');
    mkdirSync(seen, { mode: 0o777 });
    d.hostOnly.push(secret, join(dir, 'models'));
    await client.apply(
      task(
        'peek',
        [
          `ls -A ${secret} > ${seen}/work-listing`,
          `echo cached > ${cache}/from-job`,
          `ls /proc | grep -c '^[0-9]' > ${seen}/procs`,
          `printf '%s|%s|%s' "$PATH" "$HOME" "$(pwd)" > ${seen}/env`,
        ],
        {
          volumes: [{ instance_path: cache, path: cache }],
          working_dir: `${secret}/lease-1`,
          env: { A: '1' },
        },
      ),
    );
    await follow(client, 'peek');
    expect(d.runs.get('peek')!.status, outputOf(d.runs.get('peek')!)).toBe('done');
    // the agent's file is not there; only the working dir the runner made inside the container
    expect(readFileSync(join(seen, 'work-listing'), 'utf8')).toBe('lease-1\n');
    // the shim created the instance volume's dir on the host; the job's write landed there
    expect(readFileSync(join(cache, 'from-job'), 'utf8')).toBe('cached\n');
    expect(Number(readFileSync(join(seen, 'procs'), 'utf8'))).toBeLessThan(10);
    expect(readFileSync(join(seen, 'env'), 'utf8')).toBe(
      `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|/root|${secret}/lease-1`,
    );
    // the working dir the runner made was inside the container, not on the host
    expect(existsSync(join(secret, 'lease-1'))).toBe(false);
  });
});
