import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { baseRunnerEnv, shellJoin } from '../../agent/executor/runner-env.ts';

describe('runner environment', () => {
  it('passes the basics and locale, never the agent’s other variables', () => {
    const env = baseRunnerEnv({
      PATH: '/usr/bin',
      HOME: '/home/runner',
      LANG: 'C.UTF-8',
      LC_ALL: 'C.UTF-8',
      SPARK_AGENT_SECRET: 'do-not-leak',
      AWS_SECRET_ACCESS_KEY: 'nope',
      HTTPS_PROXY: 'http://proxy.internal:3128',
    });
    expect(env).toEqual({ PATH: '/usr/bin', HOME: '/home/runner', LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8' });
    expect(baseRunnerEnv({ PATH: '/bin', HTTPS_PROXY: 'http://p:1', OTHER: 'x' }, ['HTTPS_PROXY'])).toEqual({
      PATH: '/bin',
      HTTPS_PROXY: 'http://p:1',
    });
  });

  it('quotes an interconnect command so /bin/sh -c runs exactly that argv', () => {
    const argv = ['printf', '%s\\n', "it's", 'two words', '$HOME', '`id`', 'plain-arg_1.0'];
    const out = execFileSync('/bin/sh', ['-c', shellJoin(argv)], { encoding: 'utf8' });
    expect(out.split('\n').slice(0, -1)).toEqual(["it's", 'two words', '$HOME', '`id`', 'plain-arg_1.0']);
  });
});
