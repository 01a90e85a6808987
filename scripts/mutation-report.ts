/**
 * Writes the result part of docs/mutation-testing.md from StrykerJS's JSON report
 * (`reports/mutation/mutation.json`, written by `npm run test:mutation`): the score per file and
 * every mutant that survived or had no coverage, each with its verdict from
 * `scripts/mutation-reasons.ts` (equivalent, with the reason) or "open" when none matches.
 *
 *   tsx scripts/mutation-report.ts [report.json] [--check]
 *
 * `--check` prints the open survivors and exits 1 when there are any; without it the doc's block
 * between the `mutation-report` markers is replaced.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { REASONS, type Reason } from './mutation-reasons.ts';

interface Pos {
  line: number;
  column: number;
}
interface Mutant {
  id: string;
  mutatorName: string;
  replacement?: string;
  location: { start: Pos; end: Pos };
  status: string;
  static?: boolean;
}
interface Report {
  files: Record<string, { source: string; mutants: Mutant[] }>;
}

const DOC = 'docs/mutation-testing.md';
const START = '<!-- mutation-report:start -->';
const END = '<!-- mutation-report:end -->';
const UNDETECTED = new Set(['Survived', 'NoCoverage']);

/** The source text a mutant replaces (columns are 1-based, the end exclusive). */
export function originalOf(source: string, loc: Mutant['location']): string {
  const lines = source.split('\n');
  if (loc.start.line === loc.end.line)
    return lines[loc.start.line - 1]!.slice(loc.start.column - 1, loc.end.column - 1);
  const first = lines[loc.start.line - 1]!.slice(loc.start.column - 1);
  const middle = lines.slice(loc.start.line, loc.end.line - 1);
  const last = lines[loc.end.line - 1]!.slice(0, loc.end.column - 1);
  return [first, ...middle, last].join('\n');
}

const oneLine = (s: string, max = 70): string => {
  const t = s.replace(/\s+/g, ' ').trim();
  return t.length > max ? `${t.slice(0, max - 1)}…` : t;
};

/** The lines a mutant changes, as the mutant reads them. */
export function mutatedLines(source: string, m: Mutant): string {
  const lines = source.split('\n');
  const { start, end } = m.location;
  const before = lines[start.line - 1]!.slice(0, start.column - 1);
  const after = lines[end.line - 1]!.slice(end.column - 1);
  return before + (m.replacement ?? '') + after;
}

/**
 * The reason that matches a mutant: same file and mutator, `code` in the original line(s), and
 * `replacement` (when given) in the lines as the mutant reads them.
 */
export function reasonFor(file: string, m: Mutant, line: string, mutated: string): Reason | undefined {
  return REASONS.find(
    (r) =>
      r.file === file &&
      r.mutator === m.mutatorName &&
      line.includes(r.code) &&
      (r.replacement == null || mutated.includes(r.replacement)),
  );
}

const cell = (s: string): string => s.replace(/\|/g, '\\|').replace(/`/g, "'");

function pct(detected: number, valid: number): string {
  return valid === 0 ? 'n/a' : `${((100 * detected) / valid).toFixed(2)} %`;
}

function main(): void {
  const args = process.argv.slice(2);
  const check = args.includes('--check');
  const path = args.find((a) => !a.startsWith('--')) ?? 'reports/mutation/mutation.json';
  const report = JSON.parse(readFileSync(path, 'utf8')) as Report;
  const rows: string[] = [];
  const table: string[] = [
    '| file | score | killed | timed out | survived | no coverage | equivalent | open |',
    '| ---- | ----: | -----: | --------: | -------: | ----------: | ---------: | ---: |',
  ];
  const total = { killed: 0, timeout: 0, survived: 0, nocov: 0, equivalent: 0, open: 0, other: 0 };
  const open: string[] = [];
  for (const file of Object.keys(report.files).sort()) {
    const { source, mutants } = report.files[file]!;
    const lines = source.split('\n');
    const n = { killed: 0, timeout: 0, survived: 0, nocov: 0, equivalent: 0, open: 0, other: 0 };
    const sorted = [...mutants].sort(
      (a, b) =>
        a.location.start.line - b.location.start.line || a.location.start.column - b.location.start.column,
    );
    for (const m of sorted) {
      if (m.status === 'Killed') n.killed++;
      else if (m.status === 'Timeout') n.timeout++;
      else if (m.status === 'Survived') n.survived++;
      else if (m.status === 'NoCoverage') n.nocov++;
      else n.other++;
      if (!UNDETECTED.has(m.status)) continue;
      const original = originalOf(source, m.location);
      const line = lines.slice(m.location.start.line - 1, m.location.end.line).join('\n');
      const r = reasonFor(file, m, line, mutatedLines(source, m));
      if (r) n.equivalent++;
      else n.open++;
      const where = `\`${file.replace(/^core\//, '')}:${m.location.start.line}\``;
      const change = `\`${cell(oneLine(original))}\` → \`${cell(oneLine(m.replacement ?? ''))}\``;
      const status = m.status === 'NoCoverage' ? 'no coverage' : 'survived';
      const verdict = r ? 'equivalent' : '**open**';
      rows.push(
        `| ${where} | ${status} | ${m.mutatorName} | ${change} | ${verdict} | ${r ? r.reason : ''} |`,
      );
      if (!r)
        open.push(
          `${file}:${m.location.start.line} ${m.mutatorName} ${oneLine(original)} -> ${oneLine(m.replacement ?? '')}`,
        );
    }
    const detected = n.killed + n.timeout;
    const valid = detected + n.survived + n.nocov;
    table.push(
      `| \`${file.replace(/^core\//, '')}\` | ${pct(detected, valid)} | ${n.killed} | ${n.timeout} | ${n.survived} | ${n.nocov} | ${n.equivalent} | ${n.open} |`,
    );
    for (const k of Object.keys(total) as (keyof typeof total)[]) total[k] += n[k];
  }
  const detected = total.killed + total.timeout;
  const valid = detected + total.survived + total.nocov;
  table.push(
    `| **core/** | **${pct(detected, valid)}** | ${total.killed} | ${total.timeout} | ${total.survived} | ${total.nocov} | ${total.equivalent} | ${total.open} |`,
  );
  if (check) {
    for (const o of open) console.log(o);
    console.log(`score ${pct(detected, valid)}; ${total.equivalent} equivalent, ${open.length} open`);
    process.exit(open.length > 0 ? 1 : 0);
  }
  const block = [
    START,
    '',
    `**${valid} mutants: ${total.killed} killed, ${total.timeout} timed out, ${total.survived} survived, ${total.nocov} without coverage${total.other ? `, ${total.other} invalid (compile or runtime error, not counted)` : ''}. Score ${pct(detected, valid)}**; leaving out the ${total.equivalent} equivalent mutants, ${pct(detected, valid - total.equivalent)}.`,
    '',
    ...table,
    '',
    '### Every survivor and mutant without coverage',
    '',
    '| where | status | mutator | change | verdict | why |',
    '| ----- | ------ | ------- | ------ | ------- | --- |',
    ...rows,
    '',
    END,
  ].join('\n');
  const doc = readFileSync(DOC, 'utf8');
  const a = doc.indexOf(START);
  const b = doc.indexOf(END);
  if (a < 0 || b < a) throw new Error(`${DOC} lacks the ${START} … ${END} markers`);
  writeFileSync(DOC, doc.slice(0, a) + block + doc.slice(b + END.length));
  console.log(`${DOC}: score ${pct(detected, valid)}, ${total.equivalent} equivalent, ${open.length} open`);
}

main();
