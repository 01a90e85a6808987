/**
 * Child-process entry for {@link startFakeGitHubProcess}: runs the fake GitHub
 * (scripts/sim/fake-github/server.ts) in its own process, so under load it has its own event loop
 * instead of competing with the test's senders. Controlled over the IPC channel.
 */
import { type FakeGitHub, type PullState, startFakeGitHub } from '../fake-github/server.ts';
import type { FakeGitHubCommand, FakeGitHubReply, RepoSpec } from './fake-github-process.ts';

let gh: FakeGitHub | null = null;

function reply(m: FakeGitHubReply) {
  process.send!(m);
}

function addRepo(spec: RepoSpec) {
  const pulls: Record<number, PullState> = {};
  for (const [n, p] of Object.entries(spec.pulls ?? {})) pulls[Number(n)] = p;
  gh!.addRepo(spec.fullName, {
    installationId: spec.installationId,
    defaultBranch: spec.defaultBranch ?? 'main',
    collaborators: spec.collaborators ?? {},
    pulls,
  });
}

process.on('message', async (raw) => {
  const m = raw as FakeGitHubCommand;
  try {
    if (m.type === 'start') {
      gh = await startFakeGitHub();
      // never close an idle keep-alive connection first: under heavy load a controller can write
      // its next request onto a socket the server is closing (ECONNRESET), a race of the test
      // setup that real GitHub's front end does not show at this rate
      gh.server.keepAliveTimeout = 0;
      for (const r of m.repos) addRepo(r);
      reply({ type: 'started', url: gh.url, appId: gh.appId, privateKey: gh.privateKey });
    } else if (m.type === 'snapshot') {
      reply({
        type: 'snapshot',
        checkRuns: gh!.checkRuns,
        violations: gh!.violations,
        requests: gh!.requests.length,
        dispatches: gh!.dispatches.length,
        runners: gh!.runners.length,
      });
    } else if (m.type === 'close') {
      // the parent's close() fails on these, as FakeGitHub.close() does in one process
      const violations = gh?.takeViolations() ?? [];
      await gh?.close();
      reply({ type: 'closed', violations });
      process.disconnect();
    }
  } catch (e) {
    reply({ type: 'error', message: String((e as Error)?.stack ?? e) });
  }
});
