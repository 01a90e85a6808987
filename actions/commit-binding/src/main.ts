import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import * as core from '@actions/core';
import { getInputs } from './input-helper.ts';

const exec = promisify(execFile);

/** Reads HEAD of the checkout; a missing or broken checkout is a clear error. */
export async function readHead(path: string): Promise<string> {
  try {
    const { stdout } = await exec('git', ['-C', path, 'rev-parse', 'HEAD'], { timeout: 30_000 });
    return stdout.trim();
  } catch (e) {
    const why = ((e as { stderr?: string }).stderr ?? String(e)).trim().split('\n')[0];
    throw new Error(
      `cannot read HEAD of the checkout (${why}): run actions/checkout with ref: head_sha first`,
    );
  }
}

/**
 * Commit binding (step 1): the job must test exactly the admitted commit. A mismatch
 * (a push after admission, a checkout of the branch instead of the SHA) fails the job.
 */
export async function run(): Promise<void> {
  try {
    const s = getInputs();
    const head = await readHead(s.path);
    if (head !== s.headSha) {
      throw new Error(
        `commit binding failed: checked-out HEAD ${head} is not the admitted head_sha ${s.headSha}; check out exactly head_sha (actions/checkout with ref: \${{ inputs.head_sha }})`,
      );
    }
    core.setOutput('sha', head);
    core.info(`commit binding ok: HEAD is the admitted commit ${head}`);
    await core.summary.addRaw(`Commit binding: HEAD is the admitted commit \`${head}\`\n`).write();
  } catch (e) {
    core.setFailed(e instanceof Error ? e.message : String(e));
  }
}
