import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import {
  AGENT_API_PREFIX,
  AGENT_MAX_BODY_BYTES,
  DesiredStateSchema,
  HeartbeatRequestSchema,
  HostFactsSchema,
  PollRequestSchema,
  PollResponseSchema,
  ReportResponseSchema,
  ReportSchema,
} from '../../core/protocol/agent.ts';
import {
  CreateReservationBody,
  CreateTokenBody,
  DeckardStartBody,
  ErrorBody,
  FleetResponse,
  HistoryResponse,
  HostResponse,
  QueueResponse,
  RecoverResponse,
  RenewBody,
  ReservationListResponse,
  ReservationResponse,
  SCOPES,
  TerminateBody,
  TokenCreated,
  TokenList,
  WhoAmI,
} from '../../core/protocol/api.ts';
import {
  describeIssues,
  LeaseVerifyRequestSchema,
  LeaseVerifyResponseSchema,
  MAX_RECEIPT_BYTES,
  MAX_RECEIPT_LAST_LINES,
  MAX_RECEIPT_LINE_CHARS,
  overallResult,
  parseStoredReceipts,
  type Receipt,
  ReceiptSchema,
} from '../../core/protocol/receipt.ts';

/**
 * The wire contracts between controller, agent, sparkctl and the in-job actions: each accepts the
 * documented shapes unchanged and refuses the rest with a message that says what to fix.
 */

function accepts(schema: z.ZodType, value: unknown) {
  const r = schema.safeParse(value);
  expect(r.success ? r.data : describeIssues(r.error)).toEqual(value);
}
function refuses(schema: z.ZodType, value: unknown, message?: string | RegExp) {
  const r = schema.safeParse(value);
  expect(r.success, `accepted ${JSON.stringify(value)}`).toBe(false);
  if (message && !r.success) expect(describeIssues(r.error)).toMatch(message);
}

const facts = {
  gpuProcesses: [{ pid: 0, name: 'deckard-server', usedMemoryMiB: 0 }],
  gpuError: null,
  freeDiskBytes: 0,
  serviceState: 'serving',
  runnerState: 'none',
  interconnectOk: null,
};
const lease = {
  leaseId: 'l-spark-2-3',
  reservationId: 'r-1',
  fencingToken: 3,
  kind: 'manual',
  topology: 'pair',
  lend: true,
  expiresInMs: -5,
};

