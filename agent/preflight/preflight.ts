import type { LeaseVerifyResponse } from '../../core/protocol/receipt.ts';
import { type CheckResult, failed, fatalFailures, formatCheck, passed } from './check.ts';
import { type ProvisioningManifest, runDoctor, writeManifest } from './doctor.ts';
import { checkDisk, checkGpuFree, checkHomeServiceReleased, checkInterconnect } from './host-checks.ts';
import { createProcessRunner, type ProcessRunner } from './process.ts';
import type { PreflightSettings } from './settings.ts';
import { verifyLease } from './verify-lease.ts';

export interface PreflightPorts {
  fetch: typeof fetch;
  runner: ProcessRunner;
  /** Where each check line goes as soon as the report is complete. */
  print: (line: string) => void;
}

export interface PreflightReport {
  ok: boolean;
  checks: CheckResult[];
  manifest: ProvisioningManifest;
  durationMs: number;
}

/**
 * `spark-runner-preflight <reservation_id>`: verify the lease with the controller, check the host
 * locally (GPU free, disk, interconnect for pairs, home service released), run the provisioning
 * doctor, write PROVISIONING-MANIFEST.json. All checks run (so one run shows every problem);
 * any fatal failure fails the preflight.
 */
export async function runPreflight(
  s: PreflightSettings,
  ports: Partial<PreflightPorts> = {},
): Promise<PreflightReport> {
  const started = Date.now();
  const fetchFn = ports.fetch ?? fetch;
  const runner = ports.runner ?? createProcessRunner();
  const print = ports.print ?? ((line: string) => console.log(line));
  const env = s.childEnv;

  const [lease, gpu, interconnect, service, doctor] = await Promise.all([
    verifyLease(fetchFn, s.cred),
    checkGpuFree(runner, env),
    s.cred.topology === 'pair' ? checkInterconnect(runner, s.interconnectCheck, env) : Promise.resolve(null),
    s.homeService ? checkHomeServiceReleased(fetchFn, s.homeService, s.healthUrl) : Promise.resolve(null),
    runDoctor({
      env,
      modelCache: s.modelCache,
      ...s.doctor,
      sourceDir: s.sourceDir,
      hostId: s.cred.hostId,
      manifestPath: null,
      runner,
    }),
  ]);
  const checks: CheckResult[] = [lease.check, gpu, checkDisk(s.workDir, s.minFreeGb)];
  if (interconnect) checks.push(interconnect);
  if (service) checks.push(service);
  if (lease.answer?.lease.lend && !s.homeService) {
    checks.push(
      failed(
        'home-service',
        'the controller lent this host’s home service but SPARK_HOME_SERVICE is not set: cannot prove it is released',
      ),
    );
  }
  checks.push(sourceCheck(lease.answer, doctor.manifest.sourceCommit));
  checks.push(...doctor.checks);

  const ok = fatalFailures(checks).length === 0;
  const manifest: ProvisioningManifest = {
    ...doctor.manifest,
    ok,
    checks,
    reservation: lease.answer
      ? {
          id: lease.answer.reservation.id,
          headSha: lease.answer.reservation.headSha,
          topology: lease.answer.reservation.topology,
          suite: lease.answer.reservation.suite,
        }
      : null,
  };
  writeManifest(s.manifestPath, manifest);
  for (const c of checks) print(formatCheck(c));
  const durationMs = Date.now() - started;
  const bad = fatalFailures(checks);
  print(
    ok
      ? `preflight passed: ${checks.length} checks in ${(durationMs / 1000).toFixed(1)} s`
      : `preflight FAILED: ${bad.length} of ${checks.length} checks failed (${bad.map((c) => c.name).join(', ')})`,
  );
  return { ok, checks, manifest, durationMs };
}

/** The checked-out commit must be the one the controller admitted (not only the workflow input). */
function sourceCheck(answer: LeaseVerifyResponse | null, commit: string | null): CheckResult {
  const name = 'source';
  if (!answer) return failed(name, 'not checked: the lease was not verified');
  const want = answer.reservation.headSha;
  if (!want) return passed(name, 'the reservation binds no commit');
  if (!commit) return failed(name, `cannot read the checked-out commit; the admitted commit is ${want}`);
  return commit === want
    ? passed(name, `checked-out ${commit.slice(0, 12)} is the admitted commit`)
    : failed(name, `checked-out ${commit} is not the admitted ${want}`);
}
