import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createGitHubClient } from '../../functions/github/client.ts';
import { GitHubApiStats } from '../../functions/metrics/github-api.ts';
import { collectProcessMetrics } from '../../functions/metrics/process.ts';
import { formatPrometheus } from '../../functions/metrics/prom-text.ts';

/**
 * The GitHub API figures on /metrics come from every call the client makes. Header names and
 * meanings follow GitHub's REST docs ("Rate limits for the REST API": x-ratelimit-limit,
 * -remaining, -reset in UTC epoch seconds, -resource).
 */
describe('GitHub API stats', () => {
  it('counts errors by status and keeps the last rate limit GitHub reported per resource', async () => {
    const stats = new GitHubApiStats();
    const answers = [
      new Response('{}', {
        status: 200,
        headers: {
          'x-ratelimit-limit': '5000',
          'x-ratelimit-remaining': '4990',
          'x-ratelimit-reset': '1798000000',
          'x-ratelimit-resource': 'core',
        },
      }),
      new Response('{"message":"Not Found"}', { status: 404 }),
      new Response('{"message":"API rate limit exceeded"}', {
        status: 403,
        headers: {
          'x-ratelimit-limit': '5000',
          'x-ratelimit-remaining': '0',
          'x-ratelimit-reset': '1798000300',
          'x-ratelimit-resource': 'core',
        },
      }),
    ];
    let unreachable = false;
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const client = createGitHubClient({
      apiUrl: 'https://api.github.test',
      appId: '1',
      privateKey: privateKey.export({ type: 'pkcs1', format: 'pem' }).toString(),
      fetch: async () => {
        if (unreachable) throw new TypeError('fetch failed');
        return answers.shift()!;
      },
      observe: (o) => stats.observe(o),
    });
    const call = () => client.request('GET', '/app', { as: 'app' });
    await call();
    await expect(call()).rejects.toThrow(/404/);
    await expect(call()).rejects.toThrow(/403/);
    unreachable = true;
    await expect(call()).rejects.toThrow(/unreachable/);
    expect(stats.calls).toBe(4);
    expect(Object.fromEntries(stats.errorsByStatus)).toEqual({ '404': 1, '403': 1, unreachable: 1 });
    // the 403's headers are the newest: the window is spent until the reset
    expect(stats.rateLimit.get('core')).toEqual({ limit: 5000, remaining: 0, resetS: 1798000300 });

    const text = formatPrometheus(
      collectProcessMetrics({ admission: null, github: stats, runtime: 'node', buckets: [0.1] }),
    );
    expect(text).toContain('spark_github_api_errors_total{status="403"} 1');
    expect(text).toContain('spark_github_api_errors_total{status="unreachable"} 1');
    expect(text).toContain('spark_github_rate_limit_remaining{resource="core"} 0');
    expect(text).toContain('spark_github_rate_limit_reset_timestamp_seconds{resource="core"} 1798000300');
    expect(text).toMatch(/^spark_build_info\{version="\d+\.\d+\.\d+",runtime="node",node="[\d.]+"\} 1$/m);
  });
});