describe('agent protocol', () => {
  it('is served under /agent/v1 with a 64 KiB body limit', () => {
    expect(AGENT_API_PREFIX).toBe('/agent/v1');
    expect(AGENT_MAX_BODY_BYTES).toBe(65536);
  });

  it('heartbeat facts: every service and runner state; unknown GPU is null, never "none"', () => {
    accepts(HeartbeatRequestSchema, { facts });
    for (const serviceState of ['serving', 'stopped', 'starting', 'draining', 'failed', 'none', 'unknown'])
      accepts(HostFactsSchema, { ...facts, serviceState });
    for (const runnerState of ['none', 'starting', 'running', 'exited'])
      accepts(HostFactsSchema, { ...facts, runnerState });
    accepts(HostFactsSchema, {
      ...facts,
      gpuProcesses: null,
      gpuError: 'nvidia-smi failed',
      freeDiskBytes: null,
    });
    refuses(HostFactsSchema, { ...facts, serviceState: 'paused' });
    refuses(HostFactsSchema, { ...facts, gpuProcesses: [{ pid: -1, name: 'x', usedMemoryMiB: 1 }] });
    refuses(HostFactsSchema, { ...facts, gpuProcesses: [{ pid: 1.5, name: 'x', usedMemoryMiB: 1 }] });
    refuses(HostFactsSchema, {
      ...facts,
      gpuProcesses: [{ pid: 1, name: 'x'.repeat(513), usedMemoryMiB: 1 }],
    });
    refuses(HostFactsSchema, { ...facts, gpuProcesses: [{ pid: 1, name: 'x', usedMemoryMiB: -1 }] });
    refuses(HostFactsSchema, {
      ...facts,
      gpuProcesses: Array.from({ length: 257 }, (_, i) => ({ pid: i, name: 'p', usedMemoryMiB: 1 })),
    });
    refuses(HostFactsSchema, { ...facts, gpuError: 'x'.repeat(1001) });
    refuses(HostFactsSchema, { ...facts, freeDiskBytes: -1 });
  });

  it('desired states: every step the agent can be told, with the lease it concerns', () => {
    for (const d of [
      { state: 'idle' },
      { state: 'serve' },
      { state: 'prepare', lease },
      { state: 'wait', lease },
      {
        state: 'run',
        lease,
        runnerName: 'spark-r-1',
        jitConfig: 'abc',
        jobToken: 'spk_job_0123456789abcdef',
      },
      { state: 'run', lease, runnerName: 'spark-r-1' },
      { state: 'develop', lease },
      { state: 'clean', lease },
      { state: 'restore', fencingToken: 0, attempt: 0, waitMs: 0, healthTimeoutS: 1 },
      { state: 'hold', reason: 'quarantined' },
      { state: 'hold', reason: 'release required', lease },
    ])
      accepts(DesiredStateSchema, d);
    accepts(PollResponseSchema, {
      hostId: 'spark-2',
      version: 'v1',
      heartbeatIntervalS: 10,
      desired: { state: 'idle' },
    });
    refuses(PollResponseSchema, {
      hostId: 'spark-2',
      version: 'v1',
      heartbeatIntervalS: 0,
      desired: { state: 'idle' },
    });
    refuses(DesiredStateSchema, { state: 'prepare' });
    refuses(DesiredStateSchema, { state: 'prepare', lease: { ...lease, fencingToken: 0 } });
    refuses(DesiredStateSchema, { state: 'prepare', lease: { ...lease, topology: 'triple' } });
    refuses(DesiredStateSchema, {
      state: 'restore',
      fencingToken: -1,
      attempt: 0,
      waitMs: 0,
      healthTimeoutS: 1,
    });
    refuses(DesiredStateSchema, {
      state: 'restore',
      fencingToken: 0,
      attempt: -1,
      waitMs: 0,
      healthTimeoutS: 1,
    });
    refuses(DesiredStateSchema, {
      state: 'restore',
      fencingToken: 0,
      attempt: 0,
      waitMs: -1,
      healthTimeoutS: 1,
    });
    refuses(DesiredStateSchema, {
      state: 'restore',
      fencingToken: 0,
      attempt: 0,
      waitMs: 0,
      healthTimeoutS: 0,
    });
  });

  it('polls: the agent may wait up to a minute, never less than nothing', () => {
    accepts(PollRequestSchema, { since: 'x'.repeat(128), maxWaitMs: 60_000 });
    accepts(PollRequestSchema, { since: null, maxWaitMs: 0 });
    accepts(PollRequestSchema, {});
    refuses(PollRequestSchema, { maxWaitMs: 60_001 });
    refuses(PollRequestSchema, { maxWaitMs: -1 });
    refuses(PollRequestSchema, { since: 'x'.repeat(129) });
  });

  it('reports: each step result carries a positive fencing token (restored: the current one)', () => {
    for (const r of [
      { type: 'prepared', fencingToken: 1, serviceLent: true, evidence: { gpu: 'free' } },
      { type: 'prepared', fencingToken: 1, serviceLent: false },
      { type: 'prepare_failed', fencingToken: 1, reason: 'x' },
      { type: 'runner_started', fencingToken: 1, runnerName: 'r' },
      { type: 'runner_exited', fencingToken: 1, runnerName: 'r', exitCode: null, lastLines: [] },
      { type: 'runner_exited', fencingToken: 1, runnerName: 'r', exitCode: 1, lastLines: ['boom'] },
      { type: 'lease_active', fencingToken: 1 },
      { type: 'cleaned', fencingToken: 1 },
      {
        type: 'processes_remain',
        fencingToken: 1,
        processes: [{ pid: 9, name: 'python', usedMemoryMiB: 3 }],
      },
      { type: 'restored', fencingToken: 0, ok: false, detail: '' },
    ])
      accepts(ReportSchema, r);
    refuses(ReportSchema, { type: 'cleaned', fencingToken: 0 });
    refuses(ReportSchema, { type: 'prepare_failed', fencingToken: 1, reason: '' });
    refuses(ReportSchema, { type: 'prepare_failed', fencingToken: 1, reason: 'x'.repeat(1001) });
    refuses(ReportSchema, { type: 'runner_started', fencingToken: 1, runnerName: '' });
    refuses(ReportSchema, {
      type: 'runner_exited',
      fencingToken: 1,
      runnerName: 'r',
      exitCode: 0,
      lastLines: Array(101).fill('l'),
    });
    refuses(ReportSchema, {
      type: 'runner_exited',
      fencingToken: 1,
      runnerName: 'r',
      exitCode: 0,
      lastLines: ['x'.repeat(2001)],
    });
    refuses(ReportSchema, { type: 'restored', fencingToken: -1, ok: true, detail: '' });
    refuses(ReportSchema, { type: 'restored', fencingToken: 1, ok: true, detail: 'x'.repeat(4001) });
    accepts(ReportResponseSchema, { ok: true, result: 'reservation r-3 preparing' });
    refuses(ReportResponseSchema, { ok: false, result: '' });
  });
});

