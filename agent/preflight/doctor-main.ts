import { formatCheck } from './check.ts';
import { runDoctor } from './doctor.ts';
import { readDoctorSettings, UsageError } from './settings.ts';

/**
 * The provisioning doctor's command line (`npm run doctor -- …`, `spark-runner-preflight doctor
 * …`): the same checks the preflight runs, without a lease; with `--spec` it provisions (and with
 * `--prewarm` pre-warms) and writes PROVISIONING-MANIFEST.json beside the venv. Returns the exit
 * code: 0 when every fatal check passes, 1 otherwise, 2 on usage.
 */
export async function doctorMain(
  argv: readonly string[],
  env: Record<string, string | undefined>,
  print: (line: string) => void = (l) => console.log(l),
  printError: (line: string) => void = (l) => console.error(l),
): Promise<number> {
  try {
    const { options, json } = readDoctorSettings(argv, env);
    const report = await runDoctor(options);
    if (json) {
      print(JSON.stringify(report.manifest, null, 2));
    } else {
      for (const c of report.checks) print(formatCheck(c));
      const bad = report.checks.filter((c) => !c.ok && c.fatal).length;
      print(
        bad
          ? `doctor: ${bad} problem(s) found in ${(report.durationMs / 1000).toFixed(1)} s`
          : `doctor: all ${report.checks.length} checks passed in ${(report.durationMs / 1000).toFixed(1)} s`,
      );
      if (options.manifestPath) print(`doctor: manifest written to ${options.manifestPath}`);
    }
    return report.ok ? 0 : 1;
  } catch (e) {
    if (e instanceof UsageError) {
      printError(`doctor: ${e.message}`);
      return e.exitCode;
    }
    throw e;
  }
}
