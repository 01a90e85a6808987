/**
 * The README's performance table, written from the committed reference run of `npm run bench`
 * (`bench/reference.json`, a copy of one run's `bench/results.json`): the README quotes no figure
 * that is not in that file, and each with the conditions it was measured under.
 *
 *   tsx scripts/readme-figures.ts           rewrite the block between the markers in README.md
 *   tsx scripts/readme-figures.ts --check   exit 1 when README.md's block differs
 *
 * `test/unit/readme-figures.test.ts` runs the check, so the table cannot drift from the file.
 * Method and every other figure: docs/performance.md.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const START = '<!-- bench-figures:start -->';
export const END = '<!-- bench-figures:end -->';

// biome-ignore lint/suspicious/noExplicitAny: the reference file is JSON written by several bench parts
type Json = any;

interface Figure {
  label: string;
  /** The value as the README shows it, or undefined when the reference run has no such figure. */
  value(r: Json): string | undefined;
  goal: string;
  met(r: Json): boolean | undefined;
  conditions(r: Json): string;
}

const num = (x: unknown): number | undefined => (typeof x === 'number' && Number.isFinite(x) ? x : undefined);
/** `load 2.1 → 3.4 (max 5.0)`: the 1-minute load average at the start and end of a part, and its highest sample. */
const load = (l: unknown): string => {
  if (!Array.isArray(l) || l.length === 0) return 'load not recorded';
  const xs = l.map(Number);
  const f = (x: number) => x.toFixed(1);
  const ends = xs.length === 1 ? f(xs[0]!) : `${f(xs[0]!)} → ${f(xs.at(-1)!)}`;
  return xs.length > 2 ? `load ${ends} (max ${f(Math.max(...xs))})` : `load ${ends}`;
};
const bigRow = (r: Json) =>
  (r.scheduler?.rows as Json[] | undefined)?.find((x) => x.queued === 10000 && x.hosts === 256);
const both = (a: number | undefined, b: number | undefined, unit: string) =>
  a === undefined || b === undefined ? undefined : `${a} / ${b} ${unit}`;

