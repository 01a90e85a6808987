import { GitHubError } from './client.ts';
import type { GitHubService } from './service.ts';

/**
 * Deliveries GitHub could not make while the controller was down (ADR 0091). GitHub does not
 * redeliver failed webhook deliveries by itself; its documented way is to list the App's
 * deliveries (`GET /app/hook/deliveries`, App JWT, cursor pagination, newest first) and ask for a
 * redelivery of the failed ones (`POST /app/hook/deliveries/{delivery_id}/attempts`) — GitHub
 * docs, "Handling failed webhook deliveries" and "Automatically redelivering failed deliveries for
 * a GitHub App webhook". The redelivery keeps the delivery's GUID (`X-GitHub-Delivery`), so the
 * inbox still processes it once.
 */

/** How often the sweep runs (besides once at process start). */
export const REDELIVERY_INTERVAL_MS = 10 * 60_000;
/** How far back the sweep looks: deliveries older than this are left to an operator. */
export const REDELIVERY_LOOKBACK_MS = 60 * 60_000;
/** Pages of 100 deliveries read per sweep at most (a bound on a flood of failures). */
const MAX_PAGES = 10;
/** Redeliveries asked for per sweep at most; the rest wait for the next sweep. */
const MAX_REQUESTS = 50;

/** One attempt of a delivery as `GET /app/hook/deliveries` lists it (the fields used here). */
interface HookDelivery {
  id: number;
  guid: string;
  delivered_at: string;
  redelivery: boolean;
  status: string;
  status_code: number;
  event: string;
  action: string | null;
}

export interface RedeliverySweep {
  listed: number;
  requested: string[];
  failed: string[];
}

/** The `cursor` page GitHub's `Link: <…>; rel="next"` names, as a path under the API base. */
function nextPage(link: string | null): string | null {
  const m = /<([^>]+)>;\s*rel="next"/.exec(link ?? '');
  if (!m) return null;
  const q = new URL(m[1]!, 'https://api.github.invalid').searchParams;
  return `/app/hook/deliveries?${q.toString()}`;
}

const delivered = (d: HookDelivery) => d.status_code >= 200 && d.status_code < 300;

/**
 * Lists the App's deliveries of the last {@link REDELIVERY_LOOKBACK_MS} and asks GitHub to
 * redeliver each one that never got a 2xx, is not in our inbox (by GUID), was never redelivered
 * (by anyone) and was not asked for by us before: one redelivery per GUID. Runs at the first tick
 * of a process and then every {@link REDELIVERY_INTERVAL_MS} (a ledger mark shared by every
 * controller process); returns null when it did not run.
 */
export async function sweepMissedDeliveries(
  svc: GitHubService,
  opts: { force?: boolean; startSweep?: boolean } = {},
): Promise<RedeliverySweep | null> {
  if (!svc.client.configured) return null;
  // one sweep at a time per service: two overlapping sweeps would both ask for the same GUIDs
  const state = svc.redelivery;
  const run = state.inFlight.then(
    () => sweepOnce(svc, opts),
    () => sweepOnce(svc, opts),
  );
  state.inFlight = run.catch(() => null);
  return run;
}

async function sweepOnce(
  svc: GitHubService,
  opts: { force?: boolean; startSweep?: boolean },
): Promise<RedeliverySweep | null> {
  const { ledger } = svc;
  // a Worker isolate is no controller start (isolates come and go): it keeps to the interval
  const state = svc.redelivery;
  const atStart = opts.startSweep !== false && !state.startSwept;
  // the module tick calls this every second: until the last sweep this process saw is an interval
  // old nothing can be due, so no write transaction (and no writer lock) is taken for it
  const seen = state.lastSweepSeen;
  if (!atStart && !opts.force && seen != null && ledger.clock() - seen < REDELIVERY_INTERVAL_MS) return null;
  const { due, sweptAt } = await ledger.github.claimRedeliverySweep(
    REDELIVERY_INTERVAL_MS,
    atStart || !!opts.force,
  );
  state.lastSweepSeen = sweptAt;
  state.startSwept = true;
  if (!due) return null;

  const since = ledger.clock() - REDELIVERY_LOOKBACK_MS;
  const byGuid = new Map<string, HookDelivery[]>();
  let listed = 0;
  let path: string | null = '/app/hook/deliveries?per_page=100';
  for (let page = 0; path && page < MAX_PAGES; page++) {
    const res: { data: HookDelivery[]; headers: Headers } = await svc.client.request<HookDelivery[]>(
      'GET',
      path,
      { as: 'app' },
    );
    let older = false;
    for (const d of res.data) {
      // newest first: once a page reaches past the look-back there is nothing more to read
      if (Date.parse(d.delivered_at) < since) {
        older = true;
        continue;
      }
      listed++;
      const attempts = byGuid.get(d.guid);
      if (attempts) attempts.push(d);
      else byGuid.set(d.guid, [d]);
    }
    path = older ? null : nextPage(res.headers.get('link'));
  }

  const failedGuids = [...byGuid].filter(([, as]) => !as.some(delivered) && !as.some((a) => a.redelivery));
  const out: RedeliverySweep = { listed, requested: [], failed: [] };
  if (!failedGuids.length) return out;
  const known = await ledger.inbox.holds(failedGuids.map(([g]) => g));
  const asked = await ledger.inbox.redeliveriesRequested();
  const todo = failedGuids
    .filter(([g]) => !known.has(g) && asked[g] == null)
    .map(([, as]) => as.reduce((a, b) => (Date.parse(b.delivered_at) > Date.parse(a.delivered_at) ? b : a)))
    // oldest first: the inbox orders deliveries by arrival, so they arrive in GitHub's order
    .sort((a, b) => Date.parse(a.delivered_at) - Date.parse(b.delivered_at))
    .slice(0, MAX_REQUESTS);

  for (const d of todo) {
    try {
      await svc.client.request('POST', `/app/hook/deliveries/${d.id}/attempts`, { as: 'app' });
    } catch (e) {
      // not remembered: the next sweep asks again while the delivery is within the look-back
      svc.log.warn('webhook redelivery request failed', { guid: d.guid, error: String(e) });
      out.failed.push(d.guid);
      await ledger.inbox.recordRedeliveryRequest({ guid: d.guid, ok: false, keepMs: 0, cause: '', data: {} });
      if (e instanceof GitHubError && e.retryAt != null) break;
      continue;
    }
    out.requested.push(d.guid);
    await ledger.inbox.recordRedeliveryRequest({
      guid: d.guid,
      ok: true,
      // only GUIDs still inside the look-back can be candidates again
      keepMs: 2 * REDELIVERY_LOOKBACK_MS,
      cause: `GitHub could not deliver ${d.event}${d.action ? `.${d.action}` : ''} at ${d.delivered_at} (${d.status_code ? `HTTP ${d.status_code}` : d.status}); redelivery requested`,
      data: { hookDeliveryId: d.id, event: d.event, statusCode: d.status_code },
    });
  }
  return out;
}
