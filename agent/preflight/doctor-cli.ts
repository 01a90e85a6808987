import { formatCheck } from './check.ts';
import { runDoctor } from './doctor.ts';
import { readDoctorSettings, UsageError } from './settings.ts';

/**
 * Standalone provisioning doctor for operators (`npm run doctor -- …`): the same checks the
 * preflight runs, without a lease. Exit 0 when every fatal check passes, 1 otherwise, 2 on usage.
 */
async function main(): Promise<number> {
  try {
    const { options, json } = readDoctorSettings(process.argv.slice(2), process.env);
    const report = await runDoctor(options);
    if (json) {
      console.log(JSON.stringify(report.manifest, null, 2));
    } else {
      for (const c of report.checks) console.log(formatCheck(c));
      const bad = report.checks.filter((c) => !c.ok && c.fatal).length;
      console.log(
        bad
          ? `doctor: ${bad} problem(s) found in ${(report.durationMs / 1000).toFixed(1)} s`
          : `doctor: all ${report.checks.length} checks passed in ${(report.durationMs / 1000).toFixed(1)} s`,
      );
    }
    return report.ok ? 0 : 1;
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`doctor: ${e.message}`);
      return e.exitCode;
    }
    throw e;
  }
}

process.exitCode = await main();
