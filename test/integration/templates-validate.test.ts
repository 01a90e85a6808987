import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseConfig } from '../../core/config.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { repoRoot } from './actions-lease-fixture.ts';

/**
 * Static checks of everything that runs inside a job: every action.yml and workflow template
 * passes @action-validator/cli, every shell script passes shellcheck (required, never skipped),
 * and the dispatched workflow has the shape the controller relies on.
 */

/** A GitHub expression `${{ … }}` as it appears in the YAML. */
const gh = (expr: string) => `$${'{{'} ${expr} }}`;

const validator = join(repoRoot, 'node_modules', '.bin', 'action-validator');
let tmp: { dir: string; cleanup: () => void };

beforeAll(() => {
  tmp = tempDir('spark-templates-');
});
afterAll(() => tmp.cleanup());

function walk(dir: string, keep: (p: string) => boolean, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === '.git' || name === 'dist') continue;
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p, keep, out);
    else if (keep(p)) out.push(p);
  }
  return out;
}

const actionFiles = () => walk(join(repoRoot, 'actions'), (p) => p.endsWith('/action.yml'));
const templateFiles = () => walk(join(repoRoot, 'workflows-templates'), (p) => /\.ya?ml$/.test(p));
const shellScripts = () =>
  ['scripts', 'workflows-templates', 'actions', 'agent']
    .map((d) => join(repoRoot, d))
    .filter(existsSync)
    .flatMap((d) => walk(d, (p) => p.endsWith('.sh')));

function validate(file: string) {
  return spawnSync(validator, [file], { encoding: 'utf8' });
}

describe('@action-validator/cli', () => {
  it('passes on every action.yml and workflow template', () => {
    const files = [...actionFiles(), ...templateFiles()];
    expect(files.map((f) => relative(repoRoot, f)).sort()).toEqual([
      'actions/commit-binding/action.yml',
      'actions/lease-preflight/action.yml',
      'actions/spark-test/action.yml',
      'workflows-templates/spark-pr-test.yml',
      'workflows-templates/spark-test-reusable.yml',
    ]);
    for (const f of files) {
      const r = validate(f);
      expect(`${relative(repoRoot, f)}: exit ${r.status} ${r.stdout}${r.stderr}`).toBe(
        `${relative(repoRoot, f)}: exit 0 `,
      );
    }
  });

  it('rejects a broken workflow (the check can fail)', () => {
    const bad = join(tmp.dir, 'broken.yml');
    writeFileSync(bad, 'on: push\njobs:\n  x:\n    runs-on: [self-hosted]\n    stepz: []\n');
    expect(validate(bad).status).not.toBe(0);
  });
});

