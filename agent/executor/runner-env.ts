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

/**
 * The runner's environment when it runs as its own user: built fresh (nothing inherited from the
 * agent but the names `passEnv` lists), with the runner user's identity and home.
 */
export function freshRunnerEnv(
  from: NodeJS.ProcessEnv,
  account: { name: string; home: string },
  path: string,
  passEnv: readonly string[] = [],
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    PATH: path,
    HOME: account.home,
    USER: account.name,
    LOGNAME: account.name,
    SHELL: '/bin/sh',
    LANG: 'C.UTF-8',
  };
  for (const k of passEnv) if (from[k] !== undefined) env[k] = from[k];
  return env;
}
