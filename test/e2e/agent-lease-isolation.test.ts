import { chownSync, existsSync, mkdirSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { type Fleet, type FleetOptions, startFleet } from '../../scripts/sim/doubles/fleet.ts';
import { mountsUnder } from '../../scripts/sim/doubles/host-sandbox.ts';
import { isLive, type RunnerMarker, readRunnerMarkers, waitFor } from '../../scripts/sim/doubles/index.ts';

/**
 * Nothing of one lease reaches the next (ADR 0155). The attacker's path against the agent with the
 * runner as a separate user, as docs/agent.md sets it up: lease 1's job plants a global git hook
 * (`core.hooksPath`), a shell rc line and a cache under the runner user's home, files in /tmp,
 * /var/tmp and /dev/shm, a SysV shared memory segment and a process that outlives it, rewrites the
 * runner install, and tries the model cache. Lease 2's job (another PR of the same repository)
 * finds none of it, and the hook never runs in it; only the repository's build cache carries over,
 * and a lease of another repository cannot see that either. Real agent processes, real users,
 * the real sandbox helper (run directly: the agent runs as root here).
 */

async function fleetFor(ctx: TestContext, opts: FleetOptions): Promise<Fleet> {
  const f = await startFleet(opts);
  ctx.onTestFinished(() => f.close());
  return f;
}

/** Lease 1: the attacker's job. */
function hostileJob(markers: string, runnerDir: string, modelCache: string, tag: string): string {
  return `
    mkdir -p "$HOME/.hooks"
    # the hook reads the later lease's job token, as the attacker's did
    printf '%s\\n' '#!/bin/sh' 'echo "hook ran in $SPARK_RESERVATION_ID with $SPARK_LEASE_TOKEN" >> ${markers}/hook.log' > "$HOME/.hooks/post-checkout"
    chmod +x "$HOME/.hooks/post-checkout"
    git config --global core.hooksPath "$HOME/.hooks" && echo "planted hooksPath"
    echo 'echo rc ran >> ${markers}/rc.log' >> "$HOME/.profile" && echo "planted rc"
    mkdir -p "$HOME/.cache/pip" && echo poisoned > "$HOME/.cache/pip/wheel" && echo "planted cache"
    echo planted > /tmp/${tag} && echo "planted tmp"
    echo planted > /var/tmp/${tag} && echo "planted var-tmp"
    echo planted > /dev/shm/${tag} && echo "planted shm"
    ipcmk -M 4096 >/dev/null && echo "planted sysv shm"
    echo 'echo runner install rewritten >> ${markers}/runner.log' >> ${runnerDir}/run.sh && echo "rewrote runner"
    echo poisoned > ${modelCache}/model.safetensors 2>&1 || echo "model cache refused"
    echo warm > "$SPARK_BUILD_CACHE_DIR/cargo-target-stamp" && echo "wrote build cache"
    setsid sleep 600 >/dev/null 2>&1 </dev/null &
    echo $! > ${markers}/leftover.pid
    echo "attack done"`;
}

/** Lease 2 and 3: an ordinary job that checks out a commit (where a planted hook would run). */
const victimJob = (tag: string) => `
  echo "hooksPath=[$(git config --global core.hooksPath)]"
  echo "home=[$(ls -A "$HOME" | tr '\\n' ' ')]"
  for f in /tmp/${tag} /var/tmp/${tag} /dev/shm/${tag} "$HOME/.cache/pip/wheel"; do
    [ -e "$f" ] && echo "found $f"
  done
  echo "sysv=[$(ipcs -m | awk '$1 ~ /^0x/' | wc -l)]"
  echo "cache=[$(cat "$SPARK_BUILD_CACHE_DIR/cargo-target-stamp" 2>&1)]"
  echo "caches=[$(ls -A "$(dirname "$SPARK_BUILD_CACHE_DIR")" | tr '\n' ' ')]"
  echo "leases=[$(ls -A "$(dirname "$SPARK_WORK_DIR")" 2>&1 | tr '\n' ' ')]"
  cd "$SPARK_WORK_DIR" && git init -q repo && cd repo &&
    git -c user.email=ci@example.org -c user.name=ci commit -q --allow-empty -m x &&
    git checkout -q -b other && echo "checked out"
  echo "victim done"`;

const markerOf = (f: Fleet, rid: string) =>
  waitFor(`the runner of ${rid}`, () => readRunnerMarkers(f.markerDir).find((m) => m.reservationId === rid));

describe('lease isolation (ADR 0155)', () => {
  it("lease 1's planted hook, rc file, caches, temp files and process never reach lease 2; only the repository's build cache does", async (ctx) => {
    let markers = '';
    let runnerDir = '';
    let modelCache = '';
    // names no other run leaves in the host's /tmp, /var/tmp or /dev/shm
    const tag = `planted-${process.pid}-${Date.now()}`;
    const fleet = await fleetFor(ctx, {
      hosts: [{ id: 'spark-2' }],
      githubOutcome: () => 'passed',
      runner: (rid) => ({
        exitCode: 0,
        sleepMs: 100,
        shell: rid === 'r-1' ? hostileJob(markers, runnerDir, modelCache, tag) : victimJob(tag),
      }),
    });
    const f = fleet;
    const user = f.runnerUsers['spark-2'];
    if (!user) throw new Error('the fleet made no runner user: run the agent tests as root (CI does)');
    const hostDir = dirname(f.agentConfigPath('spark-2'));
    markers = f.markerDir;
    runnerDir = join(hostDir, 'runner');
    // the worst case an operator could leave: the model cache owned by the runner user
    modelCache = join(hostDir, 'models');
    mkdirSync(modelCache, { mode: 0o755 });
    chownSync(modelCache, user.uid, user.gid);
    const runShBefore = readFileSync(join(runnerDir, 'run.sh'), 'utf8');
    f.startAgent('spark-2');
    await waitFor('spark-2 heartbeat', async () => (await f.host('spark-2')).lastHeartbeatAt != null);

    const first = await f.reserve({ repo: 'acme/butter', pr: 7 });
    await expect(f.waitReservation(first, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    const m1: RunnerMarker = await markerOf(f, first);
    const attack = m1.shell!.output;
    // the attack itself worked inside its own lease (each step printed its success)...
    for (const step of [
      'planted hooksPath',
      'planted rc',
      'planted cache',
      'planted tmp',
      'planted var-tmp',
      'planted shm',
      'planted sysv shm',
      'rewrote runner',
      'wrote build cache',
      'attack done',
    ])
      expect(attack, attack).toContain(step);
    // ...but the managed model cache is read-only to it, whatever its owner
    expect(attack).toMatch(/Read-only file system/);
    expect(attack).toContain('model cache refused');
    expect(existsSync(join(modelCache, 'model.safetensors'))).toBe(false);
    // nothing of it reached the host: the runner user's real home, /tmp, /dev/shm, the runner install
    expect(readdirSync(user.home).sort()).toEqual(['.bash_logout', '.bashrc', '.profile']);
    expect(readFileSync(join(user.home, '.profile'), 'utf8')).not.toContain('rc ran');
    for (const p of [`/tmp/${tag}`, `/var/tmp/${tag}`, `/dev/shm/${tag}`])
      expect(existsSync(p), p).toBe(false);
    expect(readFileSync(join(runnerDir, 'run.sh'), 'utf8')).toBe(runShBefore);
    // the process it left behind ended with its lease; its work dir and sandbox are gone
    const leftover = Number(readFileSync(join(markers, 'leftover.pid'), 'utf8'));
    expect(isLive(leftover)).toBe(false);
    expect(existsSync(m1.workDir)).toBe(false);
    expect(existsSync(`${m1.workDir}.sandbox`)).toBe(false);
    // its namespace, built at prepare and kept by bind mounts in its sandbox dir (ADR 0200), too
    expect(mountsUnder(dirname(m1.workDir))).toEqual([]);

    // lease 2: another PR of the same repository
    const second = await f.reserve({ repo: 'acme/butter', pr: 8 });
    await expect(f.waitReservation(second, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    const m2 = await markerOf(f, second);
    const seen = m2.shell!.output;
    expect(m2.shell!.code, seen).toBe(0);
    expect(seen).toContain('hooksPath=[]');
    expect(seen).toContain('home=[]');
    expect(seen).not.toContain('found ');
    expect(seen).toContain('sysv=[0]');
    expect(seen).toContain('checked out');
    // the earlier lease's work dir is not even listable from here
    expect(seen).not.toMatch(/r-1-spark-2/);
    // the planted hook never ran: the later lease's token stayed its own
    expect(existsSync(join(markers, 'hook.log'))).toBe(false);
    expect(existsSync(join(markers, 'rc.log'))).toBe(false);
    expect(existsSync(join(markers, 'runner.log'))).toBe(false);
    // the one thing that carries over, on purpose: the repository's build cache (ADR 0157)
    expect(seen).toContain('cache=[warm]');
    expect(m2.env).toContain('SPARK_BUILD_CACHE_DIR');

    // lease 3: another repository neither sees that cache nor can reach it
    const third = await f.reserve({ repo: 'acme/iron', pr: 9 });
    await expect(f.waitReservation(third, ['done', 'failed'], 60_000)).resolves.toMatchObject({
      status: 'done',
    });
    const m3 = await markerOf(f, third);
    expect(m3.shell!.output).toMatch(/cache=\[cat: .*No such file or directory\]/);
    expect(m3.shell!.output).toContain('caches=[acme+iron ]');
    expect(m3.shell!.output).not.toContain('hooksPath=[/');
    expect(existsSync(join(markers, 'hook.log'))).toBe(false);
  });
});
