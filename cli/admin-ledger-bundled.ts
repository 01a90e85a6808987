import type { adminCreateToken as Real } from './admin-ledger.ts';
import { CliError, EXIT } from './errors.ts';

/**
 * Stand-in for `admin-ledger.ts` in the single-file bundle (scripts/build.ts swaps it in): the
 * bootstrap writes the ledger file directly, which needs the controller checkout's native libSQL
 * client and migrations, so the bundle points there instead of half-working.
 */
export const adminCreateToken: typeof Real = async () => {
  throw new CliError(
    EXIT.usage,
    'admin commands open the ledger file directly: run `npx sparkctl admin token create …` in the controller checkout',
  );
};