export const FIGURES: Figure[] = [
  {
    label: 'handover, host freed → next runner started through GitHub: controller share p50 / p99',
    value: (r) =>
      both(num(r.agent?.handover?.controllerP50Ms), num(r.agent?.handover?.controllerP99Ms), 'ms'),
    goal: '≤ 100 / ≤ 300 ms',
    met: (r) => {
      const h = r.agent?.handover;
      return h ? h.controllerP50Ms <= 100 && h.controllerP99Ms <= 300 : undefined;
    },
    conditions: (r) =>
      `${r.agent?.handover?.handovers ?? '?'} handovers through the controller's GitHub module and the fake GitHub answering after modelled latency; total p50 / p99 ${r.agent?.handover?.p50Ms} / ${r.agent?.handover?.p99Ms} ms, ${r.agent?.handover?.githubRequestsPerHandover} GitHub requests a handover${r.agent?.handover?.helperThroughSudo ? '; the agent calls its sandbox helper through sudo, as on a host' : ''}; ${load(r.agent?.handover?.loadAverage1m)}`,
  },
  {
    label: 'persisted admissions ÷ one-row write transactions, same client',
    value: (r) => num(r.admission?.ratio_same_client)?.toFixed(3),
    goal: '≥ 0.3',
    met: (r) =>
      num(r.admission?.ratio_same_client) === undefined ? undefined : r.admission.ratio_same_client >= 0.3,
    conditions: () =>
      '16-host fleet, libSQL file (WAL), both through the Node ledger client, interleaved in one run',
  },
  {
    label: 'admission pass over a remote libSQL (20 ms round trip): round trips / pass p50',
    value: (r) =>
      num(r.admission?.remote?.roundTripsPerPass) === undefined
        ? undefined
        : `${r.admission.remote.roundTripsPerPass} / ${r.admission.remote.passP50Ms} ms`,
    goal: '≤ 2 round trips',
    met: (r) => {
      const n = num(r.admission?.remote?.roundTripsPerPass);
      return n === undefined ? undefined : n <= 2;
    },
    conditions: () =>
      'the real @libsql/client remote protocol against the local sqld double, requests counted at the server',
  },
  {
    label: 'webhooks at 200 concurrent deliveries: ack p99, ratio to the baseline',
    value: (r) =>
      num(r.webhooks?.p99Ms) === undefined ? undefined : `${r.webhooks.p99Ms} ms, ${r.webhooks.p99Ratio}×`,
    goal: '≤ 1.5× baseline',
    met: (r) => (num(r.webhooks?.p99Ratio) === undefined ? undefined : r.webhooks.p99Ratio <= 1.5),
    conditions: (r) =>
      `${r.webhooks?.rounds ?? '?'} rounds of 200 signed deliveries, one controller process, alternating with a verify-insert-202 baseline; ${load(r.webhooks?.loadAverage1m)}`,
  },
  {
    label: 'webhooks processed per second, ratio to the baseline’s deliveries',
    value: (r) =>
      num(r.webhooks?.processedPerS) === undefined
        ? undefined
        : `${r.webhooks.processedPerS}/s, ${r.webhooks.processedRatio}×`,
    goal: '≥ 0.5×',
    met: (r) =>
      num(r.webhooks?.processedRatio) === undefined ? undefined : r.webhooks.processedRatio >= 0.5,
    conditions: () => 'same rounds; a delivery counts when its effect is fully applied',
  },
  {
    label: 'webhook ack → processed, p50 / p99',
    value: (r) => both(num(r.webhooks?.ackToProcessedP50Ms), num(r.webhooks?.ackToProcessedP99Ms), 'ms'),
    goal: 'p99 ≤ 1,000 ms',
    met: (r) =>
      num(r.webhooks?.ackToProcessedP99Ms) === undefined ? undefined : r.webhooks.ackToProcessedP99Ms <= 1000,
    conditions: () => 'same rounds',
  },
  {
    label: 'scheduler pass, 10,000 queued × 256 hosts, p50 / p99 (wall)',
    value: (r) => both(num(bigRow(r)?.pass_ms_p50), num(bigRow(r)?.pass_ms_p99), 'ms'),
    goal: '≤ 5 / ≤ 10 ms',
    met: (r) => {
      const b = bigRow(r);
      return b ? b.pass_ms_p50 <= 5 && b.pass_ms_p99 <= 10 : undefined;
    },
    conditions: (r) =>
      `the whole pass through the ledger (reads, plan, writes, commit) on a libSQL file; CPU p50 / p99 ${bigRow(r)?.pass_cpu_ms_p50} / ${bigRow(r)?.pass_cpu_ms_p99} ms; load ${bigRow(r)?.loadAverage1m}`,
  },
  {
    label: 'relay agent idle: RSS max; CPU',
    value: (r) =>
      num(r.agent?.idle?.rssMiBMax) === undefined
        ? undefined
        : `${r.agent.idle.rssMiBMax.toFixed(1)} MiB; ${r.agent.idle.cpuPercent.toFixed(2)} %`,
    goal: '≤ 60 MiB; ≤ 0.5 %',
    met: (r) => {
      const i = r.agent?.idle;
      return i ? i.rssMiBMax <= 60 && i.cpuPercent <= 0.5 : undefined;
    },
    conditions: (r) =>
      `the shipped bundle over ${r.agent?.idle?.seconds ?? '?'} s, heartbeat ${r.agent?.idle?.heartbeatS ?? '?'} s, long poll ${r.agent?.idle?.longPollS ?? '?'} s, children included`,
  },
  {
    label: 'Worker bundle, gzip',
    value: (r) =>
      num(r.worker?.gzipBytes) === undefined ? undefined : `${(r.worker.gzipBytes / 1024).toFixed(1)} KiB`,
    goal: '≤ 250 KiB',
    met: (r) => (num(r.worker?.gzipBytes) === undefined ? undefined : r.worker.gzipBytes <= 256000),
    conditions: () => 'the Worker as wrangler bundles it',
  },
  {
    label: '`npm run test:fast`; `npm test` (wall)',
    value: (r) => both(num(r.tests?.fastS), num(r.tests?.fullS), 's'),
    goal: '≤ 60; ≤ 300 s',
    met: (r) => (r.tests ? r.tests.fastS <= 60 && r.tests.fullS <= 300 : undefined),
    conditions: (r) =>
      `fresh clone, after npm ci; ${r.tests ? `npm test ${load([r.tests.full?.load1?.start, r.tests.full?.load1?.end].filter((x) => x !== undefined))}` : ''}`,
  },
];

