import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../scripts/sim/doubles/index.ts';

export interface WranglerDev {
  url: string;
  output(): string;
  stop(): Promise<void>;
}

/**
 * Runs the Worker in real workerd through `wrangler dev --local` on 127.0.0.1: no Cloudflare
 * account and no network (cf fetch, banner update check and metrics are off, HOME is a temp
 * dir). Resolves once the Worker answers; `stop()` kills the whole process group.
 */
export async function startWranglerDev(vars: Record<string, string>): Promise<WranglerDev> {
  const dir = mkdtempSync(join(tmpdir(), 'spark-worker-'));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const args = [
    'node_modules/wrangler/bin/wrangler.js',
    'dev',
    '--local',
    '--ip',
    '127.0.0.1',
    '--port',
    String(port),
    '--inspector-port',
    String(await freePort()),
    '--persist-to',
    join(dir, 'state'),
    '--show-interactive-dev-session=false',
  ];
  for (const [k, v] of Object.entries(vars)) args.push('--var', `${k}:${v}`);
  const proc: ChildProcess = spawn(process.execPath, args, {
    env: {
      PATH: process.env.PATH ?? '',
      HOME: dir,
      XDG_CONFIG_HOME: dir,
      CI: '1',
      WRANGLER_SEND_METRICS: 'false',
      WRANGLER_HIDE_BANNER: 'true',
      CLOUDFLARE_CF_FETCH_ENABLED: 'false',
    },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stdout!.on('data', (b) => {
    output += String(b);
  });
  proc.stderr!.on('data', (b) => {
    output += String(b);
  });
  const stop = async () => {
    if (proc.pid && proc.exitCode == null) {
      const exited = new Promise<void>((r) => proc.once('exit', () => r()));
      process.kill(-proc.pid, 'SIGTERM');
      const timer = setTimeout(() => {
        if (proc.exitCode == null) process.kill(-proc.pid!, 'SIGKILL');
      }, 5000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 50_000;
  for (;;) {
    if (proc.exitCode != null) {
      await stop();
      throw new Error(`wrangler dev exited early:\n${output}`);
    }
    try {
      const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(5000) });
      await res.text();
      break;
    } catch {
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`wrangler dev did not answer within 50 s:\n${output}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  return { url, output: () => output, stop };
}
