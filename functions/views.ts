import { planAdmission } from '../core/admission.ts';
import { describeEta, type Eta } from '../core/eta.ts';
import {
  type HostState,
  notRunPhrase,
  type ReservationKind,
  type ReservationStatus,
  type Suite,
  type Topology,
} from '../core/model.ts';
import type { Ledger } from './ledger/ledger.ts';
import { toHostRecord, toLeaseRecord, toReservationRecord } from './ledger/ledger.ts';
import { queueEtas } from './queue-eta.ts';

/**
 * Sanitized, public views of the ledger (docs/architecture.md "Observability"). These types are the only
 * thing the dashboard, the public JSON APIs and /metrics render from: they have no field for
 * host addresses, usernames, commands, environment values, model paths, credentials, raw logs
 * or fencing tokens, so none can leak by accident.
 */

export interface HostView {
  id: string;
  pool: string;
  gpus: number;
  state: HostState;
  managed: boolean;
  homeService: string | null;
  /** Health of the home service in words a person reads: serving, stopped, restoring, failed. */
  serviceHealth: 'serving' | 'stopped' | 'starting' | 'draining' | 'failed' | 'none' | 'unknown';
  lastHeartbeatAgeS: number | null;
  gpuProcessCount: number | null;
  reservation: { id: string; kind: ReservationKind; topology: Topology; status: ReservationStatus } | null;
  /** For held/draining hosts: which request it is kept for. */
  keptFor: string | null;
  note: string | null;
}

export interface QueueItemView {
  id: string;
  position: number | null;
  kind: ReservationKind;
  priority: number;
  topology: Topology;
  status: ReservationStatus;
  suite: Suite | null;
  repo: string | null;
  pr: number | null;
  prUrl: string | null;
  headSha: string | null;
  hosts: string[];
  reason: string | null;
  ageS: number;
  /** The host a targeted (development) request asked for, else null. */
  targetHost: string | null;
  /** Queued only: when it should start (core/eta.ts), epoch ms range, or why it cannot. */
  eta: { startLo: string | null; startHi: string | null; text: string; blocked: string | null } | null;
  /** Active only: when its lease runs out unless renewed (earliest of its hosts), ISO time. */
  leaseExpiresAt: string | null;
  /** Who holds it, by class only (`api`, `github`, …): never a user or token name. */
  holderClass: string;
}

export interface FleetView {
  generatedAt: string;
  /** True only when every configured host is adopted and heartbeating. */
  managed: boolean;
  hosts: HostView[];
}

export interface QueueView {
  generatedAt: string;
  queued: QueueItemView[];
  active: QueueItemView[];
}

const SHA = /^[0-9a-f]{7,64}$/i;
const REPO = /^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/;

/**
 * Why a host is quarantined, as a fixed public template (the stored note may name paths and
 * commands): a failed restore, a cleanup its agent could not finish, or work an emergency ended
 * without its agent's confirmation (ADR 0156).
 */
function quarantineNote(note: string | null): string {
  if (note?.startsWith('cleanup failed'))
    return 'quarantined: cleanup after a lease failed; operator must clear';
  if (note?.startsWith('emergency terminate'))
    return 'quarantined: cleanup not confirmed; operator must clear';
  return 'quarantined: restore failed; operator must clear';
}

function prUrl(webBase: string, repo: string | null, pr: number | null): string | null {
  if (!repo || pr == null || !REPO.test(repo)) return null;
  return `${webBase}/${repo}/pull/${pr}`;
}

/** github.com for api.github.com, https://HOST for a GHES https://HOST/api/v3. */
export function githubWebBase(apiUrl: string): string {
  const u = new URL(apiUrl);
  if (u.hostname === 'api.github.com') return 'https://github.com';
  return `${u.protocol}//${u.host}`;
}

export type Views = {
  fleet: FleetView;
  queue: QueueView;
  /**
   * Each queued reservation's wait reason as operators read it (scrubbed by {@link redactText},
   * repositories under their real names). Authenticated views only: `queue` holds the public
   * text, in which an aliased repository is named by its alias alone.
   */
  operatorReasons: ReadonlyMap<string, string | null>;
};

