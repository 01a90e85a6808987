import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAgentConfig } from '../../agent/config.ts';
import { assertPrivate, resolveRunnerAccount } from '../../agent/host/account.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';

const base = {
  controllerUrl: 'https://spark.example.org',
  hostId: 'spark-1',
  tokenFile: 'agent.token',
  stateFile: 'state/agent.json',
  workRoot: '/var/lib/spark/work',
  modelCacheDir: '/var/lib/spark/models',
  runner: { dir: '/opt/actions-runner' },
};

describe('agent config', () => {
  it('fills defaults and resolves relative paths against the config file directory', () => {
    const cfg = parseAgentConfig(base, 'agent.json', '/etc/spark-agent');
    expect(cfg.tokenFile).toBe('/etc/spark-agent/agent.token');
    expect(cfg.stateFile).toBe('/etc/spark-agent/state/agent.json');
    expect(cfg.runner.command).toEqual(['/opt/actions-runner/run.sh']);
    expect(cfg.nvidiaSmi).toBe('nvidia-smi');
    expect(cfg.service).toBeNull();
    expect(cfg.timeouts.longPollS).toBe(25);
  });

  it('names each bad field and what to fix', () => {
    expect(() =>
      parseAgentConfig(
        { ...base, hostId: 'Spark 1', service: { drain: [], stop: ['x'], start: ['y'], healthUrl: 'nope' } },
        'agent.json',
        '/etc',
      ),
    ).toThrow(
      /hostId: host ids look like "spark-2".*service\.drain: give the command as an argv array.*service\.healthUrl/,
    );
    expect(() => parseAgentConfig({ ...base, extra: 1 }, 'agent.json', '/etc')).toThrow(/Unrecognized key/);
  });
});

describe('agent start-up checks', () => {
  it('refuses a runner user that is root, missing, or the agent itself, naming the fix', () => {
    expect(() => resolveRunnerAccount('root', 1234)).toThrow(/is root; the job must run unprivileged/);
    expect(() => resolveRunnerAccount('no-such-user-xyz', 1234)).toThrow(
      /does not exist; create it: useradd --system/,
    );
    expect(() => resolveRunnerAccount('daemon', 1)).toThrow(/is the agent's own user/);
    expect(resolveRunnerAccount('daemon', 0)).toMatchObject({ name: 'daemon', uid: 1 });
  });

  it('refuses config, token or state reachable by other users, naming the chmod', () => {
    const { dir, cleanup } = tempDir();
    try {
      const file = join(dir, 'agent.token');
      writeFileSync(file, 'spk_agent_x', { mode: 0o644 });
      chmodSync(file, 0o644);
      expect(() => assertPrivate(file, 'agent token file')).toThrow(
        `the agent token file ${file} is accessible to other users (mode 0644); chmod 600 ${file}`,
      );
      chmodSync(file, 0o600);
      expect(() => assertPrivate(file, 'agent token file')).not.toThrow();
      chmodSync(dir, 0o755);
      expect(() => assertPrivate(dir, 'state directory', true)).toThrow(/chmod 700/);
    } finally {
      cleanup();
    }
  });
});

describe('controller URL', () => {
  it('needs https: except to loopback, and no credentials in the URL', () => {
    const at = (controllerUrl: string) => () =>
      parseAgentConfig({ ...base, controllerUrl }, 'agent.json', '/etc');
    expect(at('https://spark.example.org')).not.toThrow();
    expect(at('http://127.0.0.1:8080')).not.toThrow();
    expect(at('http://localhost:8080')).not.toThrow();
    expect(at('http://[::1]:8080')).not.toThrow();
    expect(at('http://spark.example.org')).toThrow(/controllerUrl: use https:\/\//);
    expect(at('http://10.0.0.5:8080')).toThrow(/controllerUrl: use https:\/\//);
    expect(at('https://user:pw@spark.example.org')).toThrow(/controllerUrl/);
    expect(at('ftp://spark.example.org')).toThrow(/controllerUrl/);
  });
});

describe('executor', () => {
  it('defaults to jit-runner and names the allowed values for an unknown one', () => {
    expect(parseAgentConfig(base, 'agent.json', '/etc').executor).toBe('jit-runner');
    expect(parseAgentConfig({ ...base, executor: 'slurm' }, 'agent.json', '/etc').slurm).toEqual({
      bin: '',
      gres: 'gpu:1',
      partition: null,
      conf: null,
    });
    expect(() => parseAgentConfig({ ...base, executor: 'k8s' }, 'agent.json', '/etc')).toThrow(
      'executor: executor is one of jit-runner, slurm, dstack',
    );
  });

  it('dstack needs its server section; relative token files resolve against the config dir', () => {
    expect(() => parseAgentConfig({ ...base, executor: 'dstack' }, 'agent.json', '/etc')).toThrow(
      'dstack: executor "dstack" needs a "dstack" section',
    );
    const cfg = parseAgentConfig(
      {
        ...base,
        executor: 'dstack',
        dstack: {
          url: 'https://dstack.internal:3000',
          tokenFile: 'dstack-token',
          image: 'ghcr.io/acme/ci:1',
        },
      },
      'agent.json',
      '/etc/spark',
    );
    expect(cfg.dstack).toEqual({
      url: 'https://dstack.internal:3000',
      project: 'main',
      tokenFile: '/etc/spark/dstack-token',
      fleet: null,
      image: 'ghcr.io/acme/ci:1',
      ide: null,
      requestTimeoutS: 20,
    });
    expect(() =>
      parseAgentConfig(
        {
          ...base,
          executor: 'dstack',
          dstack: { url: 'http://dstack.example.org', tokenFile: 't', image: 'ghcr.io/acme/ci:1' },
        },
        'agent.json',
        '/etc',
      ),
    ).toThrow(/dstack.url: use https:\/\//);
  });

  it("a dstack section without an image fails: dstack's default image is amd64-only and never starts on a DGX Spark", () => {
    // dstackai/dstack 0.21.2: no `image` makes the job require an x86 CPU
    // (services/jobs/configurators/base.py `_requirements`); docs/executors.md, ADR 0140
    for (const image of [undefined, null, '']) {
      expect(() =>
        parseAgentConfig(
          {
            ...base,
            executor: 'dstack',
            dstack: {
              url: 'https://dstack.internal:3000',
              tokenFile: 't',
              ...(image === undefined ? {} : { image }),
            },
          },
          'agent.json',
          '/etc',
        ),
      ).toThrow(
        image === ''
          ? /dstack.image/
          : /dstack.image: set the image of dstack runs: one with a linux\/arm64 build/,
      );
    }
  });
});
