import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { DstackEnrolment } from '../core/model.ts';
import type { AgentConfig } from './config.ts';
import { errorMessages } from './executor/dstack-api.ts';

/**
 * The host's dstack enrolment, for the heartbeat (docs/adr/0166-dstack-enrolment-fact.md): the
 * agent asks its dstack server for the on-prem SSH fleet that holds this host — the fleet every
 * run of this host is pinned to (docs/executors.md "Operator setup") — with the agent's own
 * token and project, as the executor would. Enrolled means dstack answered, the fleet is
 * `active`, and one of its instances is available (`idle` or `busy`), reachable and not failing
 * its health checks: a run pinned to the fleet can then land on this host.
 *
 * dstack's API, from its source (dstackai/dstack tag 0.21.2, commit
 * 0dee238d47fafc89bdde75b83ee99a0fae7c08a1, under `src/dstack/_internal/`):
 * - `POST /api/project/{project_name}/fleets/get` with `GetFleetRequest{name}` answers `Fleet`
 *   (server/routers/fleets.py `get_fleet`, server/schemas/fleets.py); a fleet that does not exist
 *   is `ResourceNotExistsError` → 400 `{"detail": [{"code": "resource_not_exists"}]}`
 *   (server/app.py); a token that is not a member of the project → 403 (security/permissions.py
 *   `check_can_access_fleet`), an unknown token → 403 `Invalid token`, an unknown project → 404
 *   (server/deps.py `Project`);
 * - `Fleet{name, status, instances}` with `FleetStatus` submitted | active | terminating |
 *   terminated | failed (core/models/fleets.py); `Instance{name, status, unreachable,
 *   health_status}` with `InstanceStatus` pending | provisioning | idle | busy | terminating |
 *   terminated, available when idle or busy (`is_available`), and `HealthStatus` healthy |
 *   warning | failure (core/models/instances.py, core/models/health.py).
 */

/** How often the agent asks again; the heartbeat between carries the last answer. */
export const ENROLMENT_CHECK_INTERVAL_MS = 60_000;
/** Upper bound of one check: it runs inside a heartbeat. */
const MAX_CHECK_MS = 10_000;

const InstanceSchema = z.object({
  name: z.string(),
  status: z.string(),
  unreachable: z.boolean().optional(),
  health_status: z.string().optional(),
});
const FleetSchema = z.object({
  name: z.string(),
  status: z.string(),
  status_message: z.string().nullable().optional(),
  instances: z.array(InstanceSchema),
});

const cut = (s: string, n = 200) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

/** Asks dstack once; never throws (a failure is a not-enrolled answer saying why). */
export async function checkDstackEnrolment(
  d: NonNullable<AgentConfig['dstack']>,
  hostId: string,
  fetchImpl: typeof fetch = fetch,
): Promise<DstackEnrolment> {
  const fleet = d.fleet ?? hostId;
  const no = (detail: string): DstackEnrolment => ({ fleet, ok: false, detail: cut(detail, 500) });
  let token: string;
  try {
    token = readFileSync(d.tokenFile, 'utf8').trim();
  } catch (e) {
    return no(
      `cannot read dstack.tokenFile ${d.tokenFile}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
    );
  }
  const url = `${d.url.replace(/\/+$/, '')}/api/project/${encodeURIComponent(d.project)}/fleets/get`;
  let res: Response;
  try {
    res = await fetchImpl(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: fleet }),
      signal: AbortSignal.timeout(Math.min(d.requestTimeoutS * 1000, MAX_CHECK_MS)),
    });
  } catch (e) {
    const cause = (e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message;
    return no(`dstack server ${d.url} unreachable (${cut(String(cause), 120)})`);
  }
  const text = await res.text().catch(() => '');
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  const why = errorMessages(json)
    ?.map((m) => m.msg)
    .join('; ');
  if (res.status === 400 && errorMessages(json)?.some((m) => m.code === 'resource_not_exists'))
    return no(`dstack has no fleet "${fleet}" in project ${d.project}`);
  if (res.status === 401 || res.status === 403)
    return no(
      `dstack refused the agent's token for project ${d.project} (${res.status}${why ? ` ${cut(why, 120)}` : ''})`,
    );
  if (res.status === 404) return no(`dstack has no project "${d.project}" (404)`);
  if (res.status !== 200) return no(`dstack answered ${res.status}${why ? `: ${cut(why, 200)}` : ''}`);
  const f = FleetSchema.safeParse(json);
  if (!f.success) return no('dstack answered a fleet of an unexpected shape');
  const fl = f.data;
  if (fl.status !== 'active')
    return no(
      `fleet "${fleet}" is ${fl.status}${fl.status_message ? ` (${cut(fl.status_message, 120)})` : ''}`,
    );
  const usable = fl.instances.find(
    (i) =>
      (i.status === 'idle' || i.status === 'busy') && i.unreachable !== true && i.health_status !== 'failure',
  );
  if (!usable) {
    const seen = fl.instances
      .map(
        (i) =>
          `${i.name} ${i.status}${i.unreachable ? ', unreachable' : ''}${i.health_status === 'failure' ? ', health failure' : ''}`,
      )
      .join('; ');
    return no(`fleet "${fleet}" has no available instance (${seen ? cut(seen, 300) : 'no instances'})`);
  }
  return { fleet, ok: true, detail: `fleet "${fleet}" active; instance ${usable.name} ${usable.status}` };
}

/**
 * The enrolment as of at most {@link ENROLMENT_CHECK_INTERVAL_MS} ago (kept per `key`, the agent's
 * step context); null without a dstack section. The first call waits for the answer; later ones
 * answer the last one at once and, when it is older, ask again in the background (one question
 * at a time), so a slow or unreachable dstack never holds a heartbeat back.
 */
export function createEnrolmentCache(check = checkDstackEnrolment) {
  const last = new WeakMap<object, { at: number; value: DstackEnrolment }>();
  const asking = new WeakMap<object, Promise<DstackEnrolment>>();
  return async (key: object, cfg: AgentConfig, now: number): Promise<DstackEnrolment | null> => {
    const d = cfg.dstack;
    if (!d) return null;
    const ask = () => {
      let p = asking.get(key);
      if (!p) {
        p = check(d, cfg.hostId)
          .then((value) => {
            last.set(key, { at: now, value });
            return value;
          })
          .finally(() => asking.delete(key));
        asking.set(key, p);
      }
      return p;
    };
    const hit = last.get(key);
    if (!hit) return ask();
    if (now - hit.at >= ENROLMENT_CHECK_INTERVAL_MS) void ask();
    return hit.value;
  };
}

/** The agent's one cache (one agent per process). */
export const dstackEnrolment = createEnrolmentCache();
