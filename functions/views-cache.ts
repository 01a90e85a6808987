import type { Ledger } from './ledger/ledger.ts';

/**
 * anonymous pages (`GET /`, the live fragment, `/api/v1/fleet|queue`) must not
 * recompute admission and read the whole queue per request (20 clients pushed `/healthz` p50 to
 * 517 ms). One computation per view is shared by concurrent callers and reused until the ledger
 * sends a change notice in this process or `ttlMs` passes (another process sharing the ledger
 * cannot notify this one, so the TTL bounds how stale a view can be).
 */
export interface PublicViewCache {
  get<T>(key: string, compute: () => Promise<T>): Promise<T>;
}

/**
 * The cache of `ledger`'s public views: `createController()` builds one per controller
 * (docs/adr/0215-controller-owns-its-services.md).
 */
export function createPublicViewCache(ledger: Ledger, ttlMs: number): PublicViewCache {
  const entries = new Map<string, { at: number; value: Promise<unknown> }>();
  ledger.subscribe(() => entries.clear());
  const cache: PublicViewCache = {
    get<T>(key: string, compute: () => Promise<T>): Promise<T> {
      const now = Date.now();
      const hit = entries.get(key);
      if (hit && now - hit.at < ttlMs) return hit.value as Promise<T>;
      const value = compute();
      entries.set(key, { at: now, value });
      // a failed computation is not reused
      value.catch(() => {
        if (entries.get(key)?.value === value) entries.delete(key);
      });
      return value;
    },
  };
  return cache;
}
