/** Full-jitter exponential backoff (AWS architecture blog): uniform in [ceiling/2, ceiling], ceiling = min(cap, base·2^n). */
export function backoffMs(failures: number, capMs: number, baseMs = 500): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(failures, 16));
  return Math.round(ceiling / 2 + (Math.random() * ceiling) / 2);
}
