/**
 * The relay-agent fleet (a controller in this process, agents as processes, fake nvidia-smi and
 * runners) that `scripts/bench/agent.ts` measures; `scripts/` imports from `test/` only through
 * this folder.
 */
export { startFleet } from '../doubles/fleet.ts';
export { readRunnerMarkers, waitFor } from '../doubles/index.ts';
