import {
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  openSync,
  readFileSync,
  renameSync,
  rmSync,
  writeSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { parseEnv } from 'node:util';
import { formatSecretsFile } from '../../functions/secrets-file.ts';
import { CreateAppError, EXIT } from './options.ts';

/** The variables the App's credentials go to (README "Secrets and deployment settings"). */
export const APP_SECRET_KEYS = [
  'SPARK_GITHUB_APP_ID',
  'SPARK_GITHUB_PRIVATE_KEY',
  'SPARK_WEBHOOK_SECRET',
] as const;

function existing(path: string): Record<string, string> {
  if (!existsSync(path)) return {};
  try {
    return parseEnv(readFileSync(path, 'utf8')) as Record<string, string>;
  } catch (e) {
    throw new CreateAppError(EXIT.usage, `cannot read ${path}: ${(e as Error).message}`);
  }
}

/**
 * Refuses, before anything is created on GitHub, to replace an App the secrets file already
 * holds, unless `force`: the old App stays registered on GitHub and its webhook would go
 * unverified.
 */
export function checkSecretsFile(path: string, force: boolean): void {
  const have = existing(path);
  const held = APP_SECRET_KEYS.filter((k) => have[k]);
  // the file is rewritten with the App's values: a variable the format cannot carry back must
  // stop the run now, not after GitHub created the App
  try {
    formatSecretsFile(have);
  } catch (e) {
    throw new CreateAppError(
      EXIT.usage,
      `${path} cannot be rewritten: ${(e as Error).message}; fix that line first`,
    );
  }
  if (held.length && !force)
    throw new CreateAppError(
      EXIT.usage,
      `${path} already holds a GitHub App (${have.SPARK_GITHUB_APP_ID ? `SPARK_GITHUB_APP_ID=${have.SPARK_GITHUB_APP_ID}` : held.join(', ')}): --force replaces it (delete the old App in its GitHub settings)`,
    );
}

/**
 * Writes `values` into the secrets file, keeping its other variables: a new file created with
 * mode 0600 beside it, synced, then renamed over it, so the file is never readable by others
 * and never half-written.
 */
export function writeSecrets(path: string, values: Record<string, string>, header: string[]): void {
  const merged = { ...existing(path), ...values };
  const text = formatSecretsFile(merged, header);
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  rmSync(tmp, { force: true });
  const fd = openSync(tmp, 'wx', 0o600);
  try {
    writeSync(fd, text);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  // the umask can only take bits away; say 0600 exactly
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}
