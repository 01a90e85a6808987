import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { type CheckResult, failed, passed } from './check.ts';
import type { DoctorOptions } from './doctor-options.ts';
import {
  type CustomImport,
  checkAttentionBackend,
  checkCustomImports,
  checkPins,
  normalizeName,
  type ProvisioningSpec,
  parseFreeze,
  weightsPresent,
} from './provisioning.ts';
import type { Prewarm, ProvisioningRecord } from './provisioning-manifest.ts';
import type { ProbeAnswer } from './python-probe.ts';

/**
 * The spec's checks: the interpreter is the provisioned venv, the lock holds the
 * exact pins, guidelines are followed or the forcing is declared, the model is cached at its
 * pinned revision with its weights, its remote code's imports resolve, the attention backend fits
 * the GPU, and the lock has not drifted since provisioning.
 */
export function provisioningChecks(
  checks: CheckResult[],
  spec: ProvisioningSpec,
  answer: ProbeAnswer | null,
  lock: { source: 'pip freeze' | 'importlib.metadata'; lines: string[] } | null,
  snapshot: string | null,
  prewarmed: Prewarm | null,
  opts: DoctorOptions,
): ProvisioningRecord {
  const venv = spec.venv.replace(/\/+$/, '');
  if (answer) {
    checks.push(
      answer.prefix.replace(/\/+$/, '') === venv
        ? passed('venv', `python runs in the provisioned venv ${venv}`)
        : failed(
            'venv',
            `the python on PATH runs in ${answer.prefix}, not the provisioned venv ${venv}: put ${venv}/bin first on the runner PATH`,
          ),
    );
  }
  const installed = lock ? parseFreeze(lock.lines) : new Map<string, string>();
  if (!lock)
    checks.push(
      failed(
        'lock',
        'could not list the installed distributions (neither pip freeze nor importlib.metadata answered)',
      ),
    );
  const pins = checkPins(spec, installed);
  if (lock) checks.push(...pins.checks);
  const provisioned = opts.provisionedManifestPath ? readProvisionedLock(opts.provisionedManifestPath) : null;
  if (opts.provisionedManifestPath && lock) {
    if (!provisioned) {
      checks.push(
        failed(
          'provisioned',
          `no provisioning manifest at ${opts.provisionedManifestPath}: provision the venv first (doctor --spec … writes it beside the venv)`,
        ),
      );
    } else {
      const drift = lockDrift(provisioned, installed);
      checks.push(
        drift.length === 0
          ? passed('provisioned', 'the venv holds exactly what was provisioned')
          : failed(
              'provisioned',
              `the venv changed since it was provisioned: ${drift.slice(0, 8).join(', ')}${drift.length > 8 ? ` and ${drift.length - 8} more` : ''}`,
            ),
      );
    }
  }

  let model: ProvisioningRecord['model'] = null;
  if (spec.model) {
    const m = spec.model;
    const weights = snapshot ? weightsPresent(snapshot) : false;
    checks.push(
      snapshot
        ? passed('model', `${m.id} is cached at ${m.revision.slice(0, 12)}`)
        : failed(
            'model',
            `${m.id} at revision ${m.revision} is not in the managed model cache${opts.modelCache ? '' : ' (no SPARK_MODEL_CACHE)'}: pre-warm it on the host (doctor --spec … --prewarm); jobs never download weights`,
          ),
    );
    if (snapshot)
      checks.push(
        weights
          ? passed('weights', 'every weight file of the snapshot is present')
          : failed(
              'weights',
              `the cached snapshot of ${m.id} lacks weight files (an interrupted download?): pre-warm again`,
            ),
      );
    let customCode: { files: string[]; imports: CustomImport[] } | null = null;
    if (m.trustRemoteCode && snapshot && answer?.customCode) {
      customCode = { files: answer.customCode.files, imports: answer.customCode.imports };
      for (const [file, why] of Object.entries(answer.customCode.errors))
        checks.push(failed(`custom-code:${file}`, `cannot read the model's remote code ${file}: ${why}`));
      checks.push(...checkCustomImports(customCode.imports, spec.stack, venv));
    }
    model = {
      id: m.id,
      revision: m.revision,
      resolvedRevision: snapshot ? basename(snapshot) : null,
      trustRemoteCode: m.trustRemoteCode,
      weightsPrewarmed: snapshot != null && weights,
      prewarm: prewarmed,
      customCode,
    };
  }

  let attention: ProvisioningRecord['attention'] = null;
  if (spec.attentionBackend) {
    const t = answer?.torch && 'version' in answer.torch ? answer.torch : null;
    const cap = (t?.capability ?? null) as [number, number] | null;
    checks.push(checkAttentionBackend(spec.attentionBackend, cap, t?.device ?? null));
    attention = { backend: spec.attentionBackend, capability: cap };
  }

  const requirements = lock?.lines ?? [];
  return {
    venv,
    prefix: answer?.prefix ?? null,
    lock: lock
      ? {
          source: lock.source,
          sha256: createHash('sha256')
            .update(`${requirements.join('\n')}\n`)
            .digest('hex'),
          requirements,
        }
      : null,
    pins: Object.fromEntries(
      Object.entries(spec.pins).map(([k, v]) => [
        k,
        { pinned: v, installed: installed.get(normalizeName(k)) ?? null },
      ]),
    ),
    servingBackend: spec.servingBackend
      ? { name: spec.servingBackend, version: installed.get(normalizeName(spec.servingBackend)) ?? null }
      : null,
    forcedPins: pins.forced,
    model,
    attention,
  };
}

function readProvisionedLock(path: string): Map<string, string> | null {
  if (!existsSync(path)) return null;
  try {
    const m = JSON.parse(readFileSync(path, 'utf8')) as {
      provisioning?: { lock?: { requirements?: string[] } };
    };
    const req = m.provisioning?.lock?.requirements;
    return Array.isArray(req) ? parseFreeze(req) : null;
  } catch {
    return null;
  }
}

function lockDrift(was: Map<string, string>, now: Map<string, string>): string[] {
  const out: string[] = [];
  for (const [k, v] of was) {
    const n = now.get(k);
    if (n == null) out.push(`${k} ${v} removed`);
    else if (n !== v) out.push(`${k} ${v} → ${n}`);
  }
  for (const [k, v] of now) if (!was.has(k)) out.push(`${k} ${v} added`);
  return out;
}
