import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { z } from 'zod';
import { canLaunchJobs } from './container.ts';
import { GetFleetRequest, getFleet, type StandInFleet } from './fleets.ts';
import {
  ApplyRunPlanRequest,
  GetRunRequest,
  httpError,
  jsonInvalidBody,
  ListRunsRequest,
  notAuthenticated,
  PollLogsRequest,
  type RunSpecInput,
  StopRunsRequest,
  serverClientError,
  validationErrorBody,
} from './models.ts';
import { jobSpecOf, newRun, runFinished, STEP_MS, type StandInRun, step, stopRun } from './runs.ts';

/**
 * A stand-in for a dstack server (no dstack server is installable here: PyPI is unreachable),
 * real HTTP on loopback, played from dstack's own source — dstackai/dstack tag 0.21.2 (commit
 * 0dee238d47fafc89bdde75b83ee99a0fae7c08a1; paths under `src/dstack/_internal/` unless said):
 *
 * - routes: `POST /api/project/{project}/runs/{apply,get,stop}` (server/routers/runs.py),
 *   `POST /api/runs/list`, `POST /api/project/{project}/logs/poll` (server/routers/logs.py);
 * - auth (server/security/permissions.py `ProjectMember`, server/utils/routers.py): no bearer →
 *   403 "Not authenticated" (FastAPI `HTTPBearer`), an unknown token → 403 `{"detail": {"msg":
 *   "Invalid token"}}`, an unknown project → 404 `{"detail": {"msg": "Not found"}}`;
 * - bodies validated against `./models.ts` (written from the server's pydantic models, not from
 *   the agent): a mismatch is FastAPI's 422 and is recorded in `invalid` so a test fails on it;
 *   a `ServerClientError` is 400 `{"detail": [{"msg", "code"}]}` (server/app.py);
 * - `runs/apply` (services/runs/__init__.py `apply_plan`, services/runs/spec.py
 *   `validate_run_spec_and_set_defaults`): the run name must match `^[a-z][a-z0-9-]{1,40}$`;
 *   `cpu.arch: arm` without `image` is refused ("`image` must be set when ARM CPU requested");
 *   an image the registry does not know is refused ("Error pulling configuration for image …",
 *   services/jobs/configurators/base.py); an active run of that name is refused ("Cannot
 *   override active run. Stop the run first."), a finished one is replaced;
 * - **image and architecture** (configurators/base.py `_requirements`): no `image` means dstack's
 *   default `dstackai/base:0.15-base-ubuntu24.04`, built for linux/amd64 only
 *   (.github/workflows/docker.yml `--platform linux/amd64`), so the job requires an x86 CPU; a
 *   named image requires the one arch it is built for, or any of a multi-arch image's. A job whose
 *   requirement the fleet instance ({@link DstackStandInOptions.arch}, default `arm`: the DGX
 *   Spark's CPU) does not meet never starts: `failed_to_start_due_to_no_capacity`;
 * - run and job statuses, termination reasons, graceful stop and container removal: `./runs.ts`;
 *   the job's execution in a container-like namespace on a pty: `./container.ts`; logs and their
 *   paging with `next_token`: `./logs.ts`;
 * - fleets (`POST /api/project/{project}/fleets/get`, what an agent's enrolment check asks):
 *   `./fleets.ts`; none exists until a test adds one.
 */

export interface DstackStandInOptions {
  project?: string;
  token?: string;
  /** The fleet instances' CPU architecture (gpuhunt `CPUArchitecture`): `arm` for a DGX Spark. */
  arch?: 'x86' | 'arm';
  /** The image registry: image name → the architectures its manifest lists. */
  images?: Record<string, ('x86' | 'arm')[]>;
}

/** A multi-arch image the stand-in's registry knows by default (for tests that need one). */
export const MULTI_ARCH_IMAGE = 'ghcr.io/spark-test/ci:1';
/** An image built for linux/amd64 only, known by default. */
export const AMD64_ONLY_IMAGE = 'ghcr.io/spark-test/ci-amd64:1';
/** `get_default_image()` (configurators/base.py) with version.py's `docker_base_image = "0.15"`. */
export const DEFAULT_IMAGE = 'dstackai/base:0.15-base-ubuntu24.04';

