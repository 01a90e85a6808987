import { randomBytes } from 'node:crypto';
import { closeSync, openSync, readdirSync, statSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { type CheckResult, failed, passed } from './check.ts';
import type { ModelCacheAccess } from './doctor-options.ts';

/**
 * The managed model cache (SPARK_MODEL_CACHE) is a usable directory, writable to the operator who
 * provisions it, read-only to a job (docs/in-job.md "Provisioning doctor").
 */
export function checkModelCache(dir: string | null, access: ModelCacheAccess): CheckResult {
  const name = 'model-cache';
  if (!dir)
    return failed(name, 'no model cache configured (SPARK_MODEL_CACHE): models would be downloaded per run');
  try {
    if (!statSync(dir).isDirectory())
      return failed(name, 'model cache (SPARK_MODEL_CACHE) is not a directory');
    readdirSync(dir);
  } catch (e) {
    return failed(
      name,
      `model cache (SPARK_MODEL_CACHE) is not usable: ${(e as NodeJS.ErrnoException).code ?? e}`,
    );
  }
  // creating a file is the probe: it answers for this user and this mount, root and read-only
  // mounts included (access(2) and mode bits do not)
  const probe = join(dir, `.spark-doctor-${process.pid}-${randomBytes(4).toString('hex')}`);
  let writable: boolean;
  let why = '';
  try {
    closeSync(openSync(probe, 'wx'));
    unlinkSync(probe);
    writable = true;
  } catch (e) {
    writable = false;
    why = String((e as NodeJS.ErrnoException).code ?? e);
  }
  if (access === 'read-only')
    return writable
      ? failed(
          name,
          'model cache (SPARK_MODEL_CACHE) is writable by this job: PR code could change the weights every later lease loads; give the runner user a read-only view of it (a read-only bind mount, or an owner and mode it cannot write)',
        )
      : passed(name, `model cache is read-only to this job (${why}), as a PR worker must see it`);
  return writable
    ? passed(name, 'model cache is writable')
    : failed(
        name,
        `model cache (SPARK_MODEL_CACHE) is not writable (${why}): fix its owner/permissions for the user who provisions it`,
      );
}
