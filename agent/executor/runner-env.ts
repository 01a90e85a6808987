/** Variables a runner legitimately needs from the host; everything else of the agent's stays out. */
const RUNNER_ENV_KEEP = ['PATH', 'HOME', 'USER', 'LOGNAME', 'SHELL', 'LANG', 'TZ', 'TMPDIR'];

/** The part of the agent's environment a job may see: the basics, locale, and what the config passes. */
export function baseRunnerEnv(from: NodeJS.ProcessEnv, passEnv: readonly string[] = []): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(from)) {
    if (v !== undefined && (RUNNER_ENV_KEEP.includes(k) || k.startsWith('LC_') || passEnv.includes(k)))
      env[k] = v;
  }
  return env;
}

/** An argv as one POSIX shell command line (the preflight runs it with `/bin/sh -c`). */
export function shellJoin(argv: readonly string[]): string {
  return argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}