const resv = {
  id: 'r-1',
  kind: 'development',
  priority: 100,
  topology: 'single',
  status: 'queued',
  position: 1,
  reason: 'waiting',
  outcome: null,
  targetHost: 'spark-2',
  requester: 'ann',
  mine: true,
  repo: null,
  pr: null,
  prUrl: null,
  headSha: null,
  suite: null,
  ttlS: 3600,
  createdAt: '2026-11-30T08:00:00.000Z',
  grantedAt: null,
  endedAt: null,
  queueDeadline: '2026-11-30T14:00:00.000Z',
  waitingOn: [{ hostId: 'spark-2', state: 'draining' }],
  leases: [
    {
      hostId: 'spark-2',
      status: 'active',
      lend: false,
      grantedAt: 'x',
      expiresAt: 'y',
      releasedAt: null,
      prepared: true,
      runnerStarted: false,
    },
  ],
  ready: false,
};

describe('operator API', () => {
  it('token scopes: develop, operate, emergency', () => {
    expect(SCOPES).toEqual(['develop', 'operate', 'emergency']);
  });

  it('reservation requests: single by default, a named host, a TTL of at least a minute', () => {
    expect(CreateReservationBody.parse({})).toEqual({ topology: 'single' });
    accepts(CreateReservationBody, { topology: 'pair', host: 'spark-2', ttlS: 60 });
    refuses(CreateReservationBody, { ttlS: 59 }, 'ttlS: ttl must be at least 60 seconds');
    refuses(CreateReservationBody, { host: 'Spark 2' }, /host: a host id is lower-case letters/);
    refuses(CreateReservationBody, { host: '-spark' });
    refuses(CreateReservationBody, { host: 'spark-2 ' });
    refuses(CreateReservationBody, { host: 'x'.repeat(64) });
    refuses(CreateReservationBody, { hosts: ['spark-2'] });
    accepts(RenewBody, { ttlS: 60 });
    refuses(RenewBody, { ttlS: 30 }, 'ttl must be at least 60 seconds');
    accepts(DeckardStartBody, { host: 'spark-1' });
    refuses(DeckardStartBody, { host: 'spark-1', force: true });
  });

  it('emergency terminate needs a reason for the audit history', () => {
    expect(TerminateBody.parse({ reason: '  hung job  ' })).toEqual({ reason: 'hung job' });
    refuses(TerminateBody, { reason: '  ab  ' }, /say why \(at least 3 characters\)/);
    refuses(TerminateBody, { reason: 'x'.repeat(501) });
  });

  it('token names and scopes', () => {
    accepts(CreateTokenBody, { name: 'ci.bot_1-x', scopes: ['develop', 'operate', 'emergency'] });
    refuses(CreateTokenBody, { name: 'ci bot', scopes: ['develop'] }, /a token name is letters, digits/);
    refuses(CreateTokenBody, { name: '.hidden', scopes: ['develop'] });
    refuses(CreateTokenBody, { name: 'ok!', scopes: ['develop'] });
    refuses(CreateTokenBody, { name: 'x'.repeat(65), scopes: ['develop'] });
    refuses(CreateTokenBody, { name: 'ci', scopes: [] }, 'a token needs at least one scope');
    refuses(CreateTokenBody, { name: 'ci', scopes: ['root'] });
  });

  it('responses sparkctl and the MCP server read', () => {
    accepts(ReservationResponse, { reservation: resv });
    accepts(ReservationListResponse, { reservations: [resv, { ...resv, leases: [], waitingOn: [] }] });
    for (const status of ['active', 'expired', 'releasing', 'released'])
      accepts(ReservationResponse, { reservation: { ...resv, leases: [{ ...resv.leases[0], status }] } });
    refuses(ReservationResponse, {
      reservation: { ...resv, leases: [{ ...resv.leases[0], status: 'gone' }] },
    });
    refuses(ReservationResponse, { reservation: { ...resv, status: 'paused' } });
    const event = {
      id: 1,
      at: 'x',
      subjectType: 'reservation',
      subjectId: 'r-1',
      type: 'reservation.queued',
      fromState: null,
      toState: 'queued',
      cause: 'request',
      actor: 'ann',
    };
    accepts(HistoryResponse, { reservationId: 'r-1', events: [event] });
    for (const action of ['cancelled', 'release-requested', 'awaiting-agent', 'already-ended'])
      accepts(RecoverResponse, { reservation: resv, action, awaitingHosts: ['spark-2'], message: 'm' });
    refuses(RecoverResponse, { reservation: resv, action: 'killed', awaitingHosts: [], message: 'm' });
    accepts(HostResponse, { host: { id: 'spark-2', managed: true, phase: 'idle' } });
    accepts(TokenCreated, { id: 't1', name: 'ci', scopes: ['operate'], token: 'secret', expiresAt: null });
    accepts(TokenCreated, {
      id: 't2',
      name: 'ci-2',
      scopes: ['develop'],
      token: 'secret',
      expiresAt: '2026-12-30T00:00:00.000Z',
    });
    accepts(TokenList, {
      tokens: [
        {
          id: 't1',
          name: 'ci',
          scopes: ['operate'],
          createdAt: 'x',
          revokedAt: null,
          lastUsedAt: null,
          expiresAt: null,
        },
      ],
    });
    accepts(WhoAmI, { tokenId: 't1', name: 'ci', scopes: ['develop'] });
    accepts(ErrorBody, { error: { code: 'not_found', message: 'reservation r-9 not found' } });
    const item = {
      id: 'r-1',
      position: 1,
      kind: 'manual',
      priority: 80,
      topology: 'single',
      status: 'queued',
      suite: 'smoke',
      repo: 'acme/iron',
      pr: 7,
      prUrl: 'https://github.com/acme/iron/pull/7',
      headSha: 'a'.repeat(40),
      hosts: [],
      reason: 'waiting',
      ageS: 3,
    };
    accepts(QueueResponse, { generatedAt: 'x', queued: [item], active: [{ ...item, position: null }] });
    accepts(FleetResponse, {
      generatedAt: 'x',
      managed: true,
      hosts: [
        {
          id: 'spark-1',
          pool: 'spark',
          gpus: 1,
          state: 'service',
          managed: true,
          homeService: 'deckard',
          serviceHealth: 'serving',
          lastHeartbeatAgeS: 2,
          gpuProcessCount: 1,
          reservation: { id: 'r-1', kind: 'manual', topology: 'single', status: 'running' },
          keptFor: null,
          note: null,
        },
      ],
    });
  });
});

