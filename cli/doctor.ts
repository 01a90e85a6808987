import { formatCheck } from '../agent/preflight/check.ts';
import { runDoctor } from '../agent/preflight/doctor.ts';
import { readDoctorSettings, UsageError } from '../agent/preflight/settings.ts';
import type { CommandIo } from './commands.ts';
import { CliError, EXIT } from './errors.ts';

/**
 * `sparkctl doctor [--model-cache DIR] [--imports a,b] …`: the in-job part's provisioning doctor
 * (agent/preflight/doctor.ts) on this machine, with the same options as `npm run doctor`.
 */
export async function runDoctorCommand(
  io: CommandIo,
  argv: string[],
  env: Record<string, string | undefined>,
): Promise<number> {
  let settings: ReturnType<typeof readDoctorSettings>;
  try {
    settings = readDoctorSettings(argv, env);
  } catch (e) {
    if (e instanceof UsageError) throw new CliError(EXIT.usage, `doctor: ${e.message.split('\n')[0]}`);
    throw e;
  }
  const report = await runDoctor(settings.options);
  if (settings.json) io.out(JSON.stringify(report.manifest, null, 2));
  else {
    for (const c of report.checks) io.out(formatCheck(c));
    const bad = report.checks.filter((c) => !c.ok && c.fatal).length;
    io.out(
      bad
        ? `doctor: ${bad} problem(s) found in ${(report.durationMs / 1000).toFixed(1)} s`
        : `doctor: all ${report.checks.length} checks passed in ${(report.durationMs / 1000).toFixed(1)} s`,
    );
  }
  return report.ok ? EXIT.ok : EXIT.failed;
}