export interface DstackStandIn {
  url: string;
  project: string;
  token: string;
  arch: 'x86' | 'arm';
  runs: Map<string, StandInRun>;
  /** The project's fleets by name (`./fleets.ts`); a test adds the ones its hosts are in. */
  fleets: Map<string, StandInFleet>;
  /** Host paths the jobs must not see (the agents' own dirs); tests add theirs. */
  hostOnly: string[];
  /** Requests a real server would have rejected as malformed (a test asserts there were none). */
  invalid: { route: string; status: number; body: unknown }[];
  /** Every request, route and run name, in order. */
  calls: { route: string; runName: string | null; body: unknown }[];
  faults: {
    /** Answer this many `stop` calls with 503 (a proxy in front of dstack). */
    stop5xx: number;
    /** Hold this many `stop` calls without answering (the client times out); nothing is stopped. */
    stopHang: number;
    /** Answer this many `get` calls with 500. */
    get5xx: number;
    /** Create the run but answer this many `apply` calls with 502 (a proxy lost the answer). */
    apply5xxAfterCreate: number;
    /** Answer this many `logs/poll` calls with 500. */
    logs5xx: number;
    /**
     * Keep this many new runs' jobs in `provisioning`: RUNS-AND-JOBS.md job STEP 3, "While
     * `dstack-shim` / `dstack-runner` is not responding, the job stays `PROVISIONING`" (the run is
     * `provisioning`, run STEP 2). dstack gives up only after a long limit (see
     * `failProvisioning`); this plays a hold shorter than that, so the controller's task-start
     * timeout (ADR 0120) is what ends it. A stop meanwhile goes `terminating → terminated`.
     */
    holdProvisioning: number;
    /**
     * Fail this many new runs while they provision, as dstack does when the runner never answers
     * (pipeline_tasks/jobs_running.py: `waiting_runner_limit_exceeded`): the job goes
     * `terminating → failed` with no exit status, the run `terminating → failed` (`job_failed`).
     */
    failProvisioning: number;
  };
  /** Runs whose status is not finished. */
  active(): StandInRun[];
  close(): Promise<void>;
}

/** `Run` (core/models/runs.py) as the server serializes it (UTC datetimes end in `Z` since 0.21). */
function view(r: StandInRun, project: string) {
  const j = r.job;
  const now = new Date().toISOString();
  const sub = {
    id: j.submissionId,
    submission_num: 0,
    deployment_num: 0,
    submitted_at: r.submittedAt,
    last_processed_at: now,
    finished_at: ['done', 'failed', 'terminated', 'aborted'].includes(j.status) ? now : null,
    inactivity_secs: null,
    status: j.status,
    status_message: j.status,
    termination_reason: j.terminationReason,
    termination_reason_message: j.terminationReasonMessage,
    exit_status: j.exitStatus,
    job_provisioning_data: null,
    job_runtime_data: null,
    error: null,
    probes: [],
    image_pull_progress: null,
  };
  return {
    id: r.id,
    project_name: project,
    user: 'spark-agent',
    fleet: null,
    submitted_at: r.submittedAt,
    last_processed_at: now,
    status: r.status,
    status_message: r.status,
    termination_reason: r.terminationReason,
    run_spec: r.spec,
    jobs: [
      {
        job_spec: {
          replica_num: 0,
          job_num: 0,
          job_name: `${r.name}-0-0`,
          jobs_per_replica: 1,
          commands: j.commands,
          env: r.spec.configuration.env ?? {},
          image_name: j.imageName,
          working_dir: j.workingDir,
          requirements: { resources: { cpu: { arch: j.arch } } },
        },
        job_submissions: [sub],
        job_connection_info: null,
      },
    ],
    latest_job_submission: sub,
    cost: 0,
    service: null,
    deployment_num: 0,
    error: null,
    deleted: false,
    next_triggered_at: null,
  };
}

const RUN_NAME = /^[a-z][a-z0-9-]{1,40}$/;

