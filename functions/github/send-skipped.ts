import type { SendResult } from './outbox.ts';

/** A send with nothing to do: the outbox row completes with this reason as its result. */
export const skipped = (reason: string): SendResult => ({ result: { skipped: reason } });