const cell = (s: string) => s.replace(/\|/g, '\\|');

/** The README block for one reference run. */
export function renderFigures(r: Json): string {
  const m = r.machine ?? {};
  const lines = [
    `From \`bench/reference.json\`: \`${r.command}\` at ${r.generated_at} on ${m.cpus} × ${m.cpu_model}, ${m.memory_gib} GiB, Node ${m.node}; every figure on loopback, the ledger an embedded libSQL file unless named.`,
    '',
    '| figure | value | goal | met | conditions |',
    '| --- | --- | --- | --- | --- |',
  ];
  for (const f of FIGURES) {
    const v = f.value(r);
    const met = v === undefined ? '' : f.met(r) ? 'yes' : '**no**';
    lines.push(
      `| ${cell(f.label)} | ${cell(v ?? 'not in this run')} | ${cell(f.goal)} | ${met} | ${v === undefined ? '' : cell(f.conditions(r))} |`,
    );
  }
  const failed = Array.isArray(r.failures) ? (r.failures as string[]) : [];
  if (failed.length)
    lines.push(
      '',
      `Parts that failed in this run, so their figures are not in it: ${failed.map((f) => cell(f.replace(/ \(fresh clone[^)]*\)/, ''))).join('; ')}.`,
    );
  return lines.join('\n');
}

/**
 * A markdown text with its table rows reduced to their trimmed cells and separator rows to `---`:
 * Biome pads tables to aligned columns, which changes no figure.
 */
export function tableInsensitive(md: string): string {
  return md
    .split('\n')
    .map((line) => {
      if (!line.startsWith('|')) return line.trimEnd();
      const cells = line
        .slice(1, line.trimEnd().endsWith('|') ? line.trimEnd().length - 1 : undefined)
        .split(/(?<!\\)\|/)
        .map((c) => c.trim());
      return cells.every((c) => /^:?-+:?$/.test(c)) ? cells.map(() => '---').join('|') : cells.join('|');
    })
    .join('\n');
}

/** README.md with its block replaced by the rendering of `reference`. */
export function withFigures(readme: string, reference: Json): string {
  const a = readme.indexOf(START);
  const b = readme.indexOf(END);
  if (a < 0 || b < a) throw new Error(`README.md has no ${START} … ${END} block`);
  return `${readme.slice(0, a + START.length)}\n\n${renderFigures(reference)}\n\n${readme.slice(b)}`;
}

function main(): void {
  const root = join(import.meta.dirname, '..');
  const readmePath = join(root, 'README.md');
  const readme = readFileSync(readmePath, 'utf8');
  const reference = JSON.parse(readFileSync(join(root, 'bench', 'reference.json'), 'utf8'));
  const next = withFigures(readme, reference);
  if (process.argv.includes('--check')) {
    if (tableInsensitive(next) !== tableInsensitive(readme)) {
      console.error(
        'README.md figures differ from bench/reference.json: run `npx tsx scripts/readme-figures.ts`',
      );
      process.exit(1);
    }
    console.log('README.md figures match bench/reference.json');
    return;
  }
  writeFileSync(readmePath, next);
  // the same table padding every other markdown file in the tree gets
  execFileSync(join(root, 'node_modules', '.bin', 'biome'), ['format', '--write', readmePath], {
    stdio: 'ignore',
  });
  console.log('README.md: figures written from bench/reference.json');
}

if (import.meta.url === `file://${process.argv[1]}`) main();
