/**
 * The webhook load parts (separate controller and fake GitHub processes, signed delivery plans)
 * that `scripts/bench/webhooks.ts` runs; `scripts/` imports from `test/` only through this folder.
 */
export { SECRET } from '../fake-github/harness.ts';
export { makeTestLedger } from '../helpers/ledger.ts';
export { startControllerProcesses } from '../helpers/load/controllers.ts';
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
} from '../helpers/load/deliveries.ts';
export { startFakeGitHubProcess } from '../helpers/load/fake-github-process.ts';
