import {
  type DstackRun,
  errorMessages,
  FINISHED_RUN_STATUSES,
  JobSubmissionLogsSchema,
  RunSchema,
  type RunSpec,
} from './dstack-api.ts';

/** The dstack server did not answer clearly (unreachable, timeout, 5xx, a body of the wrong shape). */
export class DstackUncertain extends Error {
  override name = 'DstackUncertain';
}

/** dstack refused the request (4xx other than "not found"): the message says why. */
export class DstackRefused extends Error {
  override name = 'DstackRefused';
}

export interface DstackClientOptions {
  /** Base URL of the dstack server, e.g. `https://dstack.internal:3000`. */
  url: string;
  project: string;
  token: string;
  timeoutMs: number;
}

/** A dstack server's runs API (shapes and routes: `dstack-api.ts`). */
export interface DstackClient {
  /** `POST /api/project/{p}/runs/apply` with `ApplyRunPlanRequest{plan:{run_spec}, force:false}`. */
  apply(spec: RunSpec): Promise<DstackRun>;
  /** `POST /api/project/{p}/runs/get` with `GetRunRequest{run_name}`; null when dstack has no such run. */
  get(runName: string): Promise<DstackRun | null>;
  /** `POST /api/project/{p}/runs/stop` with `StopRunsRequest{runs_names, abort}`. */
  stop(runNames: string[], abort: boolean): Promise<void>;
  /**
   * The last `limit` output events of a job submission, oldest first, decoded: `POST
   * /api/project/{p}/logs/poll` with `PollLogsRequest{run_name, job_submission_id, descending: true,
   * limit}` (dstack answers newest first when descending).
   */
  tailLogs(runName: string, jobSubmissionId: string, limit: number): Promise<string>;
  /**
   * A job submission's whole output, oldest first, page by page (`descending: false`, `limit`
   * 1000, following `next_token` until dstack gives none: its log storage sets one exactly when
   * more events follow, services/logs/filelog.py); at most `maxPages` pages, else `complete` is
   * false.
   */
  readLogs(
    runName: string,
    jobSubmissionId: string,
    maxPages?: number,
  ): Promise<{ text: string; complete: boolean }>;
}

/** Whether nothing of `run` executes any more (dstack's `RunStatus.is_finished`). */
export const isFinished = (run: DstackRun): boolean => FINISHED_RUN_STATUSES.includes(run.status);

/** A client for dstack's server REST API over `fetch`, bearer-token authenticated. */
export function createDstackClient(o: DstackClientOptions): DstackClient {
  const project = `${o.url.replace(/\/+$/, '')}/api/project/${encodeURIComponent(o.project)}`;
  const call = async (route: string, body: unknown): Promise<{ status: number; json: unknown }> => {
    let res: Response;
    try {
      res = await fetch(`${project}/${route.includes('/') ? route : `runs/${route}`}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${o.token}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(o.timeoutMs),
      });
    } catch (e) {
      throw new DstackUncertain(`dstack ${route}: ${(e as Error).message}`);
    }
    const text = await res.text().catch(() => '');
    let json: unknown = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (res.status >= 500) throw new DstackUncertain(`dstack ${route}: HTTP ${res.status}`);
    return { status: res.status, json };
  };
  const refused = (route: string, status: number, json: unknown): DstackRefused => {
    const msg =
      errorMessages(json)
        ?.map((d) => d.msg)
        .join('; ') || `HTTP ${status}`;
    return new DstackRefused(`dstack ${route} refused: ${msg.slice(0, 300)}`);
  };
  const run = (route: string, json: unknown): DstackRun => {
    const r = RunSchema.safeParse(json);
    if (!r.success)
      throw new DstackUncertain(`dstack ${route}: unexpected run shape (${r.error.issues[0]?.message})`);
    return r.data;
  };
  return {
    async apply(spec) {
      const r = await call('apply', { plan: { run_spec: spec, current_resource: null }, force: false });
      if (r.status !== 200) throw refused('apply', r.status, r.json);
      return run('apply', r.json);
    },
    async get(runName) {
      const r = await call('get', { run_name: runName });
      if (r.status === 200) return run('get', r.json);
      // ResourceNotExistsError is answered 400 with code resource_not_exists (server/app.py)
      if (r.status === 400 && errorMessages(r.json)?.some((d) => d.code === 'resource_not_exists'))
        return null;
      if (r.status === 401 || r.status === 403) throw refused('get', r.status, r.json);
      throw new DstackUncertain(`dstack get: HTTP ${r.status}`);
    },
    async tailLogs(runName, jobSubmissionId, limit) {
      const r = await call('logs/poll', {
        run_name: runName,
        job_submission_id: jobSubmissionId,
        start_time: null,
        end_time: null,
        descending: true,
        limit,
        diagnose: false,
      });
      if (r.status !== 200) throw refused('logs/poll', r.status, r.json);
      const p = JobSubmissionLogsSchema.safeParse(r.json);
      if (!p.success) throw new DstackUncertain('dstack logs/poll: unexpected logs shape');
      return p.data.logs
        .toReversed()
        .map((e) => Buffer.from(e.message, 'base64').toString('utf8'))
        .join('');
    },
    async readLogs(runName, jobSubmissionId, maxPages = 64) {
      const chunks: Buffer[] = [];
      let next: string | null = null;
      for (let page = 0; page < maxPages; page++) {
        const r = await call('logs/poll', {
          run_name: runName,
          job_submission_id: jobSubmissionId,
          start_time: null,
          end_time: null,
          descending: false,
          limit: 1000,
          diagnose: false,
          ...(next ? { next_token: next } : {}),
        });
        if (r.status !== 200) throw refused('logs/poll', r.status, r.json);
        const p = JobSubmissionLogsSchema.safeParse(r.json);
        if (!p.success) throw new DstackUncertain('dstack logs/poll: unexpected logs shape');
        for (const e of p.data.logs) chunks.push(Buffer.from(e.message, 'base64'));
        next = p.data.next_token ?? null;
        if (!next) return { text: Buffer.concat(chunks).toString('utf8'), complete: true };
      }
      return { text: Buffer.concat(chunks).toString('utf8'), complete: false };
    },
    async stop(runNames, abort) {
      const r = await call('stop', { runs_names: runNames, abort });
      if (r.status !== 200) throw refused('stop', r.status, r.json);
    },
  };
}
