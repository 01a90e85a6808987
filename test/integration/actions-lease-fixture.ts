import { eq } from 'drizzle-orm';
import type { SparkConfigInput } from '../../core/config.ts';
import type { Suite, Topology } from '../../core/model.ts';
import { generateToken, sha256Hex } from '../../functions/auth/tokens.ts';
import type { ReservationRow } from '../../functions/ledger/ledger.ts';
import * as t from '../../functions/ledger/schema.ts';
import { startTestController } from '../helpers/controller.ts';
import { adoptAll } from '../helpers/ledger.ts';

export const HEAD_SHA = '7fc2a91d3c4b5a69788766554433221100ffeedd';

export interface GrantedLease {
  hostId: string;
  fencingToken: number;
  leaseId: string;
  /** Plaintext per-lease job token (what the agent hands the runner as SPARK_LEASE_TOKEN). */
  jobToken: string;
  lend: boolean;
}

export type LeaseFixture = Awaited<ReturnType<typeof startWithGrantedLease>>;

/**
 * A real controller (loopback port, libSQL file) holding one granted reservation. Hosts are adopted
 * and heartbeat through the real ledger; the admission pass grants the lease. In production the
 * agent API issues the job token when it hands over the JIT config; here the test sets
 * leases.job_token_hash itself, since that is the agent part's job.
 */
export async function startWithGrantedLease(
  opts: { topology?: Topology; suite?: Suite; headSha?: string; config?: SparkConfigInput } = {},
) {
  const controller = await startTestController({ config: opts.config ?? {} });
  const { ledger } = controller;
  await adoptAll(ledger);
  const reservation = await ledger.createReservation(
    {
      kind: 'manual',
      topology: opts.topology ?? 'single',
      repo: 'acme/butter',
      pr: 7,
      headSha: opts.headSha ?? HEAD_SHA,
      suite: opts.suite ?? 'smoke',
      requester: 'octocat',
    },
    'test',
  );
  await controller.loop.runNow();
  const rows = await ledger.leasesOf(undefined, reservation.id);
  if (rows.length === 0) throw new Error(`admission did not grant ${reservation.id}`);
  const leases: GrantedLease[] = [];
  for (const row of rows) {
    const jobToken = generateToken('spk_job');
    const jobTokenHash = await sha256Hex(jobToken);
    await ledger.write(async (tx) => {
      await tx.update(t.leases).set({ jobTokenHash }).where(eq(t.leases.id, row.id));
    });
    leases.push({
      hostId: row.hostId,
      fencingToken: row.fencingToken,
      leaseId: row.id,
      jobToken,
      lend: row.lend,
    });
  }
  const reservationRow = async (): Promise<ReservationRow> =>
    (await ledger.getReservation(undefined, reservation.id))!;
  const eventCount = async (): Promise<number> => (await ledger.db.select().from(t.events)).length;
  return { controller, ledger, reservation, leases, reservationRow, eventCount };
}

/** The environment the agent gives a runner it starts for `lease` (cross-part contract step 3). */
export function runnerEnv(
  f: LeaseFixture,
  lease: GrantedLease,
  dirs: { workDir: string; modelCache: string },
): Record<string, string> {
  return {
    SPARK_CONTROLLER_URL: f.controller.url,
    SPARK_RESERVATION_ID: f.reservation.id,
    SPARK_HOST_ID: lease.hostId,
    SPARK_FENCING_TOKEN: String(lease.fencingToken),
    SPARK_LEASE_TOKEN: lease.jobToken,
    SPARK_TOPOLOGY: f.reservation.topology,
    SPARK_WORK_DIR: dirs.workDir,
    SPARK_MODEL_CACHE: dirs.modelCache,
  };
}
