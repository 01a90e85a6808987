import * as agentReports from './agent-reports.ts';
import * as desiredState from './desired-state.ts';
import * as github from './github.ts';
import * as jobReceipts from './job-receipts.ts';
import * as leases from './leases.ts';
import type { After } from './ledger-github.ts';
import * as queries from './queries.ts';
import * as reservations from './reservations.ts';
import type { LedgerStore } from './store.ts';
import * as tokens from './tokens.ts';

/**
 * The public API's commands and reads, `ledger.api` (docs/api.md;
 * docs/adr/0240-ledger-front-door-only.md): what `/api/v1` and the leases API name beyond the
 * `Ledger` class's own reservation and lease commands.
 */
export class ApiLedger {
  constructor(private readonly s: LedgerStore) {}

  /** A development lease request, checked against its token's limits (ADR 0176). */
  createDevelopmentReservation(...a: After<typeof reservations.createDevelopmentReservation>) {
    return reservations.createDevelopmentReservation(this.s, ...a);
  }
  /** Recovers work stuck in a state its agent cannot finish. */
  recoverReservation(...a: After<typeof reservations.recoverReservation>) {
    return reservations.recoverReservation(this.s, ...a);
  }
  /** An operator's emergency end of work (ADR 0156). */
  terminateReservation(...a: After<typeof reservations.terminateReservation>) {
    return reservations.terminateReservation(this.s, ...a);
  }
  /** An operator's request to start a home service (find or create). */
  requestServiceStart(...a: After<typeof reservations.requestServiceStart>) {
    return reservations.requestServiceStart(this.s, ...a);
  }
  /** Extends a development lease (bounded by `timings.devLeaseMaxTtlS`). */
  renewDevelopmentLease(...a: After<typeof leases.renewDevelopmentLease>) {
    return leases.renewDevelopmentLease(this.s, ...a);
  }
  /** An audited API read or denial (docs/api.md): one history row about the token. */
  recordAudit(e: {
    tokenId: string;
    type: 'api.read' | 'api.denied';
    cause: string;
    actor: string;
    data: Record<string, unknown>;
  }) {
    return this.s.write((tx, now) =>
      this.s.record(tx, now, {
        subjectType: 'audit',
        subjectId: e.tokenId,
        type: e.type,
        cause: e.cause,
        actor: e.actor,
        data: e.data,
      }),
    );
  }
  /** The lease a job token (by its SHA-256) was issued for, checked against reservation and host. */
  leaseForJobToken(jobTokenHash: string, reservationId: string, hostId: string) {
    return jobReceipts.leaseForJobToken(this.s, undefined, jobTokenHash, reservationId, hostId);
  }
  /** A job's receipt for its host, checked and stored in one transaction (ADR 0160). */
  recordJobReceipt(...a: After<typeof jobReceipts.recordJobReceipt>) {
    return jobReceipts.recordJobReceipt(this.s, ...a);
  }
  reservationHistory(...a: After<typeof queries.reservationHistory>) {
    return queries.reservationHistory(this.s, ...a);
  }
  loadReservations(...a: After<typeof queries.loadReservations>) {
    return queries.loadReservations(this.s, ...a);
  }
  listApiTokens() {
    return queries.listApiTokens(this.s);
  }
}

/** API and agent tokens, stored as hashes, `ledger.tokens` (docs/adr/0240-ledger-front-door-only.md). */
export class TokensLedger {
  constructor(private readonly s: LedgerStore) {}

  insertApiToken(...a: After<typeof tokens.insertApiToken>) {
    return tokens.insertApiToken(this.s, ...a);
  }
  revokeApiToken(...a: After<typeof tokens.revokeApiToken>) {
    return tokens.revokeApiToken(this.s, ...a);
  }
  /** Notes a token's use, at most once per `LAST_USED_WRITE_MS`. */
  touchApiToken(...a: After<typeof tokens.touchApiToken>) {
    return tokens.touchApiToken(this.s, ...a);
  }
  insertAgentToken(...a: After<typeof tokens.insertAgentToken>) {
    return tokens.insertAgentToken(this.s, ...a);
  }
  revokeAgentToken(...a: After<typeof tokens.revokeAgentToken>) {
    return tokens.revokeAgentToken(this.s, ...a);
  }
  apiTokenByHash(hash: string) {
    return tokens.apiTokenByHash(this.s, hash);
  }
  agentTokenByHash(hash: string) {
    return tokens.agentTokenByHash(this.s, hash);
  }
  listAgentTokens() {
    return tokens.listAgentTokens(this.s);
  }
}

/**
 * The read models the dashboard, the metrics and the queue estimate take, `ledger.reads`
 * (docs/adr/0240-ledger-front-door-only.md); none writes.
 */
export class ReadsLedger {
  constructor(private readonly s: LedgerStore) {}

  /** The newest events about the given subject types. */
  recentEventsOf(...a: After<typeof queries.recentEventsOf>) {
    return queries.recentEventsOf(this.s, ...a);
  }
  /** Outbox rows by status and leases by status (docs/metrics.md). */
  metricsReads() {
    return queries.metricsReads(this.s);
  }
  /** The persistent counter rows (docs/metrics.md). */
  metricCounterRows() {
    return queries.metricCounterRows(this.s);
  }
  bindingLeaseHolders() {
    return queries.bindingLeaseHolders(this.s);
  }
  /** How long finished work held its hosts, newest first (core/eta.ts). */
  occupancyHistory(limit?: number) {
    return queries.occupancyHistory(this.s, limit);
  }
}

/**
 * The agent API's commands and reads, `ledger.agents` (docs/adr/0011-relay-agent.md;
 * docs/adr/0240-ledger-front-door-only.md): one report in one transaction, the desired state of a
 * host, and the JIT config handed over exactly once.
 */
export class AgentsLedger {
  constructor(private readonly s: LedgerStore) {}

  /** Applies one agent report in one write transaction; returns what changed, in words. */
  applyReport(...a: After<typeof agentReports.applyReport>) {
    return agentReports.applyReport(this.s, ...a);
  }
  /** What the host's agent should do now (read outside any transaction). */
  desiredState(hostId: string, now: number) {
    return desiredState.computeDesiredState(this.s, this.s.db, hostId, now);
  }
  /**
   * Hands the host's pending JIT config (or clone token) over exactly once, with the job token
   * whose SHA-256 is `jobTokenHash` (cross-part contract 3): the desired state is computed again
   * under the write lock (another poll may have taken the config meanwhile) and, while the host
   * should run and a config waits, the config is erased from the ledger in this transaction.
   * Returns that desired state and the config handed over (null when none was).
   */
  handOver(hostId: string, jobTokenHash: string) {
    return this.s.write(async (tx, now, changed) => {
      const state = await desiredState.computeDesiredState(this.s, tx, hostId, now);
      const h = state.pendingHandoff;
      if (!h || state.desired.state !== 'run') return { state, secret: null };
      const secret = h.jitConfig!;
      await github.handOverJitConfig(this.s, tx, now, h, jobTokenHash, hostId);
      changed.add(`host:${hostId}`);
      return { state, secret };
    });
  }
}
