import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { z } from 'zod';
import {
  ApplyRunPlanRequestSchema,
  FINISHED_RUN_STATUSES,
  GetRunRequestSchema,
  PollLogsRequestSchema,
  RUN_NAME_PATTERN,
  type RunSpec,
  type RunStatus,
  StopRunsRequestSchema,
} from '../../agent/executor/dstack-api.ts';

/**
 * A stand-in for a dstack server (no dstack server is installable here: PyPI is unreachable), real
 * HTTP on loopback. It serves the runs routes of `src/dstack/_internal/server/routers/runs.py`
 * (`apply`, `get`, `stop`, and the root `list`), checks the bearer token like `ProjectMember`, and
 * validates every request body against the shapes in `agent/executor/dstack-api.ts` (written from
 * `server/schemas/runs.py` and `core/models/{runs,configurations}.py`); a body that does not match
 * is answered 400 with dstack's error shape, and recorded so a test fails on it.
 *
 * Runs play dstack's `RunStatus` path: `submitted → provisioning → running`, then `done` (commands
 * exited 0), `failed` (non-zero, termination reason `job_failed`), or, after `runs/stop`,
 * `terminating → terminated` (`stopped_by_user`). The on-prem SSH fleet instance is this machine:
 * a task's `commands` really run (`/bin/sh -c`, its own process group, the spec's `env` and
 * `working_dir`), as dstack's runner would run them on the fleet host. A dev environment runs its
 * `init` and then stays `running` until stopped. The task's stdout and stderr are kept as the job
 * submission's log events and served by `POST /api/project/{p}/logs/poll` (`server/routers/logs.py`,
 * `PollLogsRequest` in `server/schemas/logs.py`, `JobSubmissionLogs`/`LogEvent` in
 * `core/models/logs.py`: `message` base64, newest first when `descending`, at most `limit`).
 * Faults a test can set: answer `stop` (or `get`, or `logs/poll`) with 5xx, or hold `stop` until
 * the client times out.
 */

export interface StandInRun {
  id: string;
  /** The one job submission's id (`JobSubmission.id`), which `logs/poll` asks by. */
  submissionId: string;
  name: string;
  spec: RunSpec;
  /** The job's output as dstack's runner ships it: one event per chunk read. */
  logs: { timestamp: string; log_source: 'stdout' | 'stderr'; message: string }[];
  status: RunStatus;
  terminationReason: string | null;
  exitStatus: number | null;
  submittedAt: string;
  proc: ChildProcess | null;
  /** Every status the run went through, in order. */
  history: RunStatus[];
  /** When the run reached a finished status (`Date.now()`), or null. */
  finishedAt: number | null;
}

export interface DstackStandIn {
  url: string;
  project: string;
  token: string;
  runs: Map<string, StandInRun>;
  /** Requests that failed validation (a test asserts there were none). */
  invalid: { route: string; issues: string }[];
  /** Every request, route and run name, in order. */
  calls: { route: string; runName: string | null }[];
  faults: {
    /** Answer this many `stop` calls with 503 (dstack unreachable behind a proxy). */
    stop5xx: number;
    /** Hold this many `stop` calls without answering (the client times out); the stop is not applied. */
    stopHang: number;
    /** Answer this many `get` calls with 500. */
    get5xx: number;
    /** Create the run but answer this many `apply` calls with 502 (a proxy lost the answer). */
    apply5xxAfterCreate: number;
    /** Answer this many `logs/poll` calls with 500. */
    logs5xx: number;
    /**
     * Keep this many new runs in `provisioning` until they are stopped: their instance never
     * becomes ready, so dstack never runs their commands (the task-start timeout's case, ADR 0120).
     * dstack's `contributing/RUNS-AND-JOBS.md` ("Job's lifecycle", STEP 3): "While
     * `dstack-shim`/`dstack-runner` is not responding, the job stays `PROVISIONING`", and a run
     * with a `PROVISIONING` or `PULLING` job is `PROVISIONING` (run lifecycle, STEP 2). dstack
     * itself fails such a job only when the shim or runner "don't respond for a long time"
     * (`TERMINATING`, then `FAILED`); this fault plays a hold shorter than that limit, so the
     * controller's timeout is what ends it. A stop meanwhile goes `terminating → terminated` as for
     * any unfinished run (STEP 3 of the run lifecycle).
     */
    holdProvisioning: number;
    /**
     * Fail this many new runs while they provision, as dstack does when the instance's shim or
     * runner does not answer "for a long time" (RUNS-AND-JOBS.md, job lifecycle STEP 3: the job
     * becomes `TERMINATING`, then `FAILED`): the run goes `terminating → failed` with
     * `job_failed` (run lifecycle STEP 2) and no exit status, its commands never run.
     */
    failProvisioning: number;
  };
  /** Runs whose status is not finished. */
  active(): StandInRun[];
  close(): Promise<void>;
}

/** The delay between the stand-in's status steps (dstack's background tasks run every few seconds). */
const STEP_MS = 100;