/** The fleet and queue views, computed once per ledger version ({@link createViewsMemo}). */
export type ViewsMemo = { get(): Promise<Views> };

/**
 * One per controller (docs/adr/0215-controller-owns-its-services.md), because without it every
 * queued check-run render, scrape, describe and sweep recomputed admission and ETAs for the whole
 * queue. Reused while the ledger's {@link Ledger.version} is unchanged and both its clock and real
 * time have moved less than `server.publicViewCacheMs` (ages follow the clock; another process's
 * changes reach this one within that bound). A failed computation is not reused.
 */
export function createViewsMemo(ledger: Ledger): ViewsMemo {
  let hit: { version: number; now: number; at: number; views: Promise<Views> } | null = null;
  const fresh = (h: NonNullable<typeof hit>, version: number, now: number, at: number) => {
    const maxAge = ledger.config.server.publicViewCacheMs;
    // real time too: a test clock may stand still while another process changes the ledger
    return h.version === version && now >= h.now && now - h.now < maxAge && at - h.at < maxAge;
  };
  return {
    get() {
      const [now, version, at] = [ledger.clock(), ledger.version, performance.now()];
      if (hit && fresh(hit, version, now, at)) return hit.views;
      const entry = { version, now, at, views: computeViews(ledger, now) };
      hit = entry;
      entry.views.catch(() => {
        if (hit === entry) hit = null;
      });
      return entry.views;
    },
  };
}

