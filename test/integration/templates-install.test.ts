import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { repoRoot } from './actions-lease-fixture.ts';

/** scripts/ci/install-spark-templates.sh into real git checkouts. */

const installer = join(repoRoot, 'scripts', 'ci', 'install-spark-templates.sh');
const PIN = 'acme/spark-controller@0123456789abcdef0123456789abcdef01234567';
let tmp: { dir: string; cleanup: () => void };

beforeAll(() => {
  tmp = tempDir('spark-install-');
});
afterAll(() => tmp.cleanup());

function checkout(name: string): string {
  const dir = join(tmp.dir, name);
  execFileSync('git', ['init', '-q', dir]);
  return dir;
}

const install = (...args: string[]) => spawnSync('bash', [installer, ...args], { encoding: 'utf8' });

describe('install-spark-templates.sh', () => {
  it('installs the workflow with the Spark actions pinned to one commit, and the project script', () => {
    const iron = checkout('iron');
    const r = install('iron', iron, PIN);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const workflowPath = join(iron, '.github', 'workflows', 'spark-pr-test.yml');
    const text = readFileSync(workflowPath, 'utf8');
    const code = text.split('\n').filter((l) => !l.trimStart().startsWith('#'));
    expect(code.filter((l) => l.includes('your-org/'))).toEqual([]);
    const uses = (
      parse(text) as { jobs: Record<string, { steps: { uses: string }[] }> }
    ).jobs.single!.steps.map((s) => s.uses);
    expect(uses.slice(1, 4)).toEqual([
      'acme/spark-controller/actions/commit-binding@0123456789abcdef0123456789abcdef01234567',
      'acme/spark-controller/actions/lease-preflight@0123456789abcdef0123456789abcdef01234567',
      'acme/spark-controller/actions/spark-test@0123456789abcdef0123456789abcdef01234567',
    ]);
    const validator = spawnSync(join(repoRoot, 'node_modules', '.bin', 'action-validator'), [workflowPath], {
      encoding: 'utf8',
    });
    expect(validator.status).toBe(0);
    const script = join(iron, 'scripts', 'ci', 'spark-test.sh');
    expect(readFileSync(script, 'utf8')).toBe(
      readFileSync(join(repoRoot, 'workflows-templates', 'iron', 'scripts', 'ci', 'spark-test.sh'), 'utf8'),
    );
    expect(statSync(script).mode & 0o111).not.toBe(0);
    // actionlint in the consuming repository knows the Spark runner labels
    const lint = parse(readFileSync(join(iron, '.github', 'actionlint.yaml'), 'utf8')) as {
      'self-hosted-runner': { labels: string[] };
    };
    expect(lint['self-hosted-runner'].labels).toEqual([
      'self-hosted',
      'Linux',
      'ARM64',
      'waffuru-spark',
      'spark-single',
      'spark-pair',
      'spark-r-*',
    ]);
    expect(r.stdout).toContain('fleet label waffuru-spark');
  });

  it('puts a chosen fleet label into runs-on and actionlint.yaml, and refuses a reserved or malformed one', () => {
    const butter = checkout('butter-fleet');
    const r = install('butter', butter, PIN, '--fleet-label=lab-gpus');
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const wf = parse(readFileSync(join(butter, '.github', 'workflows', 'spark-pr-test.yml'), 'utf8')) as {
      jobs: Record<string, { 'runs-on': string[] }>;
    };
    expect(wf.jobs.single!['runs-on'].slice(0, 5)).toEqual([
      'self-hosted',
      'Linux',
      'ARM64',
      'lab-gpus',
      'spark-single',
    ]);
    expect(wf.jobs.pair!['runs-on'][3]).toBe('lab-gpus');
    const lint = readFileSync(join(butter, '.github', 'actionlint.yaml'), 'utf8');
    expect(lint).toContain("- 'lab-gpus'");
    expect(lint).not.toContain('waffuru-spark');
    for (const bad of [
      '--fleet-label=spark-pair',
      '--fleet-label=a b',
      '--fleet-label=',
      '--fleet-label=x#y',
    ]) {
      const other = checkout(`butter-bad-${Math.random().toString(16).slice(2)}`);
      const refused = install('butter', other, PIN, bad);
      expect(refused.status, bad).toBe(2);
      expect(refused.stderr).toContain('fleet label');
      expect(
        spawnSync('git', ['-C', other, 'status', '--porcelain', '--untracked-files=all'], {
          encoding: 'utf8',
        }).stdout,
      ).toBe('');
    }
  });

  it('leaves an existing actionlint.yml alone and says which labels to add', () => {
    const iron = checkout('iron-own-lint');
    execFileSync('mkdir', ['-p', join(iron, '.github')]);
    execFileSync('bash', [
      '-c',
      `printf 'self-hosted-runner:\n  labels: [gpu]\n' > ${JSON.stringify(join(iron, '.github', 'actionlint.yml'))}`,
    ]);
    const r = install('iron', iron, PIN, '--force');
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('actionlint.yml exists; add these to self-hosted-runner.labels');
    expect(r.stderr).toContain('spark-r-*');
    expect(readFileSync(join(iron, '.github', 'actionlint.yml'), 'utf8')).toBe(
      'self-hosted-runner:\n  labels: [gpu]\n',
    );
  });

  it('refuses a branch or tag pin, an unknown project, a non-checkout and silent overwrites', () => {
    const butter = checkout('butter');
    const tag = install('butter', butter, 'acme/spark-controller@v1');
    expect(tag.status).toBe(2);
    expect(tag.stderr).toContain('pin the actions to a commit, not a branch or tag');
    const unknown = install('copper', butter, PIN);
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toContain("unknown project 'copper' (expected butter or iron)");
    const notRepo = install('butter', tmp.dir, PIN);
    expect(notRepo.status).toBe(2);
    expect(notRepo.stderr).toContain('is not the root of a git checkout');
    expect(install('butter', butter, PIN).status).toBe(0);
    const again = install('butter', butter, PIN);
    expect(again.status).toBe(1);
    expect(again.stderr).toContain('exists; pass --force to replace it');
    expect(install('butter', butter, PIN, '--force').status).toBe(0);
  });
});
