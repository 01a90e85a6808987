import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { z } from 'zod';
import type { FleetResponse } from '../../core/protocol/api.ts';
import { childEnv, colorAllowed } from '../settings.ts';
import { REPO_ROOT, type SparkSystem } from '../sim/harness/index.ts';

/**
 * What the demo's stories print (scripts/demo.ts): a timestamped timeline of what the system did,
 * read from the ledger's event history, the public fleet view and the simulated GitHub's check
 * runs, plus the helpers both stories use.
 */

export type FleetView = z.infer<typeof FleetResponse>;

const color = process.stdout.isTTY && colorAllowed();
const paint = (code: string, s: string) => (color ? `\x1b[${code}m${s}\x1b[0m` : s);
export const bold = (s: string) => paint('1', s);
export const dim = (s: string) => paint('2', s);
export const green = (s: string) => paint('32', s);
export const red = (s: string) => paint('31', s);
const t0 = Date.now();
/** Seconds since the demo started. */
export const elapsedS = () => (Date.now() - t0) / 1000;
const stamp = () => dim(`[+${elapsedS().toFixed(1).padStart(5)}s]`);
/** One timeline line: who did what. */
export const line = (who: string, text: string) => console.log(`${stamp()} ${who.padEnd(10)} ${text}`);
/** A story step's heading. */
export const step = (text: string) => console.log(`\n${stamp()} ${bold(`▶ ${text}`)}`);

/** Prints reservation transitions, host state changes and check run titles as they happen. */
export function startTimeline(s: SparkSystem): () => Promise<void> {
  let lastEvent = 0;
  const hostStates = new Map<string, string>();
  const checkTitles = new Map<number, string>();
  const shown =
    /^reservation\.(queued|allocated|preparing|running|releasing|done|failed|cancelled|superseded|receipt)$|^alert\./;
  let stopped = false;
  const tick = async () => {
    const rows = await s.reader.eventsAfter(lastEvent);
    for (const e of rows) {
      lastEvent = e.id;
      if (!shown.test(e.type)) continue;
      line(
        e.subjectId,
        `${e.type.replace(/^reservation\./, '')}${e.cause ? dim(` — ${e.cause.split('\n')[0]}`) : ''}`,
      );
    }
    // the controller may be down on purpose (the failure story): then there is no fleet view
    const fleet = await fleetView(s).catch(() => null);
    for (const h of fleet?.hosts ?? []) {
      const st = `${h.state}${h.keptFor ? ` for ${h.keptFor}` : ''}`;
      if (hostStates.get(h.id) !== st) {
        if (hostStates.has(h.id)) line(h.id, `${hostStates.get(h.id)} → ${bold(st)}`);
        hostStates.set(h.id, st);
      }
    }
    for (const c of s.gh.checkRuns) {
      const title = c.output.title ?? '';
      if (checkTitles.get(c.id) !== title) {
        checkTitles.set(c.id, title);
        line('GitHub', `check on ${c.head_sha.slice(0, 7)}: "${title}"`);
      }
    }
  };
  const loop = (async () => {
    while (!stopped) {
      await tick().catch(() => undefined);
      await new Promise((r) => setTimeout(r, 200));
    }
    await tick().catch(() => undefined);
  })();
  return async () => {
    stopped = true;
    await loop;
  };
}

/** Runs the real sparkctl CLI against the system; its output goes to the timeline. */
export async function sparkctl(s: SparkSystem, token: string, argv: string[]): Promise<string> {
  const child = spawn(process.execPath, [join(REPO_ROOT, 'cli', 'bin.mjs'), ...argv], {
    env: childEnv({ SPARK_URL: s.controllerUrl, SPARK_TOKEN: token, SPARKCTL_POLL_MS: '250' }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (b: Buffer) => {
    out += b.toString();
    for (const l of b.toString().split('\n').filter(Boolean)) line('sparkctl', dim(l));
  });
  child.stderr.on('data', (b: Buffer) => {
    out += b.toString();
  });
  const code = await new Promise<number | null>((r) => child.once('exit', r));
  if (code !== 0) throw new Error(`sparkctl ${argv.join(' ')} exited ${code}: ${out.trim()}`);
  return out;
}

/** The public fleet view (what the dashboard and `sparkctl fleet` show). */
export const fleetView = async (s: SparkSystem) =>
  (await s.api<FleetView>('GET', '/api/v1/fleet', undefined, null)).body;

/**
 * Prints rows as aligned columns; a cell longer than its column's `max` wraps onto continuation
 * lines (at spaces), so every row's first line starts with its first cell.
 */
export function printTable(header: string[], rows: string[][], max: number[]): void {
  const wrap = (text: string, width: number): string[] => {
    const out: string[] = [];
    let cur = '';
    for (const word of text.split(' ')) {
      if (cur && cur.length + 1 + word.length > width) {
        out.push(cur);
        cur = word;
      } else cur = cur ? `${cur} ${word}` : word;
    }
    out.push(cur);
    return out;
  };
  const all = [header, ...rows];
  const widths = header.map((_, i) =>
    Math.min(max[i] ?? Number.POSITIVE_INFINITY, Math.max(...all.map((r) => (r[i] ?? '').length))),
  );
  const print = (r: string[]) => {
    const cells = r.map((c, i) => wrap(c, widths[i]!));
    const height = Math.max(...cells.map((c) => c.length));
    for (let k = 0; k < height; k++)
      console.log(`  ${cells.map((c, i) => (c[k] ?? '').padEnd(widths[i]!)).join('  ')}`.trimEnd());
  };
  print(header);
  console.log(`  ${widths.map((w) => '─'.repeat(w)).join('  ')}`);
  for (const r of rows) print(r);
}
