/**
 * The GitHub meta record lives with the ledger commands that write it inside their transactions
 * (docs/adr/0220-one-ledger-front-door.md); the GitHub part's modules read it from here.
 */
export { type GitHubMeta, mergeMeta, patchMeta, readMeta } from '../ledger/github-meta.ts';
