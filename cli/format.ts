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

/**
 * 3725 → `1h 2m`, 119.6 → `2m`: rounded to whole seconds first (so a unit never shows 60), at most
 * two units, a zero second unit left out.
 */
export function humanDuration(s: number): string {
  const t = Math.max(0, Math.round(s));
  const two = (big: number, bigUnit: string, small: number, smallUnit: string) =>
    small ? `${big}${bigUnit} ${small}${smallUnit}` : `${big}${bigUnit}`;
  if (t < 60) return `${t}s`;
  if (t < 3600) return two(Math.floor(t / 60), 'm', t % 60, 's');
  if (t < 86400) return two(Math.floor(t / 3600), 'h', Math.floor((t % 3600) / 60), 'm');
  return two(Math.floor(t / 86400), 'd', Math.floor((t % 86400) / 3600), 'h');
}

/** ISO time → `2026-11-30 18:03 UTC`: lease ends and other moments that may be another day. */
export function dateTime(iso: string | Date | number): string {
  const d = iso instanceof Date ? iso : new Date(iso);
  return `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** ISO time → `HH:MM:SS UTC` (today) for progress lines. */
export function clock(iso: string | Date): string {
  const d = typeof iso === 'string' ? new Date(iso) : iso;
  return `${d.toISOString().slice(11, 19)} UTC`;
}
