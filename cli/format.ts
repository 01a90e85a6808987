/** Plain-text tables and durations for people; `--json` bypasses all of this. */

/** Renders rows under headers, columns padded to their widest cell. */
export function table(headers: string[], rows: (string | number | null | undefined)[][]): string {
  const cells = rows.map((r) => r.map((c) => (c == null || c === '' ? '-' : String(c))));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...cells.map(line)].join('\n');
}

/** `4h`, `30m`, `90s`, `1d`, `1h30m` or plain seconds → seconds; null when malformed. */
export function parseDuration(text: string): number | null {
  const t = text.trim();
  if (/^\d+$/.test(t)) return Number(t);
  const re = /(\d+)\s*([dhms])/gy;
  let total = 0;
  let matched = 0;
  for (let m = re.exec(t); m; m = re.exec(t)) {
    total += Number(m[1]) * { d: 86400, h: 3600, m: 60, s: 1 }[m[2] as 'd' | 'h' | 'm' | 's'];
    matched = re.lastIndex;
  }
  return matched === t.length && matched > 0 ? total : null;
}

/** 3725 → `1h 2m`. */
export function humanDuration(s: number): string {
  if (s < 60) return `${Math.max(0, Math.round(s))}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** ISO time → `HH:MM:SS UTC` (today) for progress lines. */
export function clock(iso: string | Date): string {
  const d = typeof iso === 'string' ? new Date(iso) : iso;
  return `${d.toISOString().slice(11, 19)} UTC`;
}