/** Starts the stand-in on a free loopback port. */
export async function startDstackStandIn(opts: DstackStandInOptions = {}): Promise<DstackStandIn> {
  if (!canLaunchJobs())
    throw new Error(
      "the dstack stand-in runs each job in its own PID and mount namespaces: it needs root and util-linux's unshare and script",
    );
  const project = opts.project ?? 'main';
  const token = opts.token ?? `dstack-${randomUUID()}`;
  const arch = opts.arch ?? 'arm';
  const images: Record<string, ('x86' | 'arm')[]> = {
    [DEFAULT_IMAGE]: ['x86'],
    [MULTI_ARCH_IMAGE]: ['x86', 'arm'],
    [AMD64_ONLY_IMAGE]: ['x86'],
    ...(opts.images ?? {}),
  };
  const runs = new Map<string, StandInRun>();
  const fleets = new Map<string, StandInFleet>();
  const hostOnly: string[] = [];
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
  const hung = new Set<ServerResponse>();
  const ticker = setInterval(() => {
    for (const r of runs.values()) if (!runFinished(r.status)) step(r, { arch, hostOnly });
  }, STEP_MS);

  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };

  /** `runs/apply`: the server's checks, then `submit_run`. */
  const apply = (spec: RunSpecInput): { status: number; body: unknown } => {
    const c = spec.configuration;
    const name = spec.run_name ?? `run-${randomUUID().slice(0, 8)}`;
    if (!RUN_NAME.test(name))
      return serverClientError("Resource name should match regex '^[a-z][a-z0-9-]{1,40}$'");
    for (const v of c.volumes ?? []) {
      const path = typeof v === 'string' ? v.split(':')[1] : v.path;
      if (!path?.startsWith('/')) return serverClientError(`Invalid volume mount path: ${path}`);
    }
    const cpu = c.resources?.cpu;
    const askedArch = typeof cpu === 'object' ? (cpu.arch ?? null) : null;
    if (askedArch === 'arm' && c.docker)
      return serverClientError('`docker: true` is not supported on ARM CPU');
    if (askedArch === 'arm' && c.image == null)
      return serverClientError('`image` must be set when ARM CPU requested');
    const imageName = c.image ?? DEFAULT_IMAGE;
    const archs = images[imageName];
    if (!archs)
      return serverClientError(
        `Error pulling configuration for image '${imageName}' from the docker registry: manifest unknown`,
      );
    // `_requirements`: unset arch → x86 for the default image, else the image's single arch
    const reqArch = askedArch ?? (c.image == null ? 'x86' : archs.length === 1 ? archs[0]! : null);
    const cur = runs.get(name);
    if (cur && !runFinished(cur.status))
      return serverClientError('Cannot override active run. Stop the run first.');
    const r = newRun(name, { ...spec, run_name: name }, jobSpecOf(spec, imageName, reqArch));
    if (faults.holdProvisioning > 0) {
      faults.holdProvisioning--;
      r.hold = true;
    } else if (faults.failProvisioning > 0) {
      faults.failProvisioning--;
      r.failStart = true;
    }
    runs.set(name, r);
    if (faults.apply5xxAfterCreate > 0) {
      faults.apply5xxAfterCreate--;
      return { status: 502, body: { detail: 'Bad gateway' } };
    }
    return { status: 200, body: view(r, project) };
  };

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
    const m = /^\/api\/project\/([^/]+)\/(runs\/apply|runs\/get|runs\/stop|logs\/poll|fleets\/get)$/.exec(
      url.pathname,
    );
    const isList = url.pathname === '/api/runs/list';
    if (!m && !isList) return send(res, 404, { detail: 'Not Found' });
    if (req.method !== 'POST') return send(res, 405, { detail: 'Method Not Allowed' });
    const route = isList ? 'list' : m![2]!.replace(/^runs\//, '');
    // FastAPI parses the JSON body before it resolves the route's dependencies (auth)
    const text = await readBody(req);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (e) {
      const body = jsonInvalidBody((e as Error).message);
      invalid.push({ route, status: 422, body });
      return send(res, 422, body);
    }
    const auth = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '');
    if (!auth) return send(res, notAuthenticated.status, notAuthenticated.body);
    if (auth[1] !== token) {
      const e = httpError(403, 'Invalid token');
      return send(res, e.status, e.body);
    }
    if (m && decodeURIComponent(m[1]!) !== project) {
      const e = httpError(404, 'Not found');
      return send(res, e.status, e.body);
    }
    const check = <S extends z.ZodType>(schema: S): z.output<S> | null => {
      const p = schema.safeParse(json);
      if (p.success) return p.data;
      const body = validationErrorBody(p.error);
      invalid.push({ route, status: 422, body });
      send(res, 422, body);
      return null;
    };
    const answer = (a: { status: number; body: unknown }) => send(res, a.status, a.body);

    if (route === 'fleets/get') {
      const body = check(GetFleetRequest);
      if (!body) return;
      calls.push({ route, runName: null, body: json });
      return answer(getFleet(fleets, body, project));
    }

    if (route === 'apply') {
      const body = check(ApplyRunPlanRequest);
      if (!body) return;
      calls.push({ route, runName: body.plan.run_spec.run_name ?? null, body: json });
      return answer(apply(body.plan.run_spec));
    }
    if (route === 'get') {
      const body = check(GetRunRequest);
      if (!body) return;
      calls.push({ route, runName: body.run_name ?? null, body: json });
      if (faults.get5xx > 0) {
        faults.get5xx--;
        return send(res, 500, { detail: 'Internal Server Error' });
      }
      const r = body.run_name ? runs.get(body.run_name) : [...runs.values()].find((x) => x.id === body.id);
      if (!r) return answer(serverClientError('Run not found', 'resource_not_exists'));
      return send(res, 200, view(r, project));
    }
    if (route === 'logs/poll') {
      const body = check(PollLogsRequest);
      if (!body) return;
      calls.push({ route, runName: body.run_name, body: json });
      if (faults.logs5xx > 0) {
        faults.logs5xx--;
        return send(res, 500, { detail: 'Internal Server Error' });
      }
      const r = runs.get(body.run_name);
      // filelog.py: a run or submission without a log file is no logs (FileNotFoundError → [])
      if (!r || r.job.submissionId !== body.job_submission_id.toLowerCase())
        return send(res, 200, { logs: [], external_url: null, next_token: null });
      return answer(r.job.log.poll(body));
    }
    if (route === 'stop') {
      const body = check(StopRunsRequest);
      if (!body) return;
      calls.push({ route, runName: body.runs_names.join(','), body: json });
      if (faults.stop5xx > 0) {
        faults.stop5xx--;
        return send(res, 503, { detail: 'Service Unavailable' });
      }
      if (faults.stopHang > 0) {
        faults.stopHang--;
        hung.add(res);
        return;
      }
      // names of no run, or of finished runs, are skipped silently (`stop_runs`)
      for (const n of body.runs_names) {
        const r = runs.get(n);
        if (r) stopRun(r, body.abort);
      }
      return send(res, 200, null);
    }
    const body = check(ListRunsRequest);
    if (!body) return;
    calls.push({ route, runName: null, body: json });
    const all = [...runs.values()].filter((r) => !body.only_active || !runFinished(r.status));
    return send(
      res,
      200,
      all.reverse().map((r) => view(r, project)),
    );
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((e: Error) => send(res, 500, { detail: e.message }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    project,
    token,
    arch,
    runs,
    fleets,
    hostOnly,
    invalid,
    calls,
    faults,
    active: () => [...runs.values()].filter((r) => !runFinished(r.status)),
    async close() {
      clearInterval(ticker);
      for (const res of hung) res.destroy();
      for (const r of runs.values()) r.job.proc?.remove();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The run's `env` as a mapping (dstack's `Env` also takes a `VAR=value` list). */
export function envOf(r: StandInRun): Record<string, string> {
  const e = r.spec.configuration.env ?? {};
  if (!Array.isArray(e)) return Object.fromEntries(Object.entries(e).map(([k, v]) => [k, String(v)]));
  return Object.fromEntries(
    e.filter((x) => x.includes('=')).map((x) => [x.slice(0, x.indexOf('=')), x.slice(x.indexOf('=') + 1)]),
  );
}

/** The job's output as the runner shipped it (pty: one stream, `\r\n` line ends). */
export const outputOf = (r: StandInRun): string => r.job.log.text();
