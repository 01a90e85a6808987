/**
 * The scripts' settings module: the one file under `scripts/` that reads the environment
 * (docs/architecture.md "Parts"; `scripts/lint/boundaries.ts` fails on a read anywhere else). A
 * script that runs the controller's own code hands {@link scriptEnv} to that code's settings
 * function (`functions/settings.ts` `settingsFromEnv`, `runAdmin`, the deploy target); the rest
 * are the few knobs the scripts take, named here.
 */

/** The environment as a whole, for the settings function a script hands it to. */
export function scriptEnv(): Readonly<Record<string, string | undefined>> {
  return process.env;
}

/** The environment of a child process a script starts: this one's, with `extra` over it. */
export function childEnv(extra: Readonly<Record<string, string>>): NodeJS.ProcessEnv {
  return { ...process.env, ...extra };
}

/** Who runs an operator script, for the audit rows it writes: `$USER`, else `operator`. */
export function operatorName(): string {
  return process.env.USER ?? 'operator';
}

/** Whether the terminal output may be coloured: not when `NO_COLOR` is set (https://no-color.org). */
export function colorAllowed(): boolean {
  return !process.env.NO_COLOR;
}

/**
 * A benchmark knob (`SPARK_BENCH_*`): a number ≥ 0 from the environment, else `dflt` when unset
 * or empty. Anything else is an error that names the variable.
 */
export function benchNumber(name: string, dflt: number): number {
  const v = process.env[name];
  if (v == null || v === '') return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a number ≥ 0, got ${JSON.stringify(v)}`);
  return n;
}

/** `SPARK_BENCH_CPU_PROF=<dir>`: where the webhook bench has the controller write a V8 CPU profile. */
export function benchCpuProfileDir(): string | undefined {
  return process.env.SPARK_BENCH_CPU_PROF || undefined;
}
