/**
 * The system harness (controller, relay agents and simulated GitHub on loopback) as the demo and
 * the system tests use it.
 */
export { isLive, REPO_ROOT, waitFor } from '../doubles/index.ts';
export * from './github-sim.ts';
export * from './ledger-reader.ts';
export { type ProcessHandle, sweepProcessesUnder } from './processes.ts';
export * from './system.ts';
