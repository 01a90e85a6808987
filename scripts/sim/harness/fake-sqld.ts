/**
 * The sqld stand-in (Hrana over HTTP, a real libSQL file, an injectable round-trip time) as the
 * admission bench's remote part uses it; `scripts/` imports from `test/` only through this folder.
 */
export { type FakeSqld, type FakeSqldOptions, startFakeSqld } from '../fake-sqld/server.ts';