describe('shellcheck', () => {
  it('is installed (scripts/setup-test-deps.sh installs it; this test never skips)', () => {
    const r = spawnSync('shellcheck', ['--version'], { encoding: 'utf8' });
    expect(r.error, 'shellcheck is not installed: run scripts/setup-test-deps.sh').toBeUndefined();
    expect(r.status).toBe(0);
  });

  it('passes on every shell script', () => {
    const scripts = shellScripts();
    expect(scripts.map((s) => relative(repoRoot, s))).toEqual(
      expect.arrayContaining([
        'workflows-templates/butter/scripts/ci/spark-test.sh',
        'workflows-templates/iron/scripts/ci/spark-test.sh',
      ]),
    );
    const r = spawnSync('shellcheck', ['--severity=style', ...scripts], { encoding: 'utf8' });
    expect(r.stdout + r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  it('flags a script with an unquoted expansion (the check can fail)', () => {
    const bad = join(tmp.dir, 'bad.sh');
    writeFileSync(bad, '#!/usr/bin/env bash\nrm -rf $1/*\n');
    expect(spawnSync('shellcheck', [bad], { encoding: 'utf8' }).status).not.toBe(0);
  });
});

type Step = { uses?: string; with?: Record<string, unknown>; id?: string; if?: string };
type Job = { if: string; 'runs-on': string[]; 'timeout-minutes'?: number; steps: Step[]; strategy?: unknown };

describe('spark-pr-test.yml', () => {
  const text = () => readFileSync(join(repoRoot, 'workflows-templates', 'spark-pr-test.yml'), 'utf8');
  const doc = () => parse(text()) as Record<string, unknown> & { jobs: Record<string, Job> };

  it('is dispatched with exactly the inputs the controller sends', () => {
    const on = doc().on as {
      workflow_dispatch: { inputs: Record<string, { required: boolean; options?: string[] }> };
    };
    const inputs = on.workflow_dispatch.inputs;
    expect(Object.keys(inputs).sort()).toEqual(['head_sha', 'nonce', 'reservation_id', 'suite', 'topology']);
    expect(Object.values(inputs).every((i) => i.required)).toBe(true);
    expect(inputs.topology!.options).toEqual(['single', 'pair']);
    expect(inputs.suite!.options).toEqual(['smoke', 'performance']);
    expect(parseConfig({}, 'defaults').github.workflow).toBe('spark-pr-test.yml');
  });

  it('reads contents only, runs one job set per reservation, with the seed timeout of 120 minutes', () => {
    const d = doc();
    expect(d.permissions).toEqual({ contents: 'read' });
    expect((d.concurrency as { group: string }).group).toBe('spark-' + gh('inputs.reservation_id'));
    for (const job of Object.values(d.jobs)) expect(job['timeout-minutes']).toBe(120);
  });

  it('names the run for people only: the controller knows it from the dispatch answer (docs/adr/0131)', () => {
    // the run-name is shown to everyone who reads the repository's Actions: it never carries the nonce
    const name = String(doc()['run-name']);
    expect(name).toBe(`Spark test ${gh('inputs.reservation_id')}`);
    expect(name).not.toContain('nonce');
  });

  it('has two mutually exclusive jobs with static labels plus the unguessable reservation label', () => {
    const { jobs } = doc();
    expect(Object.keys(jobs).sort()).toEqual(['pair', 'single']);
    expect(jobs.single!.if).toBe(gh("inputs.topology == 'single'"));
    expect(jobs.pair!.if).toBe(gh("inputs.topology == 'pair'"));
    // the seed's label set (docs/architecture.md "Binding"): fleet label waffuru-spark (the installer's
    // --fleet-label replaces it), topology, and spark-r-<id>-<nonce> (reservation ids are r-<n>)
    const reservation = `spark-${gh('inputs.reservation_id')}-${gh('inputs.nonce')}`;
    expect(jobs.single!['runs-on']).toEqual([
      'self-hosted',
      'Linux',
      'ARM64',
      'waffuru-spark',
      'spark-single',
      reservation,
    ]);
    expect(jobs.pair!['runs-on']).toEqual([
      'self-hosted',
      'Linux',
      'ARM64',
      'waffuru-spark',
      'spark-pair',
      reservation,
    ]);
    // both runners of a pair get a job
    expect(jobs.pair!.strategy).toMatchObject({ matrix: { node: [1, 2] } });
  });

  it('checks out the admitted SHA without credentials, then binds, preflights and tests', () => {
    for (const job of Object.values(doc().jobs)) {
      const [checkout, binding, preflight, test] = job.steps;
      expect(checkout!.uses).toMatch(/^actions\/checkout@[0-9a-f]{40}$/);
      // actions/checkout v6 (the spec's `actions/checkout@v6`), pinned by its commit
      expect(text()).toContain(`${checkout!.uses} # v6.`);
      expect(checkout!.with).toMatchObject({ ref: gh('inputs.head_sha'), 'persist-credentials': false });
      expect(binding!.uses).toMatch(/\/actions\/commit-binding@/);
      expect(binding!.with).toEqual({ head_sha: gh('inputs.head_sha') });
      expect(preflight!.uses).toMatch(/\/actions\/lease-preflight@/);
      expect(preflight!.with).toMatchObject({ reservation_id: gh('inputs.reservation_id') });
      expect(test!.uses).toMatch(/\/actions\/spark-test@/);
      expect(test!.with).toMatchObject({ head_sha: gh('inputs.head_sha'), suite: gh('inputs.suite') });
    }
  });

  it('uploads the lane results dir and the provisioning manifest, whatever the result', () => {
    const action = parse(readFileSync(join(repoRoot, 'actions', 'spark-test', 'action.yml'), 'utf8')) as {
      outputs: Record<string, unknown>;
    };
    expect(Object.keys(action.outputs)).toContain('results_dir');
    for (const job of Object.values(doc().jobs)) {
      const upload = job.steps.find((s) => s.uses?.startsWith('actions/upload-artifact@'))!;
      // tag v6.0.0 of github.com/actions/upload-artifact
      expect(upload.uses).toBe('actions/upload-artifact@b7c566a772e6b6bfb58ed0dc250532a479d7789f');
      expect(upload.if).toBe(gh("always() && steps.test.outputs.results_dir != ''"));
      expect(String(upload.with!.path).trim().split('\n')).toEqual([
        gh('steps.test.outputs.results_dir'),
        'PROVISIONING-MANIFEST.json',
      ]);
    }
  });

  it('pins every third-party action by full SHA with a version comment; own actions exist here', () => {
    const uses = [...text().matchAll(/^\s*(?:-\s+)?uses:\s*(\S+)(.*)$/gm)].map((m) => ({
      ref: m[1]!,
      comment: m[2]!.trim(),
    }));
    expect(uses.length).toBeGreaterThanOrEqual(8);
    for (const u of uses) {
      const own = /^[^/]+\/spark-controller\/actions\/([a-z-]+)@/.exec(u.ref);
      if (own) {
        expect(existsSync(join(repoRoot, 'actions', own[1]!, 'action.yml')), u.ref).toBe(true);
        continue;
      }
      expect(u.ref, 'third-party actions are pinned by full commit SHA').toMatch(
        /^[\w.-]+\/[\w.-]+@[0-9a-f]{40}$/,
      );
      // the exact release the SHA is, not a moving major tag
      expect(u.comment).toMatch(/^# v\d+\.\d+\.\d+$/);
    }
  });

  it('has a reusable workflow_call twin with identical jobs', () => {
    const reusable = parse(
      readFileSync(join(repoRoot, 'workflows-templates', 'spark-test-reusable.yml'), 'utf8'),
    ) as Record<string, unknown> & {
      jobs: unknown;
      on: { workflow_call: { inputs: Record<string, unknown> } };
    };
    expect(reusable.jobs).toEqual(doc().jobs);
    expect(Object.keys(reusable.on.workflow_call.inputs).sort()).toEqual([
      'head_sha',
      'nonce',
      'reservation_id',
      'suite',
      'topology',
    ]);
    expect(reusable.permissions).toEqual({ contents: 'read' });
  });
});
