/**
 * One named check line ("each failure one named line in seconds, not a traceback after
 * minutes"). A failed `fatal` check fails the preflight; a failed soft check only warns.
 */
export interface CheckResult {
  name: string;
  ok: boolean;
  fatal: boolean;
  detail: string;
}

export const passed = (name: string, detail: string): CheckResult => ({
  name,
  ok: true,
  fatal: true,
  detail,
});
export const failed = (name: string, detail: string): CheckResult => ({
  name,
  ok: false,
  fatal: true,
  detail,
});
export const softFailed = (name: string, detail: string): CheckResult => ({
  name,
  ok: false,
  fatal: false,
  detail,
});

/** `ok   name: detail`, `FAIL name: detail` or `warn name: detail` — one line, no newlines inside. */
export function formatCheck(c: CheckResult): string {
  const mark = c.ok ? 'ok  ' : c.fatal ? 'FAIL' : 'warn';
  return `${mark} ${c.name}: ${c.detail.replace(/\s*\n\s*/g, ' ')}`;
}

export function fatalFailures(checks: readonly CheckResult[]): CheckResult[] {
  return checks.filter((c) => !c.ok && c.fatal);
}
