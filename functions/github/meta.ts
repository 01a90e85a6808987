/**
 * The GitHub meta record lives with the ledger commands that write it inside their transactions
 * (docs/adr/0220-one-ledger-front-door.md); the GitHub part's modules read it from here, and
 * patch it through `ledger.github.patchMeta` (docs/adr/0240-ledger-front-door-only.md).
 */
export { type GitHubMeta, readMeta } from '../ledger/ledger.ts';
