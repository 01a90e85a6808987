import { type CheckResult, failed, passed } from './check.ts';
import { lastLine, type ProcessRunner } from './process.ts';
import { hfSnapshot, type ProvisioningSpec, weightsPresent } from './provisioning.ts';
import { PREWARM_SCRIPT } from './python-probe.ts';

/**
 * Pre-warm: when the snapshot and its weights are already cached nothing touches the
 * network (offline-safe); otherwise huggingface_hub downloads exactly the pinned revision into
 * the managed cache, unless the host is offline (HF_HUB_OFFLINE=1), which fails clearly.
 */
export async function prewarmModel(
  runner: ProcessRunner,
  interpreter: string | null,
  model: NonNullable<ProvisioningSpec['model']>,
  hfHome: string | null,
  env: Record<string, string | undefined>,
  neutral: string,
  timeoutMs: number,
): Promise<{ check: CheckResult; action: 'present' | 'downloaded' | null }> {
  const name = 'prewarm';
  if (!hfHome)
    return {
      check: failed(name, 'no model cache configured (SPARK_MODEL_CACHE): nothing to pre-warm into'),
      action: null,
    };
  const cached = hfSnapshot(hfHome, model.id, model.revision);
  if (cached && weightsPresent(cached))
    return {
      check: passed(name, `${model.id}@${model.revision.slice(0, 12)} already cached; no download`),
      action: 'present',
    };
  if (env.HF_HUB_OFFLINE === '1')
    return {
      check: failed(
        name,
        `${model.id}@${model.revision} is not cached and HF_HUB_OFFLINE=1: pre-warm on a host with network access to the Hub`,
      ),
      action: null,
    };
  if (!interpreter)
    return { check: failed(name, 'no python on PATH to run huggingface_hub with'), action: null };
  const r = await runner.run(
    interpreter,
    ['-I', '-c', PREWARM_SCRIPT, JSON.stringify({ id: model.id, revision: model.revision })],
    // the download may take long; the cache location is the managed one, never the user's
    { env: { ...env, HF_HOME: hfHome }, cwd: neutral, timeoutMs: Math.max(timeoutMs, 6 * 3600_000) },
  );
  const got = hfSnapshot(hfHome, model.id, model.revision);
  if (r.code !== 0 || !got)
    return {
      check: failed(
        name,
        `downloading ${model.id}@${model.revision} failed: ${lastLine(r.stderr) || r.spawnError || `exit ${r.code}`}`,
      ),
      action: null,
    };
  return {
    check: passed(name, `${model.id}@${model.revision.slice(0, 12)} downloaded into the managed cache`),
    action: 'downloaded',
  };
}
