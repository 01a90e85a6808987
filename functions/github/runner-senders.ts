import { fleetLabelOf, runnerGroupIdOf } from '../../core/config.ts';
import { isReleasableStatus } from '../../core/model.ts';
import { GitHubError } from './client.ts';
import { readMeta } from './meta.ts';
import type { Sender } from './outbox.ts';
import { reservationLabel } from './run-identity.ts';
import { skipped } from './send-skipped.ts';
import type { GitHubService } from './service.ts';

/**
 * JIT runner labels (docs/github-app.md "Runner labels"): `self-hosted, Linux, ARM64, <fleet
 * label>, spark-single|spark-pair`, plus the reservation's nonce label `spark-r-<n>-<nonce>` where
 * the workflow declares the nonce (ADR 0040, 0131).
 */
export function runnerLabels(fleetLabel: string, topology: string, nonceLabel: string | null): string[] {
  const allocation = ['self-hosted', 'Linux', 'ARM64', fleetLabel, `spark-${topology}`];
  return nonceLabel ? [...allocation, nonceLabel] : allocation;
}

/** `spark-<hostId>-<reservationId>-a<attempt>` (unique per attempt, so a retry never collides). */
export const runnerName = (hostId: string, reservationId: string, attempt: number) =>
  `spark-${hostId}-${reservationId}-a${attempt}`;

export function runnersPath(svc: GitHubService, repo: string): string {
  return svc.gh.runnerScope === 'org'
    ? `/orgs/${repo.split('/')[0]}/actions/runners`
    : `/repos/${repo}/actions/runners`;
}

/** GitHub allows 10,000 JIT registrations per hour per App (docs/architecture.md "Timings"). */
export const JIT_PER_HOUR = 10_000;

/**
 * Takes one registration from the App-wide hourly bucket (kept in the ledger, so every
 * controller process shares it); an empty bucket defers the row to the next hour.
 */
async function takeJitToken(svc: GitHubService): Promise<void> {
  const refill = await svc.ledger.github.takeJitRegistration(JIT_PER_HOUR);
  if (refill != null)
    throw new GitHubError(0, `JIT registration budget (${JIT_PER_HOUR}/h per App) used up`, true, refill);
}

export const sendGenerateJit: Sender = async (svc, _row, payload) => {
  const rid = String(payload.reservationId);
  const leaseId = String(payload.leaseId);
  const attempt = Number(payload.attempt ?? 0);
  const r = await svc.ledger.getReservation(undefined, rid);
  if (!r?.repo) return skipped('reservation has no repository');
  if (!isReleasableStatus(r.status)) return skipped(`reservation is ${r.status}`);
  const lease = (await svc.ledger.leasesOf(undefined, rid)).find((l) => l.id === leaseId);
  if (lease?.status !== 'active') return skipped(`lease ${leaseId} is ${lease?.status ?? 'gone'}`);
  const meta = readMeta(r);
  if (!meta?.nonce)
    throw new GitHubError(0, `${rid} has no runner nonce; no runner can be registered`, false);
  // a runner exists only once its run is known, so any job on it can be checked against the run
  if (meta.runId == null)
    throw new GitHubError(0, `waiting for the dispatched run of ${rid} to be identified`, true);
  const name = runnerName(lease.hostId, rid, attempt);
  // the nonce label only where the dispatched workflow asks for it (docs/adr/0131); else the
  // allocation labels alone, and a job of another run on the runner is stopped as foreign
  const labels = runnerLabels(
    fleetLabelOf(svc.config, r.pool),
    r.topology,
    meta.nonceLabel === false ? null : reservationLabel(rid, meta.nonce),
  );
  const inst = meta?.installationId ?? null;
  await takeJitToken(svc);
  let res: { data: { runner: { id: number; name: string }; encoded_jit_config: string } };
  try {
    res = await svc.client.request('POST', `${runnersPath(svc, r.repo)}/generate-jitconfig`, {
      body: { name, runner_group_id: runnerGroupIdOf(svc.config), labels, work_folder: '_work' },
      installationId: inst,
    });
  } catch (e) {
    if (e instanceof GitHubError && e.status === 409) {
      // a runner with this name exists: an earlier attempt's response was lost. Remove it and
      // register again on the next try, so the config we hand over is one we actually hold.
      const list = await svc.client.request<{ runners: { id: number; name: string }[] }>(
        'GET',
        `${runnersPath(svc, r.repo)}?name=${encodeURIComponent(name)}`,
        { installationId: inst },
      );
      for (const old of list.data.runners.filter((x) => x.name === name)) {
        await svc.client.request('DELETE', `${runnersPath(svc, r.repo)}/${old.id}`, { installationId: inst });
      }
      throw new GitHubError(409, `runner ${name} already existed; removed, registering again`, true);
    }
    throw e;
  }
  const runnerId = res.data.runner.id;
  const jitConfig = res.data.encoded_jit_config;
  return {
    // never the config itself: results are stored and may be shown to operators
    result: { runnerId, runnerName: name, attempt },
    // released while we were registering: the ledger withholds the config and deletes the runner
    effect: {
      kind: 'runner-registered',
      runnerName: name,
      leaseId,
      reservationId: rid,
      hostId: lease.hostId,
      attempt,
      runnerId,
      jitConfig,
    },
  };
};

export const sendDeleteRunner: Sender = async (svc, _row, payload) => {
  const name = String(payload.runnerName);
  const repo = String(payload.repo);
  const runnerId = Number(payload.runnerId);
  try {
    await svc.client.request('DELETE', `${runnersPath(svc, repo)}/${runnerId}`, {
      installationId: (payload.installationId as number | null) ?? null,
    });
  } catch (e) {
    // 404: already gone (a JIT runner deregisters itself after its one job)
    if (!(e instanceof GitHubError && e.status === 404)) {
      // 422 = the runner is busy with its job; GitHub refuses until the job ends, so retry
      if (e instanceof GitHubError && e.status === 422)
        throw new GitHubError(422, `runner ${name} is busy; deletion retried later`, true, e.retryAt);
      throw e;
    }
  }
  return {
    result: { deleted: name },
    effect: { kind: 'runner-deleted', runnerName: name },
  };
};