/** Starts the stand-in on a free loopback port. */
export async function startDstackStandIn(
  opts: { project?: string; token?: string } = {},
): Promise<DstackStandIn> {
  const project = opts.project ?? 'main';
  const token = opts.token ?? `dstack-${randomUUID()}`;
  const runs = new Map<string, StandInRun>();
  const invalid: DstackStandIn['invalid'] = [];
  const calls: DstackStandIn['calls'] = [];
  const faults: DstackStandIn['faults'] = {
    stop5xx: 0,
    stopHang: 0,
    get5xx: 0,
    apply5xxAfterCreate: 0,
    logs5xx: 0,
    holdProvisioning: 0,
    failProvisioning: 0,
  };
  const timers = new Set<NodeJS.Timeout>();
  const hung = new Set<ServerResponse>();
  const later = (ms: number, f: () => void) => {
    const t = setTimeout(() => {
      timers.delete(t);
      f();
    }, ms);
    timers.add(t);
  };
  const finished = (r: StandInRun) => FINISHED_RUN_STATUSES.includes(r.status);
  const setStatus = (r: StandInRun, s: RunStatus) => {
    if (r.status === s) return;
    r.status = s;
    r.history.push(s);
    if (FINISHED_RUN_STATUSES.includes(s)) r.finishedAt = Date.now();
  };

  const execute = (r: StandInRun) => {
    if (r.status !== 'provisioning') return;
    const c = r.spec.configuration;
    const script =
      c.type === 'task' ? c.commands.join('\n') : [...(c.init ?? []), 'exec sleep 86400'].join('\n');
    const proc = spawn('/bin/sh', ['-c', script], {
      cwd: (c.type === 'task' ? c.working_dir : null) ?? '/',
      env: {
        ...(c.env ?? {}),
        PATH: c.env?.PATH ?? process.env.PATH ?? '/usr/bin:/bin',
        DSTACK_RUN_NAME: r.name,
      },
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (source: 'stdout' | 'stderr') => (chunk: Buffer) => {
      r.logs.push({
        timestamp: new Date().toISOString(),
        log_source: source,
        message: chunk.toString('base64'),
      });
    };
    proc.stdout?.on('data', keep('stdout'));
    proc.stderr?.on('data', keep('stderr'));
    r.proc = proc;
    setStatus(r, 'running');
    // 'close', not 'exit': the run is finished once its output is all shipped (a CI task's receipt
    // hashes the whole output; dstack's runner sends the last logs before it reports the job done)
    proc.once('close', (code) => {
      r.proc = null;
      if (r.status === 'terminating') {
        r.exitStatus = code;
        later(STEP_MS, () => setStatus(r, 'terminated'));
        return;
      }
      r.exitStatus = code;
      if (code === 0) {
        r.terminationReason = 'all_jobs_done';
        setStatus(r, 'done');
      } else {
        r.terminationReason = 'job_failed';
        setStatus(r, 'failed');
      }
    });
  };

  const stopRun = (r: StandInRun, abort: boolean) => {
    if (finished(r) || r.status === 'terminating') return;
    r.terminationReason = abort ? 'aborted_by_user' : 'stopped_by_user';
    setStatus(r, 'terminating');
    if (r.proc?.pid) {
      try {
        process.kill(-r.proc.pid, abort ? 'SIGKILL' : 'SIGTERM');
      } catch {
        // the group ended between the check and the signal
      }
    } else {
      later(STEP_MS, () => setStatus(r, 'terminated'));
    }
  };

  /** `Run` (core/models/runs.py) as dstack serializes it. */
  const view = (r: StandInRun) => {
    const sub = {
      id: r.submissionId,
      submission_num: 0,
      submitted_at: r.submittedAt,
      last_processed_at: new Date().toISOString(),
      status: r.status === 'pending' ? 'submitted' : r.status,
      termination_reason: r.terminationReason,
      exit_status: r.exitStatus,
    };
    return {
      id: r.id,
      project_name: project,
      user: 'spark-agent',
      submitted_at: r.submittedAt,
      last_processed_at: new Date().toISOString(),
      status: r.status,
      status_message: r.status,
      termination_reason: r.terminationReason,
      run_spec: r.spec,
      jobs: [{ job_spec: { job_num: 0, job_name: `${r.name}-0-0` }, job_submissions: [sub] }],
      latest_job_submission: sub,
      cost: 0,
    };
  };

  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(body === undefined ? '' : JSON.stringify(body));
  };
  /** dstack's error body (server/utils/routers.py `error_detail`). */
  const error = (res: ServerResponse, status: number, msg: string, code: string) =>
    send(res, status, { detail: [{ msg, code }] });

  const readBody = (req: IncomingMessage): Promise<string> =>
    new Promise((resolve, reject) => {
      let b = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => {
        b += c;
      });
      req.on('end', () => resolve(b));
      req.on('error', reject);
    });

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const m = /^\/api\/project\/([^/]+)\/(runs\/apply|runs\/get|runs\/stop|logs\/poll)$/.exec(url.pathname);
    const isList = url.pathname === '/api/runs/list';
    if (req.method !== 'POST' || (!m && !isList)) return error(res, 404, 'Not found', 'not_found');
    if (req.headers.authorization !== `Bearer ${token}`) return error(res, 403, 'Access denied', 'forbidden');
    if (m && decodeURIComponent(m[1]!) !== project)
      return error(res, 403, `Project ${m[1]} not found or access denied`, 'forbidden');
    let json: unknown;
    try {
      json = JSON.parse(await readBody(req));
    } catch {
      return error(res, 422, 'body is not JSON', 'invalid_request');
    }
    const route = isList ? 'list' : m![2]!.replace(/^runs\//, '');
    const check = <S extends z.ZodType>(schema: S): z.infer<S> | null => {
      const p = schema.safeParse(json);
      if (p.success) return p.data;
      const issues = p.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
      invalid.push({ route, issues });
      error(res, 422, issues, 'invalid_request');
      return null;
    };
    if (route === 'apply') {
      const body = check(ApplyRunPlanRequestSchema);
      if (!body) return;
      const spec = body.plan.run_spec;
      const name = spec.run_name ?? spec.configuration.name ?? `run-${runs.size}`;
      calls.push({ route, runName: name });
      if (!RUN_NAME_PATTERN.test(name)) return error(res, 400, `invalid run name ${name}`, 'invalid_request');
      const cur = runs.get(name);
      // runs/apply with a name in use and no current_resource: dstack refuses unless it is finished
      if (cur && !finished(cur))
        return error(res, 400, `Run ${name} already exists and is active`, 'resource_exists');
      const r: StandInRun = {
        id: randomUUID(),
        submissionId: randomUUID(),
        logs: [],
        name,
        spec,
        status: 'submitted',
        terminationReason: null,
        exitStatus: null,
        submittedAt: new Date().toISOString(),
        proc: null,
        history: ['submitted'],
        finishedAt: null,
      };
      runs.set(name, r);
      const hold = faults.holdProvisioning > 0;
      if (hold) faults.holdProvisioning--;
      const fail = !hold && faults.failProvisioning > 0;
      if (fail) faults.failProvisioning--;
      later(STEP_MS, () => {
        if (r.status !== 'submitted') return;
        setStatus(r, 'provisioning');
        if (fail) {
          later(STEP_MS, () => {
            if (r.status !== 'provisioning') return;
            r.terminationReason = 'job_failed';
            setStatus(r, 'terminating');
            later(STEP_MS, () => setStatus(r, 'failed'));
          });
        } else if (!hold) later(STEP_MS, () => execute(r));
      });
      if (faults.apply5xxAfterCreate > 0) {
        faults.apply5xxAfterCreate--;
        return error(res, 502, 'Bad gateway', 'server_error');
      }
      return send(res, 200, view(r));
    }
    if (route === 'get') {
      const body = check(GetRunRequestSchema);
      if (!body) return;
      calls.push({ route, runName: body.run_name ?? null });
      if (faults.get5xx > 0) {
        faults.get5xx--;
        return error(res, 500, 'Internal server error', 'server_error');
      }
      const r = body.run_name ? runs.get(body.run_name) : undefined;
      if (!r) return error(res, 400, 'Run not found', 'resource_not_exists');
      return send(res, 200, view(r));
    }
    if (route === 'logs/poll') {
      const body = check(PollLogsRequestSchema);
      if (!body) return;
      calls.push({ route, runName: body.run_name });
      if (faults.logs5xx > 0) {
        faults.logs5xx--;
        return error(res, 500, 'Internal server error', 'server_error');
      }
      const r = runs.get(body.run_name);
      // services/logs/filelog.py reads <run>/<submission>/job.log: an unknown one is no logs (IOError → [])
      if (!r || r.submissionId !== body.job_submission_id) return send(res, 200, { logs: [] });
      // the cloud log storages honour `limit` (filelog.py does not yet: the client cuts itself)
      const limit = body.limit ?? 100;
      const events = body.descending ? r.logs.toReversed() : r.logs;
      return send(res, 200, { logs: events.slice(0, limit), next_token: null });
    }
    if (route === 'stop') {
      const body = check(StopRunsRequestSchema);
      if (!body) return;
      calls.push({ route, runName: body.runs_names.join(',') });
      if (faults.stop5xx > 0) {
        faults.stop5xx--;
        return error(res, 503, 'Service unavailable', 'server_error');
      }
      if (faults.stopHang > 0) {
        faults.stopHang--;
        hung.add(res);
        return;
      }
      for (const n of body.runs_names) {
        const r = runs.get(n);
        if (r) stopRun(r, body.abort);
      }
      return send(res, 200, null);
    }
    // ListRunsRequest (server/schemas/runs.py): only the fields a client filters by
    calls.push({ route, runName: null });
    return send(res, 200, [...runs.values()].map(view));
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((e: Error) => error(res, 500, e.message, 'server_error'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    project,
    token,
    runs,
    invalid,
    calls,
    faults,
    active: () => [...runs.values()].filter((r) => !finished(r)),
    async close() {
      for (const t of timers) clearTimeout(t);
      for (const res of hung) res.destroy();
      for (const r of runs.values()) {
        if (r.proc?.pid) {
          try {
            process.kill(-r.proc.pid, 'SIGKILL');
          } catch {
            // already gone
          }
        }
      }
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