const receipt: Receipt = {
  version: 1,
  reservationId: 'r-12',
  hostId: 'spark-2',
  fencingToken: 4,
  headSha: '7fc2a91'.padEnd(40, '0'),
  repo: 'acme/iron',
  runUrl: 'https://github.com/acme/iron/actions/runs/1',
  suite: 'smoke',
  topology: 'single',
  phases: [{ suite: 'smoke', exitCode: 0, durationMs: 0 }],
  startedAt: '2026-11-30T08:00:00Z',
  endedAt: '2026-11-30T08:00:00Z',
  result: 'passed',
  exitCode: 0,
  log: { sha256: 'a'.repeat(64), bytes: 0, lines: 0 },
  toolchain: { nvcc: '12.8' },
};

describe('in-job protocol and receipts', () => {
  it('limits: 32 KiB receipts, 50 trailing lines of 400 characters', () => {
    expect([MAX_RECEIPT_BYTES, MAX_RECEIPT_LAST_LINES, MAX_RECEIPT_LINE_CHARS]).toEqual([32768, 50, 400]);
  });

  it('lease verify: an id, a host and a positive token; the answer binds SHA, host and token', () => {
    accepts(LeaseVerifyRequestSchema, { hostId: 'spark-2', fencingToken: 1 });
    refuses(LeaseVerifyRequestSchema, { hostId: 'spark-2', fencingToken: 0 });
    refuses(LeaseVerifyRequestSchema, { hostId: '../etc', fencingToken: 1 }, /expected an id like "r-12"/);
    refuses(LeaseVerifyRequestSchema, { hostId: 'spark-2', fencingToken: 1, extra: 1 });
    const answer = {
      ok: true,
      reservation: {
        id: 'r-1',
        headSha: 'f'.repeat(40),
        topology: 'pair',
        suite: 'performance',
        kind: 'manual',
      },
      lease: { hostId: 'spark-2', fencingToken: 2, expiresAt: 0, lend: false },
    };
    accepts(LeaseVerifyResponseSchema, answer);
    accepts(LeaseVerifyResponseSchema, {
      ...answer,
      reservation: { ...answer.reservation, headSha: null, suite: null },
    });
    refuses(LeaseVerifyResponseSchema, { ...answer, ok: false });
    refuses(LeaseVerifyResponseSchema, { ...answer, reservation: { ...answer.reservation, kind: '' } });
    refuses(
      LeaseVerifyResponseSchema,
      { ...answer, reservation: { ...answer.reservation, headSha: 'F'.repeat(40) } },
      /expected a full 40-character lower-case commit SHA/,
    );
    refuses(LeaseVerifyResponseSchema, {
      ...answer,
      reservation: { ...answer.reservation, headSha: 'f'.repeat(41) },
    });
  });

  it('a receipt carries hashes and short facts; log lines only when the run did not pass', () => {
    accepts(ReceiptSchema, receipt);
    accepts(ReceiptSchema, {
      ...receipt,
      suite: 'performance',
      topology: 'pair',
      result: 'failed',
      exitCode: null,
      reason: 'smoke failed',
      phases: [
        { suite: 'smoke', exitCode: 1, durationMs: 5 },
        { suite: 'performance', exitCode: null, durationMs: 0 },
      ],
      lastLines: ['x'.repeat(400)],
      endedAt: '2026-11-30T09:00:00+01:00',
    });
    accepts(ReceiptSchema, { ...receipt, result: 'cancelled', lastLines: [] });
    refuses(
      ReceiptSchema,
      { ...receipt, lastLines: ['boom'] },
      'lastLines: a passed receipt carries no log lines',
    );
    refuses(
      ReceiptSchema,
      { ...receipt, endedAt: '2026-11-30T07:59:59Z' },
      'endedAt: endedAt is before startedAt',
    );
    refuses(ReceiptSchema, { ...receipt, repo: 'acme' }, 'repo: expected "owner/name"');
    refuses(ReceiptSchema, { ...receipt, repo: 'acme/iron/x' });
    refuses(ReceiptSchema, { ...receipt, repo: 'ac me/iron' });
    refuses(
      ReceiptSchema,
      { ...receipt, log: { ...receipt.log, sha256: 'A'.repeat(64) } },
      /SHA-256 hex digest/,
    );
    refuses(ReceiptSchema, { ...receipt, log: { ...receipt.log, sha256: 'a'.repeat(65) } });
    refuses(ReceiptSchema, { ...receipt, log: { ...receipt.log, bytes: -1 } });
    refuses(ReceiptSchema, { ...receipt, log: { ...receipt.log, extra: 1 } });
    refuses(ReceiptSchema, { ...receipt, version: 2 });
    refuses(ReceiptSchema, { ...receipt, startedAt: 'yesterday' });
    refuses(ReceiptSchema, { ...receipt, runUrl: `https://x/${'a'.repeat(300)}` });
    refuses(ReceiptSchema, { ...receipt, result: 'failed', lastLines: Array(51).fill('l') });
    refuses(ReceiptSchema, { ...receipt, result: 'failed', lastLines: ['x'.repeat(401)] });
    refuses(ReceiptSchema, { ...receipt, reason: 'x'.repeat(501) });
    refuses(ReceiptSchema, { ...receipt, phases: [receipt.phases[0], receipt.phases[0], receipt.phases[0]] });
    refuses(ReceiptSchema, { ...receipt, phases: [{ suite: 'smoke', exitCode: 0, durationMs: -1 }] });
    refuses(ReceiptSchema, { ...receipt, phases: [{ suite: 'smoke', exitCode: 0, durationMs: 1, x: 1 }] });
    refuses(
      ReceiptSchema,
      { ...receipt, toolchain: Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`t${i}`, 'v'])) },
      'toolchain: at most 20 toolchain entries',
    );
    accepts(ReceiptSchema, {
      ...receipt,
      toolchain: Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`t${i}`, 'v'])),
    });
    refuses(ReceiptSchema, { ...receipt, toolchain: { ['k'.repeat(41)]: 'v' } });
    refuses(ReceiptSchema, { ...receipt, toolchain: { k: 'v'.repeat(201) } });
    refuses(ReceiptSchema, { ...receipt, extra: true });
  });

  it('stored receipts: one per host; anything unreadable is no evidence', () => {
    const stored = { byHost: { 'spark-2': receipt } };
    expect(parseStoredReceipts(JSON.stringify(stored))).toEqual(stored);
    expect(parseStoredReceipts(null)).toBeNull();
    expect(parseStoredReceipts('')).toBeNull();
    expect(parseStoredReceipts('{not json')).toBeNull();
    expect(
      parseStoredReceipts(JSON.stringify({ byHost: { 'spark-2': { ...receipt, version: 9 } } })),
    ).toBeNull();
  });

  it('overall result of a pair: any failure fails, then any cancel, else passed', () => {
    const r = (result: Receipt['result']) => ({ ...receipt, result });
    expect(overallResult([])).toBeNull();
    expect(overallResult([r('passed'), r('passed')])).toBe('passed');
    expect(overallResult([r('passed'), r('cancelled')])).toBe('cancelled');
    expect(overallResult([r('cancelled'), r('failed')])).toBe('failed');
    expect(overallResult([r('failed'), r('passed')])).toBe('failed');
  });

  it('issues read as path: message, the body itself as (body)', () => {
    const r = LeaseVerifyRequestSchema.safeParse('nope');
    expect(r.success).toBe(false);
    if (!r.success) expect(describeIssues(r.error)).toMatch(/^\(body\): /);
    const two = LeaseVerifyRequestSchema.safeParse({ hostId: '', fencingToken: 0 });
    if (!two.success) expect(describeIssues(two.error)).toMatch(/^hostId: .+; fencingToken: .+$/);
  });
});
