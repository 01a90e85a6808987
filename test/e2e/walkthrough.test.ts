import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { agentBundle } from '../../scripts/sim/doubles/fleet.ts';
import {
  FakeDeckard,
  FakeGpu,
  freePort,
  REPO_ROOT,
  simulatedAgentConfig,
  waitFor,
} from '../../scripts/sim/doubles/index.ts';
import { type FakeGitHubWeb, startFakeGitHubWeb } from '../../scripts/sim/fake-github/app-manifest-flow.ts';
import { type FakeGitHub, startFakeGitHub } from '../../scripts/sim/fake-github/server.ts';
import { loadWorkflow } from '../../scripts/sim/fake-github/workflows.ts';
import {
  DEFAULT_BRANCH_TIP,
  type GitHubSim,
  MAINTAINER,
  REPO,
  startGitHubSim,
} from '../../scripts/sim/harness/github-sim.ts';
import {
  baseEnv,
  killGroup,
  type ProcessHandle,
  sweepProcessesUnder,
  track,
} from '../../scripts/sim/harness/processes.ts';
import { SIM_RUNNER } from '../../scripts/sim/harness/system.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';
import { firstForm } from '../helpers/html-form.ts';
import { docSays, GITHUB_APP_DOC, README, section, shellCommands, words } from '../helpers/operator-docs.ts';

/**
 * The operator's walkthrough: the steps of README.md ("npm start", "First setup") and
 * docs/github-app.md ("Create the App", "Enabling a repository", "What people see on a PR") run in
 * the order the docs give them, each documented command parsed from the docs and run for real as
 * the child process package.json maps it to (`npm start`, `npm run admin -- …`, `npm run
 * agent-token -- …`, `npx sparkctl …`), against the strict fake GitHub (every request checked
 * against GitHub's description and the App's real permissions, scripts/sim/fake-github/server.ts): the
 * App created through the manifest flow, installed on the repository, the configuration copied
 * from spark.config.example.json with only the edits the docs tell the operator to make, two hosts
 * with the shipped agent bundle (Deckard on spark-1), `deckard drill`, `doctor`, `enable`, a
 * labelled PR, and its check run ending `success` on the PR's exact commit.
 *
 * A documented command the walkthrough does not know fails it, as does a step it needs that the
 * docs no longer name (a prose step runs only after `docSays` found the sentence that asks for it,
 * and README's prose steps run in the order README gives them): an edit the docs do not describe
 * cannot sneak in (docs/adr/0195-the-operator-docs-are-the-walkthrough-script.md).
 *
 * What stands in for the operator's world, each a documented setting: the fake GitHub plays a
 * GitHub Enterprise Server (`github.apiUrl`, `create-app --github-url`), the controller listens on
 * a free port (`SPARK_PORT`, and `SPARK_URL` for sparkctl) with its public URL on loopback ("plain
 * http only on loopback, for trying it out"), and the background tick and admission period are
 * shortened (`SPARK_TICK_MS`, `SPARK_ADMISSION_INTERVAL_MS`). The hosts are simulated Sparks
 * (fake `nvidia-smi`, fake Deckard, the Actions runner played by scripts/sim/harness/sim-runner.mjs),
 * their agent.json the system harness's (docs/agent.md, outside this walkthrough).
 */

const PKG = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as {
  scripts: Record<string, string>;
  bin: Record<string, string>;
};
/** tsx of the checkout: `tsx FILE` in a package.json script runs as `node --import tsx FILE`. */
const TSX = pathToFileURL(createRequire(join(REPO_ROOT, 'package.json')).resolve('tsx')).href;
/** The placeholder URL the docs' create-app command carries. */
const DOC_PUBLIC_URL = 'https://spark.example.org';
/** The runner group the operator creates (not the example's 2: the edit must be made). */
const RUNNER_GROUP_ID = 7;
const PR_SHA = '5a7c0ffee1d2e3f405a7c0ffee1d2e3f405a7c0f';
/** Where the Spark actions live for the template installer (a full-SHA pin, docs/in-job.md). */
const ACTIONS_PIN = `acme/spark-controller@${'0123456789abcdef'.repeat(2)}01234567`;

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * A documented command as the node command line package.json makes of it: `npm start` and `npm
 * run NAME -- ARGS` run `scripts.NAME` (each is `tsx FILE`), `npx sparkctl ARGS` the package's
 * `bin.sparkctl`. Anything else is a step the walkthrough cannot run: the test fails.
 */
