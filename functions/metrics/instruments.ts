import type { Ledger } from '../ledger/ledger.ts';
import type { WriteErrorCause } from '../ledger/store.ts';
import { ADMISSION_BUCKETS_S } from './collect.ts';
import { GitHubApiStats } from './github-api.ts';
import { WRITE_ERROR_CAUSES } from './process.ts';
import { LiveHistogram } from './prom-text.ts';

/**
 * This controller's own measurements (`?scope=process` of `/metrics`, docs/metrics.md): how long
 * its admission passes take, its failed ledger writes by cause and its GitHub API calls.
 * `createController()` builds one set and registers it with the ledger once
 * (docs/adr/0215-controller-owns-its-services.md).
 */
export interface ProcessInstruments {
  admission: LiveHistogram;
  writeErrors: ReadonlyMap<WriteErrorCause, number>;
  github: GitHubApiStats;
}

export function createProcessInstruments(ledger: Ledger): ProcessInstruments {
  const admission = new LiveHistogram(ADMISSION_BUCKETS_S);
  ledger.observePasses((ms) => admission.observe(ms / 1000));
  const writeErrors = new Map<WriteErrorCause, number>(WRITE_ERROR_CAUSES.map((c) => [c, 0]));
  ledger.observeWriteErrors((cause) => writeErrors.set(cause, (writeErrors.get(cause) ?? 0) + 1));
  return { admission, writeErrors, github: new GitHubApiStats() };
}
