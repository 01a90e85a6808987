/** Bytes of randomness in a runner nonce: 128 bits, written as 32 hex digits. */
const NONCE_BYTES = 16;

/**
 * A fresh runner-label nonce from Web Crypto (Node and Workers alike). The ledger draws it at the
 * grant, inside the granting transaction, before anything outside the ledger sees the work
 * (docs/adr/0131-workflow-contract-and-run-identity.md); `functions/github/run-identity.ts` builds
 * the label `spark-<id>-<nonce>` from it.
 */
export function newRunnerNonce(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(NONCE_BYTES));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}
