/**
 * The webhook load parts (separate controller and fake GitHub processes, signed delivery plans)
 * that `scripts/bench/webhooks.ts` runs; `scripts/` imports from `test/` only through this folder.
 */
export { SECRET } from '../fake-github/harness.ts';
export { makeTestLedger } from '../ledger.ts';
export { startControllerProcesses } from '../load/controllers.ts';
export {
  githubBody,
  LOAD_INSTALLATION,
  LOAD_REPO,
  MAINTAINER,
  OUTSIDER,
  planDeliveries,
  pullRequestEvent,
  sendAll,
  sendDelivery,
} from '../load/deliveries.ts';
export { startFakeGitHubProcess } from '../load/fake-github-process.ts';