async function computeViews(ledger: Ledger, now: number): Promise<Views> {
  const { hostRows, leaseRows, resvRows, keptSlots } = await ledger.loadAdmissionInput(undefined);
  const plan = planAdmission({
    now,
    config: ledger.config,
    hosts: hostRows.map(toHostRecord),
    leases: leaseRows.map(toLeaseRecord),
    reservations: resvRows.map(toReservationRecord),
    keptSlots,
  });
  const web = githubWebBase(ledger.config.github.apiUrl);
  const resvById = new Map(resvRows.map((r) => [r.id, r]));
  const hostsOf = new Map<string, string[]>();
  for (const l of leaseRows)
    hostsOf.set(l.reservationId, [...(hostsOf.get(l.reservationId) ?? []), l.hostId]);
  const kept = new Map<string, string>();
  for (const h of plan.holds) kept.set(h.hostId, h.reservationId);
  for (const d of plan.draining) kept.set(d.hostId, d.reservationId);
  const positions = new Map(plan.waits.map((w) => [w.reservationId, w]));
  const queuedOrder = resvRows
    .filter((r) => r.status === 'queued')
    .sort(
      (a, b) =>
        (positions.get(a.id)?.position ?? a.position ?? 1e9) -
        (positions.get(b.id)?.position ?? b.position ?? 1e9),
    )
    .map((r) => r.id);
  const etas = await queueEtas(ledger, {
    now,
    hostStates: plan.hostStates,
    hostIds: hostRows.map((h) => h.id),
    leaseRows,
    resvRows,
    order: queuedOrder,
  });

  const hosts: HostView[] = hostRows
    .map((h) => {
      const rec = toHostRecord(h);
      const lease = leaseRows.find((l) => l.hostId === h.id);
      const r = lease ? resvById.get(lease.reservationId) : undefined;
      return {
        id: h.id,
        pool: h.pool,
        gpus: h.gpus,
        state: plan.hostStates[h.id] ?? 'unknown',
        managed: h.managed,
        homeService: h.homeService,
        serviceHealth: h.homeService
          ? h.phase === 'restoring'
            ? 'starting'
            : (rec.facts?.serviceState ?? 'unknown')
          : 'none',
        lastHeartbeatAgeS:
          h.lastHeartbeatAt == null ? null : Math.max(0, Math.round((now - h.lastHeartbeatAt) / 1000)),
        gpuProcessCount: rec.facts?.gpuProcesses?.length ?? null,
        reservation: r
          ? {
              id: r.id,
              kind: r.kind as ReservationKind,
              topology: r.topology as Topology,
              status: r.status as ReservationStatus,
            }
          : null,
        keptFor: kept.get(h.id) ?? null,
        // admission notes quote agent-reported errors (gpuError): scrub before they go public
        note: plan.hostNotes[h.id]
          ? redactText(plan.hostNotes[h.id])
          : h.phase === 'quarantined'
            ? quarantineNote(h.note)
            : // also while the stale heartbeat shows it offline (a pair node that went dark)
              h.phase === 'release-required'
              ? 'release-required: nothing is granted here until its agent confirms cleanup'
              : null,
      } satisfies HostView;
    })
    .sort((a, b) => a.id.localeCompare(b.id, 'en', { numeric: true }));

  // a repository with an operator-chosen alias is shown under the alias only —
  // no PR number, no commit, no link, nothing that points back at it; the others as they are,
  // or — with `publicRepos: "aliased"` — not at all (docs/adr/0151-aliases-reveal-nothing.md)
  const shownAs = publicRepoNames(ledger.config);
  const item = (r: (typeof resvRows)[number]): QueueItemView => {
    const w = positions.get(r.id);
    const shown = shownAs(r.repo);
    const open = shown?.kind === 'public';
    const secret = shown?.kind === 'alias' || shown?.kind === 'hidden';
    // aliases first: redactText would turn `owner/name@commit` into `owner/[account]`
    const raw = r.status === 'queued' ? (w?.reason ?? r.reason) : null;
    // work releasing because it never ran says so, as a fixed phrase (the cause names hosts and
    // dstack runs): the active table tells it from a test that ran (ADR 0177)
    const reason = raw
      ? redactText(publicReason(raw, shownAs, secret)) || null
      : r.status === 'releasing'
        ? notRunPhrase(r.outcome)
        : null;
    return {
      id: r.id,
      position: r.status === 'queued' ? (w?.position ?? r.position ?? null) : null,
      kind: r.kind as ReservationKind,
      priority: r.priority,
      topology: r.topology as Topology,
      status: r.status as ReservationStatus,
      suite: r.suite as Suite | null,
      repo: shown?.kind === 'hidden' ? null : (shown?.name ?? null),
      pr: open ? r.pr : null,
      prUrl: open ? prUrl(web, r.repo, r.pr) : null,
      headSha: !secret && r.headSha && SHA.test(r.headSha) ? r.headSha : null,
      hosts: hostsOf.get(r.id) ?? [],
      reason,
      ageS: Math.max(0, Math.round((now - r.createdAt) / 1000)),
      targetHost: r.targetHost,
      eta: etaView(etas.get(r.id), now),
      leaseExpiresAt:
        r.status === 'queued'
          ? null
          : (() => {
              const ls = leaseRows.filter((l) => l.reservationId === r.id && l.status !== 'released');
              return ls.length ? new Date(Math.min(...ls.map((l) => l.expiresAt))).toISOString() : null;
            })(),
      holderClass: holderClassOf(r.requester),
    };
  };
  const queued = resvRows
    .filter((r) => r.status === 'queued')
    .map(item)
    .sort((a, b) => (a.position ?? 1e9) - (b.position ?? 1e9));
  const active = resvRows.filter((r) => r.status !== 'queued').map(item);
  const generatedAt = new Date(now).toISOString();
  return {
    fleet: {
      generatedAt,
      managed:
        hosts.length > 0 && hosts.every((h) => h.managed && h.state !== 'offline' && h.state !== 'unknown'),
      hosts,
    },
    queue: { generatedAt, queued, active },
    operatorReasons: new Map(
      resvRows
        .filter((r) => r.status === 'queued')
        .map((r) => [r.id, redactText(positions.get(r.id)?.reason ?? r.reason) || null] as const),
    ),
  };
}

/** How a repository appears on public surfaces: its own name, an alias, or not at all. */
type ShownRepo = { kind: 'public' | 'alias'; name: string } | { kind: 'hidden' };

/**
 * The public name of each repository under `repoAliases` and `publicRepos`. GitHub treats
 * `owner/name` case-insensitively, so an alias configured as `Acme/Engine` covers `acme/engine`.
 * Null for no repository (development work) or a malformed name.
 */
export function publicRepoNames(
  config: Pick<Ledger['config'], 'repoAliases' | 'publicRepos'>,
): (repo: string | null) => ShownRepo | null {
  const aliases = new Map(Object.entries(config.repoAliases).map(([k, v]) => [k.toLowerCase(), v]));
  return (repo) => {
    if (!repo || !REPO.test(repo)) return null;
    const alias = aliases.get(repo.toLowerCase());
    if (alias !== undefined) return { kind: 'alias', name: alias };
    return config.publicRepos === 'aliased' ? { kind: 'hidden' } : { kind: 'public', name: repo };
  };
}

