import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../../scripts/sim/ledger.ts';

/**
 * `npm test` installs its own Debian prerequisites (package.json "pretest" →
 * scripts/setup-test-deps.sh). The script is run by the real bash with a PATH holding only stand-in
 * commands, so each case decides what is "installed", who the user is, and records what apt-get
 * was asked to do instead of installing anything. Packages without a command of their own (the
 * Rust toolchain and crates the lane tests use) are asked of a `dpkg-query` stand-in that answers
 * as dpkg-query(1) documents (dpkg 1.21, Debian bookworm): `-W -f='${db:Status-Status}' PKG` prints
 * the status word (`installed`, or e.g. `config-files` for a removed package whose configuration
 * stayed) and exits 0; for a package dpkg has never seen it prints "dpkg-query: no packages found
 * matching PKG" on stderr and exits 1.
 */

const SCRIPT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'scripts', 'setup-test-deps.sh');
const EVERY = [
  'chromium',
  'shellcheck',
  'promtool',
  'sbatch',
  'squeue',
  'sacct',
  'scancel',
  'slurmctld',
  'slurmd',
  'munge',
  'munged',
  'sudo',
  'visudo',
];
const DEBS = ['cargo', 'rustc', 'librust-criterion-dev'];

let dir: { dir: string; cleanup: () => void } | null = null;
afterEach(() => {
  dir?.cleanup();
  dir = null;
});

function run(o: {
  have: string[];
  uid: number;
  sudo?: boolean;
  debs?: Record<string, string>;
  /** Real programs linked into the PATH under test (name → path). */
  links?: Record<string, string>;
}) {
  dir = tempDir('setup-deps-');
  const bin = join(dir.dir, 'bin');
  mkdirSync(bin);
  const log = join(dir.dir, 'apt.log');
  const standIn = (name: string, body: string) => {
    writeFileSync(join(bin, name), `#!/bin/bash\n${body}\n`);
    chmodSync(join(bin, name), 0o755);
  };
  for (const c of o.have) standIn(c, 'exit 0');
  for (const [name, target] of Object.entries(o.links ?? {})) symlinkSync(target, join(bin, name));
  standIn('id', `[ "$1" = "-u" ] && echo ${o.uid}`);
  standIn('apt-get', `echo "$*" >> ${log}`);
  standIn('tr', '/usr/bin/tr "$@"');
  const debs = o.debs ?? Object.fromEntries(DEBS.map((d) => [d, 'installed']));
  standIn(
    'dpkg-query',
    `[ "$1" = -W ] && [ "$2" = '-f=\${db:Status-Status}' ] || { echo "unexpected dpkg-query $*" >&2; exit 2; }
case "$3" in
${Object.entries(debs)
  .map(([pkg, status]) => `  ${pkg}) printf '%s' ${status}; exit 0 ;;`)
  .join('\n')}
  *) echo "dpkg-query: no packages found matching $3" >&2; exit 1 ;;
esac`,
  );
  if (o.sudo) standIn('sudo', `[ "$1" = "-n" ] && shift; [ "$1" = "true" ] && exit 0; "$@"`);
  const r = spawnSync('/bin/bash', [SCRIPT], { env: { PATH: bin }, encoding: 'utf8' });
  return {
    code: r.status,
    stdout: r.stdout,
    stderr: r.stderr,
    apt: existsSync(log) ? readFileSync(log, 'utf8') : '',
  };
}

describe('scripts/setup-test-deps.sh (npm test pretest)', () => {
  it('does nothing and prints nothing when every tool is there', () => {
    const r = run({ have: EVERY, uid: 1000 });
    expect(r).toEqual({ code: 0, stdout: '', stderr: '', apt: '' });
  });

  it('installs only the missing packages when it may (root or passwordless sudo)', () => {
    // commands in /usr/bin only: the script also looks in sbin, where this machine may hold daemons
    const root = run({ have: EVERY.filter((c) => c !== 'promtool' && c !== 'chromium'), uid: 0 });
    expect(root.code).toBe(0);
    expect(root.stdout).toBe(
      'setup-test-deps: installing chromium prometheus (Debian packages the tests use)\n',
    );
    expect(root.apt).toBe('update -qq\ninstall -y -qq --no-install-recommends chromium prometheus\n');
    const sudo = run({ have: EVERY.filter((c) => c !== 'sbatch'), uid: 1000, sudo: true });
    expect(sudo.code).toBe(0);
    expect(sudo.apt).toBe('update -qq\ninstall -y -qq --no-install-recommends slurm-wlm\n');
  });

  it("asks dpkg for the Rust toolchain and crates: a rustup cargo on PATH is not Debian's", () => {
    // a real cargo resolves on PATH (as a rustup ~/.cargo/bin would make it), but dpkg says the
    // package is not installed, and librust-criterion-dev was removed with its configuration left
    const r = run({
      have: EVERY,
      links: { cargo: '/usr/bin/cargo' },
      uid: 0,
      debs: { rustc: 'installed', 'librust-criterion-dev': 'config-files' },
    });
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(
      'setup-test-deps: installing cargo librust-criterion-dev (Debian packages the tests use)\n',
    );
    expect(r.apt).toBe('update -qq\ninstall -y -qq --no-install-recommends cargo librust-criterion-dev\n');
  });

  it('without root or sudo installs nothing, fails and says what to run', () => {
    const r = run({ have: ['shellcheck'], uid: 1000 });
    expect(r.code).toBe(1);
    expect(r.apt).toBe('');
    expect(r.stderr).toContain(
      'setup-test-deps: npm test needs these Debian packages, which are missing: chromium prometheus slurm-wlm munge sudo',
    );
    expect(r.stderr).toContain(
      'apt-get update && apt-get install -y --no-install-recommends chromium prometheus slurm-wlm munge sudo',
    );
  });
});
