import { doctorMain } from './doctor-main.ts';
import { runPreflight } from './preflight.ts';
import { readPreflightSettings, UsageError } from './settings.ts';

/**
 * Entry of the host command `spark-runner-preflight <reservation_id>` (bundled to
 * agent/dist/spark-runner-preflight.mjs). Exit 0 passed, 1 a check failed, 2 usage/environment.
 * `spark-runner-preflight doctor …` runs the provisioning doctor (doctor-main.ts) instead.
 */
async function main(): Promise<number> {
  // `spark-runner-preflight doctor …`: provisioning and pre-warm on the host, without a lease
  if (process.argv[2] === 'doctor') return doctorMain(process.argv.slice(3), process.env);
  try {
    const settings = readPreflightSettings(process.argv.slice(2), process.env);
    const report = await runPreflight(settings);
    return report.ok ? 0 : 1;
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`spark-runner-preflight: ${e.message}`);
      return e.exitCode;
    }
    console.error(`spark-runner-preflight: internal error: ${(e as Error)?.stack ?? e}`);
    return 1;
  }
}

process.exitCode = await main();
