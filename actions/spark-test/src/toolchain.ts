import { execFile } from 'node:child_process';

interface Probe {
  name: string;
  command: string;
  args: string[];
  /** Picks the one line worth keeping from the tool's output. */
  pick?: (text: string) => string | undefined;
}

const first = (text: string) =>
  text
    .split('\n')
    .find((l) => l.trim())
    ?.trim();

function probes(repoDir: string): Probe[] {
  return [
    { name: 'source', command: 'git', args: ['-C', repoDir, 'rev-parse', 'HEAD'] },
    { name: 'source-date', command: 'git', args: ['-C', repoDir, 'log', '-1', '--format=%cI'] },
    { name: 'python', command: 'python', args: ['--version'] },
    {
      name: 'nvcc',
      command: 'nvcc',
      args: ['--version'],
      pick: (t) =>
        t
          .split('\n')
          .find((l) => /release/i.test(l))
          ?.trim() ?? first(t),
    },
    { name: 'c++', command: 'c++', args: ['--version'] },
    {
      name: 'gpu-driver',
      command: 'nvidia-smi',
      args: ['--query-gpu=name,driver_version', '--format=csv,noheader'],
    },
    { name: 'cargo', command: 'cargo', args: ['--version'] },
  ];
}

function runProbe(p: Probe, env: Record<string, string | undefined>): Promise<string> {
  return new Promise((resolve) => {
    execFile(p.command, p.args, { env, timeout: 15_000, maxBuffer: 256 * 1024 }, (err, stdout, stderr) => {
      const code = (err as NodeJS.ErrnoException | null)?.code;
      if (code === 'ENOENT') return resolve('not found');
      const text = `${stdout}\n${stderr}`;
      if (err && !stdout.trim()) {
        const why = first(stderr) ?? err.message;
        return resolve((/^error\b/i.test(why) ? why : `error: ${why}`).slice(0, 200));
      }
      resolve(((p.pick ?? first)(text) ?? 'no output').slice(0, 200));
    });
  });
}

/**
 * Toolchain and source revisions printed before the suite runs (step 3), kept as short
 * name → line pairs for the receipt. A tool that is absent is recorded as "not found".
 */
export async function collectToolchain(
  repoDir: string,
  env: Record<string, string | undefined>,
): Promise<Record<string, string>> {
  const list = probes(repoDir);
  const values = await Promise.all(list.map((p) => runProbe(p, env)));
  const out: Record<string, string> = { node: process.version };
  list.forEach((p, i) => {
    out[p.name] = values[i]!;
  });
  return out;
}
