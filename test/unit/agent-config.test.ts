import { describe, expect, it } from 'vitest';
import { parseAgentConfig } from '../../agent/config.ts';

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
