/**
 * The GitHub meta record lives with the ledger commands that write it inside their transactions
 * (docs/adr/0220-one-ledger-front-door.md); the GitHub part's modules read it from here, and
 * change it only through named ledger commands and send effects
 * (docs/adr/0260-outbox-and-sweeps-as-ledger-commands.md).
 */
export { type GitHubMeta, readMeta } from '../ledger/ledger.ts';
