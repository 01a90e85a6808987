import { expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../core/config.ts';

/**
 * A repository key is echoed in its errors cut to 100 characters (`core/config-schema.ts`), so a
 * pasted blob in `repositories` cannot flood the operator's terminal or the settings page.
 */
it('names a long repository key by its first 100 characters in each task-only error', () => {
  const repo = `acme/${'b'.repeat(150)}`;
  const cut = repo.slice(0, 100);
  let problems: string[] = [];
  try {
    parseConfig({
      repositories: {
        [repo]: { ci: 'task', executor: 'slurm' },
        [`${repo}x`]: {
          distributedAssertion: 'scripts/ci/assert-pair.sh',
          cloneUrl: 'https://git.example/x.git',
        },
      },
    });
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    problems = (e as ConfigError).problems;
  }
  expect(problems).toEqual([
    `repositories.${repo}.ci: ci "task" runs scripts/ci/spark-test.sh as a dstack task: set "executor": "dstack" for ${cut} (it is "slurm"), or drop "ci"`,
    `repositories.${repo}x.distributedAssertion: distributedAssertion is used only by ci "task" (a runner job declares it in its workflow); set "ci": "task" for ${cut} or drop it`,
    `repositories.${repo}x.cloneUrl: cloneUrl is used only by ci "task"; set "ci": "task" for ${cut} or drop cloneUrl`,
  ]);
});