function nodeArgv(command: string): string[] {
  const w = words(command);
  const script = (name: string) => {
    const s = PKG.scripts[name];
    const m = s ? /^tsx (\S+)$/.exec(s) : null;
    if (!m)
      throw new Error(
        `package.json script "${name}" is not \`tsx FILE\` (it is ${s}): teach the walkthrough`,
      );
    return ['--import', TSX, join(REPO_ROOT, m[1]!)];
  };
  if (w[0] === 'npm' && w[1] === 'start' && w.length === 2) return script('start');
  if (w[0] === 'npm' && w[1] === 'run' && w[3] === '--') return [...script(w[2]!), ...w.slice(4)];
  if (w[0] === 'npx' && w[1] === 'sparkctl' && PKG.bin.sparkctl)
    return [join(REPO_ROOT, PKG.bin.sparkctl), ...w.slice(2)];
  throw new Error(`the walkthrough does not know how to run the documented command: ${command}`);
}

describe('the operator walkthrough of README.md and docs/github-app.md', () => {
  let root: { dir: string; cleanup: () => void } | null = null;
  let gh: FakeGitHub | null = null;
  let web: FakeGitHubWeb | null = null;
  let sim: GitHubSim | null = null;
  let controller: ProcessHandle | null = null;
  const agents: ProcessHandle[] = [];
  /** The documented commands' processes (a step that hangs is killed with the test). */
  const commands: ChildProcess[] = [];
  const deckards: FakeDeckard[] = [];
  const transcript: string[] = [];

  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') {
      console.error(`walkthrough transcript:\n${transcript.join('\n')}`);
      console.error(`controller:\n${controller?.output().slice(-4000) ?? ''}`);
      for (const a of agents) console.error(`agent:\n${a.output().slice(-2000)}`);
    }
    for (const p of commands.splice(0)) if (p.exitCode == null && p.signalCode == null) p.kill('SIGKILL');
    await Promise.all(agents.map((a) => a.stop('SIGKILL')));
    for (const j of sim?.jobs ?? []) killGroup(j.pid, j.seenAt);
    for (const d of deckards) d.kill();
    if (root) await sweepProcessesUnder(root.dir);
    await controller?.stop('SIGTERM');
    await web?.close();
    try {
      // throws on any request GitHub's description or the App's permissions refuse
      if (sim) await sim.close();
      else await gh?.close();
    } finally {
      root?.cleanup();
    }
  });

  it('creates the App, sets up the fleet, enables the repository, and a labelled PR ends with a passed check on its exact SHA', async () => {
    root = tempDir('spark-walkthrough-');
    const checkout = join(root.dir, 'checkout');
    mkdirSync(checkout);
    const port = await freePort();
    const controllerUrl = `http://127.0.0.1:${port}`;

    // ------------------------------------------------------------ GitHub before the operator starts
    // the organization acme and its repository, with a maintainer; no App yet
    gh = await startFakeGitHub();
    web = await startFakeGitHubWeb(gh);
    const repo = gh.addRepo(REPO, {
      collaborators: { [MAINTAINER]: 'admin' },
      headSha: DEFAULT_BRANCH_TIP,
      workflows: {},
    });
    const someoneElses = repo.installationId;
    // GitHub Actions and GitHub's webhooks: from the App the operator creates, once it exists
    let app: { id: number; installUrl: string } | null = null;
    let operatorToken = '';
    sim = await startGitHubSim({ controllerUrl, github: { gh, app: () => app?.id ?? null } });
    // what a delivery did, for the test (GitHub itself sees only the 2xx)
    sim.processed = async (id) => {
      const res = await fetch(`${controllerUrl}/api/v1/deliveries/${id}`, {
        headers: { authorization: `Bearer ${operatorToken}` },
      });
      const body = (await res.json()) as { delivery?: { state: string; result: string } };
      return res.ok && body.delivery ? body.delivery : null;
    };

    // ------------------------------------------------------------ the docs' commands
    const top = shellCommands(README.split('\n## ')[0]!);
    const setup = shellCommands(section(README, /^### First setup/));
    const createAppDoc = shellCommands(section(GITHUB_APP_DOC, /^## Create the App/));
    expect(top, 'README starts the controller with npm start').toContain('npm start');
    expect(createAppDoc).toHaveLength(1);
    // the two guides give the same create-app command, and README's enable is the synopsis's
    expect(setup).toContain(createAppDoc[0]);
    const synopsis = shellCommands(section(GITHUB_APP_DOC, /^## Enabling a repository/))[0]!;
    expect(synopsis).toMatch(/^sparkctl repo enable OWNER\/NAME /);
    expect(setup).toContain(`npx sparkctl repo enable ${REPO}`);
    transcript.push(`documented steps: ${JSON.stringify(setup)}`);

    // ------------------------------------------------------------ the config
    docSays(
      README,
      'Start from [`spark.config.example.json`](spark.config.example.json)',
      'to start from the example config',
    );
    const config = JSON.parse(readFileSync(join(REPO_ROOT, 'spark.config.example.json'), 'utf8'));
    docSays(
      GITHUB_APP_DOC,
      'GitHub Enterprise Server: set `github.apiUrl`',
      'how to point at a GitHub Enterprise Server',
    );
    config.github.apiUrl = gh.url;
    const writeConfig = () =>
      writeFileSync(join(checkout, 'spark.config.json'), `${JSON.stringify(config, null, 2)}\n`);
    writeConfig();
    const hostIds = (config.hosts as { id: string }[]).map((h) => h.id);

    // ------------------------------------------------------------ processes
    docSays(
      README,
      'a second `npm start` needs another `SPARK_PORT`',
      'that SPARK_PORT moves the controller',
    );
    const sparkEnv: Record<string, string> = {
      ...baseEnv(),
      HOME: checkout,
      SPARK_PORT: String(port),
      SPARK_TICK_MS: '200',
      SPARK_ADMISSION_INTERVAL_MS: '500',
    };
    const cliEnv: Record<string, string> = { ...baseEnv(), HOME: checkout, SPARK_URL: controllerUrl };
    const run = (command: string, extra: string[] = []): Promise<Ran> =>
      new Promise((resolve) => {
        const argv = [...nodeArgv(command), ...extra];
        const p = spawn(process.execPath, argv, {
          cwd: checkout,
          env: command.startsWith('npx sparkctl') ? cliEnv : sparkEnv,
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        commands.push(p);
        let stdout = '';
        let stderr = '';
        p.stdout.on('data', (b: Buffer) => {
          stdout += b;
        });
        p.stderr.on('data', (b: Buffer) => {
          stderr += b;
        });
        p.once('close', (code) => {
          transcript.push(
            `${new Date().toISOString().slice(11, 23)} $ ${command} → exit ${code}\n${stdout}${stderr}`.trimEnd(),
          );
          resolve({ code, stdout, stderr });
        });
      });
    const must = async (command: string, extra: string[] = []) => {
      const r = await run(command, extra);
      expect(r.code, `${command}\n${r.stdout}${r.stderr}`).toBe(0);
      return r;
    };
    const startController = async () => {
      const h = track(
        spawn(process.execPath, nodeArgv('npm start'), {
          cwd: checkout,
          env: sparkEnv,
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
        join(root!.dir, 'controller.log'),
      );
      await waitFor(
        'the controller to answer /healthz',
        async () => {
          if (h.proc.exitCode != null) throw new Error(`npm start exited ${h.proc.exitCode}: ${h.output()}`);
          return (await fetch(`${controllerUrl}/healthz`).catch(() => null))?.ok;
        },
        30_000,
        100,
      );
      return h;
    };

    // ------------------------------------------------------------ npm start
    controller = await startController();

    // the agent bundle (agent/dist/spark-agent.mjs as the build makes it) builds meanwhile
    const bundle = agentBundle();
    const startAgent = async (hostId: string, token: string) => {
      const hd = join(root!.dir, hostId);
      mkdirSync(join(hd, 'runner'), { recursive: true });
      symlinkSync(SIM_RUNNER, join(hd, 'runner', 'run.mjs'));
      mkdirSync(join(hd, 'job-logs'));
      const gpu = new FakeGpu(join(hd, 'gpu'));
      const home = (config.hosts as { id: string; homeService?: string }[]).find(
        (h) => h.id === hostId,
      )!.homeService;
      let service: Record<string, unknown> | null = null;
      if (home) {
        // the host's inference service runs before its agent is installed
        const deckard = new FakeDeckard(join(hd, 'deckard'), gpu, await freePort());
        deckards.push(deckard);
        await deckard.start();
        service = deckard.service(home);
      }
      // the agent token file: mode 0600 (README "First setup")
      writeFileSync(join(hd, 'agent.token'), `${token}\n`, { mode: 0o600 });
      const agentConfig = simulatedAgentConfig({
        controllerUrl,
        hostId,
        runnerCommand: [
          process.execPath,
          join(hd, 'runner', 'run.mjs'),
          sim!.actionsUrl,
          join(hd, 'job-logs'),
        ],
        service,
        logLevel: 'info',
      });
      agentConfig.runner.dir = join(hd, 'runner');
      writeFileSync(join(hd, 'agent.json'), JSON.stringify(agentConfig, null, 2), { mode: 0o600 });
      agents.push(
        track(
          spawn(process.execPath, [await bundle, '--config', join(hd, 'agent.json')], {
            cwd: hd,
            env: { ...baseEnv(), ...gpu.env() },
            stdio: ['ignore', 'pipe', 'pipe'],
          }),
          join(hd, 'agent.log'),
        ),
      );
    };

    const used = new Set<string>();
    const step = (name: string) => used.add(name);
    const agentTokensMade = new Set<string>();
    let labelsToCreate: string[] = [];

    for (const command of setup) {
      let m: RegExpExecArray = [] as unknown as RegExpExecArray;
      const on = (re: RegExp): boolean => {
        const found = re.exec(command);
        if (found) m = found;
        return found !== null;
      };
      if (on(/^npm run admin -- token create (.*)$/)) {
        step('token');
        const r = await must(command);
        operatorToken = /^token \(shown once[^:]*\): (spk_api_\S+)$/m.exec(r.stdout)?.[1] ?? '';
        expect(operatorToken, 'the first token is printed').not.toBe('');
        expect(m[1]).toMatch(/--scopes \S*operate/);
      } else if (on(/^export SPARK_TOKEN=(\S+)$/)) {
        step('export');
        // the documented placeholder is the printed token's shape
        expect(m[1]).toBe('spk_api_…');
        cliEnv.SPARK_TOKEN = operatorToken;
      } else if (on(/^npx sparkctl host adopt (\S+)$/)) {
        step('adopt');
        expect(hostIds).toContain(m[1]);
        await must(command);
      } else if (on(/^npm run agent-token -- create (\S+)$/)) {
        step('agent-token');
        docSays(README, "save it as the agent's token file", 'where the agent token goes');
        docSays(README, 'Repeat for each host.', 'to give every host its agent token');
        // the documented host first, then every other host ("Repeat for each host")
        for (const hostId of [m[1]!, ...hostIds.filter((h) => h !== m[1])]) {
          const r = await must(`npm run agent-token -- create ${hostId}`);
          const token = r.stdout.trim();
          expect(token).toMatch(/^\S+$/);
          agentTokensMade.add(hostId);
          await startAgent(hostId, token);
        }
        // "the host is scheduled once it heartbeats (`npx sparkctl fleet`)"
        docSays(
          README,
          'the host is scheduled once it heartbeats (`npx sparkctl fleet`)',
          'how to see the hosts heartbeat',
        );
        await waitFor(
          'every host to heartbeat in `npx sparkctl fleet`',
          async () =>
            (await run('npx sparkctl fleet')).stdout.includes(
              'fleet managed: every host adopted and heartbeating',
            ),
          40_000,
          200,
        );
      } else if (on(/^npm run admin -- create-app (.*)$/)) {
        step('create-app');
        docSays(
          GITHUB_APP_DOC,
          'The public URL must be https (plain http only on loopback, for trying it out)',
          'that a loopback public URL is allowed',
        );
        docSays(
          GITHUB_APP_DOC,
          '`--github-url` / `--api-url` (GitHub Enterprise Server',
          'how create-app reaches a GitHub Enterprise Server',
        );
        expect(command).toContain(DOC_PUBLIC_URL);
        app = await createApp(command.replace(DOC_PUBLIC_URL, controllerUrl));
        await afterCreateApp();
      } else if (on(/^npx sparkctl deckard drill$/)) {
        step('drill');
        const r = await must(command);
        expect(r.stdout).toMatch(/restor/i);
      } else if (on(/^npx sparkctl doctor github (\S+)$/)) {
        step('doctor');
        expect(m[1]).toBe(REPO);
        await must(command);
      } else if (on(/^npx sparkctl repo enable (\S+)$/)) {
        step('enable');
        expect(m[1]).toBe(REPO);
        const r = await must(command);
        expect(r.stdout).toMatch(new RegExp(`^enabled ${REPO}`));
        // the App may not create labels (Issues: read): a maintainer creates what enable printed
        docSays(GITHUB_APP_DOC, 'for a maintainer to create by hand', 'who creates the labels');
        labelsToCreate = [
          ...(/create by hand \(the App may not\): (.*)$/m.exec(r.stdout)?.[1] ?? '').matchAll(
            /(\S+) #[0-9a-f]{6}/g,
          ),
        ].map((x) => x[1]!);
        expect(labelsToCreate.sort()).toEqual(
          Object.values(config.github.labels as Record<string, string>).sort(),
        );
        for (const l of labelsToCreate) repo.labels.add(l);
      } else {
        throw new Error(`a documented step the walkthrough does not know: ${command}`);
      }
    }
    // every step the flow needs was in the docs
    expect([...used].sort()).toEqual(
      ['adopt', 'agent-token', 'create-app', 'doctor', 'drill', 'enable', 'export', 'token'].sort(),
    );
    expect([...agentTokensMade].sort()).toEqual([...hostIds].sort());

    // ------------------------------------------------------------ a labelled PR
    const people = section(GITHUB_APP_DOC, /^## What people see on a PR/);
    const label = /^\| `(\S+)` label \/ `\/spark test`\s+\| smoke suite, single host/m.exec(people)?.[1];
    expect(label, 'the docs name the label that runs the smoke test').toBe(config.github.labels.test);
    sim!.openPr(1, { sha: PR_SHA });
    const queued = await sim!.label(1, label!);
    const rid = /^queued (r-\d+)$/.exec(queued.result ?? '')?.[1];
    expect(rid, `the labelled PR queued work: ${queued.status} ${queued.result}`).toBeDefined();
    const passed = await sim!.waitCheck(rid!, 'Spark test passed — evidence receipt recorded', 60_000);
    expect(passed).toMatchObject({
      status: 'completed',
      conclusion: 'success',
      head_sha: PR_SHA,
      repo: REPO,
    });
    // the job ran the exact commit, dispatched with the declared inputs of the installed workflow
    const job = await sim!.waitJob(rid!);
    expect(job).toMatchObject({ headSha: PR_SHA, repo: REPO });
    expect(gh.dispatches.find((d) => d.inputs.reservation_id === rid)?.inputs.head_sha).toBe(PR_SHA);
    // everything went through the App created by the manifest flow, within its permissions
    expect(gh.requests.filter((r) => r.auth !== 'none' && r.status === 401)).toEqual([]);
    expect(gh.forbidden).toEqual([]);
    expect(gh.violations).toEqual([]);

    // ------------------------------------------------------------ helpers of the steps above

    /** `create-app` as a child process, the browser played by fetch through GitHub's forms. */
    async function createApp(command: string): Promise<{ id: number; installUrl: string }> {
      const argv = [...nodeArgv(command), '--github-url', web!.url];
      const p = track(
        spawn(process.execPath, argv, { cwd: checkout, env: sparkEnv, stdio: ['ignore', 'pipe', 'pipe'] }),
        join(root!.dir, 'create-app.log'),
      );
      commands.push(p.proc);
      const page = await waitFor(
        'create-app to print its setup page',
        () => {
          if (p.proc.exitCode != null) throw new Error(`create-app exited ${p.proc.exitCode}: ${p.output()}`);
          return /^Open (http:\/\/127\.0\.0\.1:\d+\/) /m.exec(p.output())?.[1];
        },
        30_000,
      );
      const toGitHub = firstForm(await (await fetch(page)).text(), page);
      const formPage = await fetch(toGitHub.action, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams(toGitHub.fields),
      });
      const create = firstForm(await formPage.text(), toGitHub.action);
      // "choose Create GitHub App"
      const created = await fetch(create.action, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams(create.fields),
        redirect: 'manual',
      });
      expect(created.status).toBe(302);
      expect((await fetch(created.headers.get('location')!)).status).toBe(200);
      expect(await p.exited, p.output()).toBe(0);
      transcript.push(`$ ${command} → exit 0\n${p.output()}`.trimEnd());
      const made = [...gh!.apps.values()].find((a) => a.owner.login === 'acme' && a.id !== gh!.appId)!;
      expect(made.hookUrl).toBe(`${controllerUrl}/github/webhooks`);
      // nothing secret printed
      expect(p.output()).not.toContain(made.webhookSecret!);
      const installUrl = /(https:\/\/github\.com\/apps\/\S+\/installations\/new)/.exec(p.output())?.[1];
      expect(installUrl, 'create-app prints the install link').toBeDefined();
      return { id: made.id, installUrl: installUrl! };
    }

    /** The prose between `create-app` and the drill, each step only as the docs ask for it. */
    async function afterCreateApp(): Promise<void> {
      // README's prose after create-app, in the order README gives it: a step done earlier or
      // later than the docs say (an edit after the restart that reads it) is what an operator
      // following them would do
      const prose = [
        {
          at: docSays(
            README,
            'create that group, and set its id as `github.runnerGroupId` in `spark.config.json`',
            'to create the runner group and set its id',
          ),
          run: async () => {
            docSays(
              GITHUB_APP_DOC,
              'restrict it to the enabled repositories (_Organization settings → Actions → Runner groups → Repository access: selected repositories_)',
              'to restrict the runner group',
            );
            gh!.addRunnerGroup(RUNNER_GROUP_ID, 'spark', 'selected', [REPO]);
            config.github.runnerGroupId = RUNNER_GROUP_ID;
            writeConfig();
          },
        },
        {
          at: docSays(README, /restart the controller/, 'to restart the controller after create-app'),
          run: async () => {
            await controller!.stop('SIGTERM');
            expect(await controller!.exited).toBe(0);
            controller = await startController();
          },
        },
        {
          at: docSays(
            README,
            /install the App on the approved repositories \(`?(the command|create-app)`? prints the link\)/,
            'to install the App',
          ),
          run: async () => {
            // bad input first: enable before the App is installed — refused with the fix,
            // nothing changed
            const repos = () =>
              fetch(`${controllerUrl}/api/v1/repositories`, {
                headers: { authorization: `Bearer ${operatorToken}` },
              }).then((r) => r.text());
            const before = await repos();
            const early = await run(`npx sparkctl repo enable ${REPO}`);
            expect(early.code).toBe(7);
            expect(early.stdout).toMatch(
              new RegExp(
                `^fail installation {2}the GitHub App is not installed on ${REPO} — fix: install it there`,
                'm',
              ),
            );
            expect(early.stderr).toMatch(new RegExp(`enable refused for ${REPO}, nothing was changed`));
            expect(await repos()).toBe(before);
            // the link create-app printed; the installation page is not played by the fake:
            // installing there on the selected repository makes this installation
            expect(app!.installUrl).toMatch(
              /^https:\/\/github\.com\/apps\/spark-controller-acme\/installations\/new$/,
            );
            const installation = gh!.install(app!.id);
            expect(installation).not.toBe(someoneElses);
            gh!.installationSelection.set(installation, 'selected');
            repo.installationId = installation;
            gh!.orgInstallations.set(REPO.split('/')[0]!, installation);
          },
        },
      ].sort((x, y) => x.at - y.at);
      for (const p of prose) await p.run();

      // "Install the workflow template in each consuming repository before enabling it"
      docSays(
        README,
        'Install the workflow template in each consuming repository',
        'to install the workflow',
      );
      const consuming = join(root!.dir, 'butter');
      execFileSync('git', ['init', '-q', consuming]);
      execFileSync('bash', [
        join(REPO_ROOT, 'scripts', 'ci', 'install-spark-templates.sh'),
        'butter',
        consuming,
        ACTIONS_PIN,
      ]);
      const workflow = config.github.workflow as string;
      repo.workflows[workflow] = loadWorkflow(
        readFileSync(join(consuming, '.github', 'workflows', workflow), 'utf8'),
      );
    }
  }, 180_000);
});
