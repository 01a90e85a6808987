import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { gitRepo, runAction } from './actions-lease-fixture.ts';

let tmp: { dir: string; cleanup: () => void };
let repo: string;
let head: string;

beforeAll(() => {
  tmp = tempDir('spark-binding-');
  repo = join(tmp.dir, 'butter');
  head = gitRepo(repo, { 'README.md': 'butter\n' });
});
afterAll(() => tmp.cleanup());

describe('actions/commit-binding (run as the runner runs it)', () => {
  it('passes when HEAD is the admitted SHA and outputs it', async () => {
    const r = await runAction('commit-binding', {
      inputs: { head_sha: head.toUpperCase(), path: '.' },
      env: { PATH: process.env.PATH! },
      workspace: repo,
      tmp: tmp.dir,
    });
    expect(r.code).toBe(0);
    expect(r.outputs.sha).toBe(head);
    expect(r.summary).toContain(head);
  });

  it('fails when HEAD is not the admitted SHA (a push after admission)', async () => {
    const admitted = head;
    execFileSync(
      'git',
      [
        '-c',
        'user.name=T',
        '-c',
        'user.email=t@example.invalid',
        'commit',
        '-q',
        '--allow-empty',
        '-m',
        'newer',
      ],
      {
        cwd: repo,
      },
    );
    const now = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: repo, encoding: 'utf8' }).trim();
    const r = await runAction('commit-binding', {
      inputs: { head_sha: admitted },
      env: { PATH: process.env.PATH! },
      workspace: repo,
      tmp: tmp.dir,
    });
    expect(r.code).toBe(1);
    expect(r.output).toContain(
      `::error::commit binding failed: checked-out HEAD ${now} is not the admitted head_sha ${admitted}`,
    );
    expect(r.outputs.sha).toBeUndefined();
  });

  it('refuses a short SHA and a directory that is not a checkout, saying what to fix', async () => {
    const short = await runAction('commit-binding', {
      inputs: { head_sha: head.slice(0, 7) },
      env: { PATH: process.env.PATH! },
      workspace: repo,
      tmp: tmp.dir,
    });
    expect(short.code).toBe(1);
    expect(short.output).toContain('head_sha must be the full 40-character commit SHA');
    const notRepo = await runAction('commit-binding', {
      inputs: { head_sha: head },
      env: { PATH: process.env.PATH! },
      workspace: tmp.dir,
      tmp: tmp.dir,
    });
    expect(notRepo.code).toBe(1);
    expect(notRepo.output).toContain('cannot read HEAD of the checkout');
  });
});