/** `owner/name`, with the `#PR` or `@commit` a budget slot adds (core/admission.ts `budgetSlot`). */
const REPO_REF = /\b([A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+)(#\d+|@[0-9A-Za-z_-]+)?/g;

/**
 * A wait reason as the public reads it: every repository it names is shown as {@link shownAs}
 * shows it (an aliased one by its alias, without its PR or commit; a hidden one as "another
 * repository"), and in the reason of an aliased or hidden repository's own request no commit
 * or `#number` is left either.
 */
function publicReason(
  text: string,
  shownAs: (repo: string | null) => ShownRepo | null,
  secret: boolean,
): string {
  let out = text.replace(REPO_REF, (whole, repo: string) => {
    const shown = shownAs(repo);
    if (!shown || shown.kind === 'public') return whole;
    return shown.kind === 'alias' ? shown.name : 'another repository';
  });
  if (secret) out = out.replace(/\b[0-9a-f]{7,64}\b/gi, '[commit]').replace(/#\d+/g, '');
  return out;
}

/**
 * The class of who holds or requested work (`api`, `github`, `operator`…), never the name after
 * the colon; a requester without a class prefix is shown as `other` (it may be a bare user name).
 */
export function holderClassOf(requester: string): string {
  const m = /^([a-z][a-z-]{0,19}):/.exec(requester);
  return m ? m[1]! : 'other';
}

function etaView(e: Eta | undefined, now: number): QueueItemView['eta'] {
  if (!e) return null;
  return {
    startLo: e.startLo == null ? null : new Date(e.startLo).toISOString(),
    startHi: e.startHi == null ? null : new Date(e.startHi).toISOString(),
    text: describeEta(e, now),
    blocked: e.blocked,
  };
}

// ---------------------------------------------------------------- history

/**
 * Scrubs free text that may carry agent- or operator-supplied detail (restore failures, GPU
 * errors, reasons) before it is shown anywhere public: host addresses, paths, credentials,
 * `user@host`, environment assignments and long opaque strings become placeholders; only the
 * first line is kept (what follows is raw log) and the text is bounded.
 */
export function redactText(text: string | null | undefined, max = 240): string {
  if (!text) return '';
  // raw log fragments arrive as extra lines after a one-line summary: keep the summary only
  let s = (text.split(/\r?\n/, 1)[0] ?? '').replace(/\t+/g, ' ');
  s = s
    .replace(/\b(?:bearer|token|basic)\s+\S+/gi, '[credential]')
    .replace(/\b(?:spk_(?:api|agent|job)|gh[opusr]_|github_pat_|xox[abp]-)[\w-]*/gi, '[credential]')
    .replace(/\b[A-Z][A-Z0-9_]{1,}=\S*/g, (m) => `${m.slice(0, m.indexOf('='))}=[redacted]`)
    .replace(/\b[\w.+-]+@[\w-]+(?:\.[\w-]+)*/g, '[account]')
    .replace(/\b[a-z][a-z0-9+.-]*:\/\/\S+/gi, '[url]')
    .replace(/\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b/g, '[address]')
    .replace(/(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}/gi, (m) =>
      m.length >= 6 && /[a-f]|::/i.test(m) ? '[address]' : m,
    )
    .replace(/\b(?:[a-z0-9-]+\.){2,}[a-z]{2,}\b/gi, '[address]')
    .replace(/(^|[\s=:,;("'[])(?:~|\.{1,2})?\/[^\s,;)"'\]]*/g, '$1[path]')
    .replace(/\b[\w-]*[A-Za-z][\w-]*\b/g, (m) =>
      m.length >= 32 && /\d/.test(m) && !/^[0-9a-f]{40}$|^[0-9a-f]{64}$/i.test(m) ? '[secret]' : m,
    )
    .replace(/\s{2,}/g, ' ')
    .trim();
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

/**
 * Lease ids embed the fencing token (`l-<host>-<token>`), so a lease is shown as the reservation
 * and host it binds instead.
 */
function leaseLabel(dataJson: string | null | undefined): string {
  try {
    const d = JSON.parse(dataJson ?? '{}') as { reservationId?: unknown; hostId?: unknown };
    const ok = (v: unknown) => typeof v === 'string' && /^[A-Za-z0-9_.-]{1,64}$/.test(v);
    if (ok(d.reservationId) && ok(d.hostId)) return `${d.reservationId} on ${d.hostId}`;
  } catch {
    // malformed data: fall through to the neutral label
  }
  return 'lease';
}

/**
 * The class of an actor as the public may see it: never a login, token name or
 * host detail. `github:<login>` is a person acting through GitHub (labels and commands need the
 * maintainer permission), `api:<token>` an operator's token, `agent:<host>` a host's agent, bare
 * `github` GitHub itself; everything else is the controller.
 */
export function actorClass(actor: string): 'maintainer' | 'operator' | 'agent' | 'GitHub' | 'controller' {
  const [kind, who] = actor.split(':', 2);
  if (kind === 'github') return who ? 'maintainer' : 'GitHub';
  if (kind === 'api' || kind === 'operator' || kind === 'cli') return 'operator';
  if (kind === 'agent') return 'agent';
  return 'controller';
}

/**
 * A public cause from a template: what happened and the actor's class, built
 * only from the event's type and states — the stored cause (which may say "closed by @login",
 * "released by api:<token name>" or name a private repository) is never shown publicly.
 */
export function publicCause(row: {
  type: string;
  fromState: string | null;
  toState: string | null;
  actor: string;
  dataJson?: string | null;
}): string {
  const by = actorClass(row.actor);
  const what = row.type.split('.').slice(1).join(' ').replace(/_/g, ' ') || row.type;
  const move =
    row.fromState && row.toState
      ? ` (${row.fromState} → ${row.toState})`
      : row.toState
        ? ` (→ ${row.toState})`
        : '';
  return `${what}${move} by ${by === 'GitHub' || by === 'controller' ? `the ${by === 'GitHub' ? 'GitHub integration' : by}` : `an ${by}`.replace('an maintainer', 'a maintainer')}${notRunSuffix(row)}`;
}

/**
 * `: not run — the task never started` for the release of work that never ran (ADR 0177): a fixed
 * phrase from the outcome, safe for public pages (the cause itself names hosts and dstack runs).
 */
function notRunSuffix(row: { type: string; dataJson?: string | null }): string {
  if ((row.type !== 'reservation.releasing' && row.type !== 'reservation.failed') || !row.dataJson) return '';
  try {
    const phrase = notRunPhrase((JSON.parse(row.dataJson) as { outcome?: unknown }).outcome);
    return phrase ? `: ${phrase}` : '';
  } catch {
    return '';
  }
}

/** One row of the event history as shown to people: no event data, causes scrubbed. */
export interface EventView {
  id: number;
  at: string;
  subjectType: string;
  subjectId: string;
  type: string;
  fromState: string | null;
  toState: string | null;
  cause: string;
  /** Who acted, by class only on public pages (`agent`, `github`, `api`, `admission`). */
  actor: string;
}

/**
 * Renders an events row for people. `publicView` keeps only the actor's class (no user or token
 * names); the authenticated API keeps the full actor for audits. Event data (which may carry
 * fencing tokens or agent detail) is never rendered.
 */
export function toEventView(
  row: {
    id: number;
    at: number;
    subjectType: string;
    subjectId: string;
    type: string;
    fromState: string | null;
    toState: string | null;
    cause: string;
    actor: string;
    dataJson?: string | null;
  },
  opts: { publicView: boolean },
): EventView {
  const actor = opts.publicView ? actorClass(row.actor) : redactText(row.actor, 80);
  return {
    id: row.id,
    at: new Date(row.at).toISOString(),
    subjectType: row.subjectType,
    subjectId: row.subjectType === 'lease' ? leaseLabel(row.dataJson) : redactText(row.subjectId, 80),
    type: row.type,
    fromState: row.fromState,
    toState: row.toState,
    cause: opts.publicView ? publicCause(row) : redactText(row.cause),
    actor,
  };
}
