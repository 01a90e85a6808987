import { spawn } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync, rmSync, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import * as core from '@actions/core';
import { getInputs, HOST_COMMAND, type LeasePreflightSettings } from './input-helper.ts';

interface ManifestCheck {
  name: string;
  ok: boolean;
  fatal: boolean;
  detail: string;
}

function findOnPath(name: string, pathValue: string): string | null {
  for (const dir of pathValue.split(delimiter)) {
    if (!dir) continue;
    const p = join(dir, name);
    try {
      if (statSync(p).isFile()) {
        accessSync(p, constants.X_OK);
        return p;
      }
    } catch {
      // not here; keep looking
    }
  }
  return null;
}

function runHostCommand(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve, reject) => {
    // inherit stdio: every check line goes straight to the job log
    const child = spawn(command, args, { env, stdio: 'inherit' });
    child.on('error', reject);
    child.on('close', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

function readChecks(path: string): ManifestCheck[] | null {
  if (!existsSync(path)) return null;
  try {
    const m = JSON.parse(readFileSync(path, 'utf8')) as { checks?: ManifestCheck[] };
    return Array.isArray(m.checks) ? m.checks : null;
  } catch {
    return null;
  }
}

function args(s: LeasePreflightSettings): string[] {
  const a = [s.reservationId, '--min-free-gb', s.minFreeGb, '--torch', s.torch];
  a.push('--tools', s.tools.join(','), '--manifest', s.manifestPath, '--source-dir', s.workspace);
  if (s.imports.length) a.push('--imports', s.imports.join(','));
  if (s.softImports.length) a.push('--soft-imports', s.softImports.join(','));
  if (s.provisioningSpec) a.push('--spec', s.provisioningSpec);
  return a;
}

const cell = (v: string) => v.replace(/\|/g, '\\|').replace(/\n/g, ' ');

/**
 * Lease preflight (step 2). Host preflight and lease verification belong to the managed
 * host, not to code from the PR, so this action only runs the host command the agent bundle
 * installs and reports its verdict; a runner without that command is not a Spark runner.
 */
export async function run(): Promise<void> {
  try {
    const s = getInputs();
    const command = findOnPath(HOST_COMMAND, s.path);
    if (!command) {
      throw new Error(
        `${HOST_COMMAND} is not installed on this runner host: lease verification and host preflight belong to the managed Spark host (install the Spark agent bundle); refusing to run`,
      );
    }
    // a manifest left by an earlier job in this workspace must never stand in for this run's
    rmSync(s.manifestPath, { force: true });
    const code = await runHostCommand(command, args(s), s.env);
    const checks = readChecks(s.manifestPath);
    core.setOutput('manifest', s.manifestPath);
    core.setOutput('ok', String(code === 0));
    const failed = (checks ?? []).filter((c) => !c.ok && c.fatal);
    for (const c of failed) core.error(`${c.name}: ${c.detail}`, { title: `Spark preflight: ${c.name}` });
    if (checks) {
      await core.summary
        .addHeading(code === 0 ? 'Spark lease preflight passed' : 'Spark lease preflight failed', 3)
        .addRaw('\n| check | result | detail |\n|---|---|---|\n')
        .addRaw(
          checks
            .map(
              (c) => `| ${cell(c.name)} | ${c.ok ? 'ok' : c.fatal ? 'FAIL' : 'warn'} | ${cell(c.detail)} |`,
            )
            .join('\n'),
        )
        .addRaw('\n')
        .write();
    }
    if (code !== 0) {
      throw new Error(
        failed.length
          ? `lease preflight failed: ${failed.map((c) => c.name).join(', ')}`
          : `lease preflight failed: ${HOST_COMMAND} exited ${code}`,
      );
    }
  } catch (e) {
    core.setFailed(e instanceof Error ? e.message : String(e));
  }
}
