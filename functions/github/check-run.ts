import { type EvidenceJudgment, judgeEvidence } from '../../core/evidence.ts';
import { isJobOutcome, NOT_RUN_CAUSES, type NotRunOutcome } from '../../core/model.ts';
import type { HostEvidence } from '../../core/protocol/host-evidence.ts';
import { parseStoredReceipts, type Receipt } from '../../core/protocol/receipt.ts';
import { sha256Hex } from '../auth/tokens.ts';
import type { ReservationRow } from '../ledger/ledger.ts';

/**
 * Renders one reservation as its GitHub check run (docs/architecture.md: "One check run per reservation
 * shows its state in words"). Pure: the outbox renders at send time from the ledger, so the
 * check always shows the latest state even when several updates were coalesced.
 * Only sanitized facts appear: host names, kind, topology, suite, SHA, reasons. Never fencing
 * tokens, job tokens, addresses, commands or logs.
 */

export interface CheckRunView {
  /**
   * The check run's name when it is not the result check's (`github.checkName`): refusals and
   * status answers carry their own, so they can never cover a Spark result on a commit.
   */
  name?: string;
  status: 'queued' | 'in_progress' | 'completed';
  conclusion?: 'success' | 'failure' | 'neutral' | 'cancelled' | 'timed_out';
  title: string;
  summary: string;
}

export interface RenderContext {
  /** Hosts holding the reservation's leases (any status). */
  hosts: string[];
  /** Backends that ran the work on its hosts (`jit-runner`, `slurm`, `dstack`), as the agents reported. */
  executors?: string[];
  /** `task`: the repository's CI runs as a dstack task, not a GitHub job (ADR 0110). */
  mode?: 'runner' | 'task';
  /** A task that had started was ended by the release (stopped through dstack), not by its own exit. */
  taskStopped?: boolean;
  /** A host kept (draining or held) for this queued reservation. */
  keptHost: { id: string; state: 'draining' | 'held' } | null;
  /** A fault seen on the job (workflow_job mismatch), shown until the work ends. */
  fault?: string | null;
  /** Present when pushed commits were not queued again (push policy). */
  note?: string | null;
  /** Queued only: the start estimate in words (core/eta.ts `describeEta`), e.g. "starts in ~12–20 min". */
  eta?: string | null;
  /**
   * The agents' evidence of the run, by host (ADR 0160): what the check's verdict comes from. A
   * receipt the job posted (`receiptJson`) only adds detail; absent evidence never passes.
   */
  hostEvidence?: Readonly<Record<string, HostEvidence>>;
}

/**
 * What a sent check run showed, kept in the reservation's meta (`lastCheck`) so the queued-check
 * refresh re-sends only a check whose rendering moved: status, title and a digest of the summary.
 * The summary counts too: a queued check's title can stay the same ("Spark 2 draining — active
 * job finishing") while its wait reason arrives or changes, and a title-only key kept the
 * "waiting for the next admission pass" of a check sent before the pass wrote the reason.
 */
export async function checkRunKey(view: CheckRunView): Promise<string> {
  // a change detector: 64 bits of the summary's SHA-256 keep the meta short
  return `${view.status}|${view.title}|${(await sha256Hex(view.summary)).slice(0, 16)}`;
}

/** `spark-2` → `Spark 2` (how people name the hosts). */
export function displayHost(id: string): string {
  const s = id.replace(/-/g, ' ');
  return s.charAt(0).toUpperCase() + s.slice(1);
}

const short = (sha: string | null) => (sha ? sha.slice(0, 7) : 'unknown');

function hostsText(hosts: string[]): string {
  return hosts.length ? hosts.map(displayHost).join(' + ') : 'Spark';
}

/**
 * One line per host whose run went over its lane's time target, from the stored receipts. A target
 * is not a limit (docs/in-job.md): the run was not stopped, and its result stands; the line says
 * how long it took. Older receipts without `overTarget` say it with `withinTarget`.
 */
function overTargetLines(receiptJson: string | null): string[] {
  const stored = parseStoredReceipts(receiptJson);
  if (!stored) return [];
  return Object.values(stored.byHost).flatMap((x) =>
    x.lane && (x.lane.overTarget ?? !x.lane.withinTarget)
      ? [
          `- Over target: lane ${x.lane.name} took ${(x.lane.elapsedMs / 60_000).toFixed(1)} min on ${displayHost(x.hostId)}, over its ${x.lane.targetMinutes}-minute target (a target, not a limit: the run was not stopped)`,
        ]
      : [],
  );
}

export function renderCheckRun(r: ReservationRow, ctx: RenderContext): CheckRunView {
  const facts = [
    `- Reservation: \`${r.id}\` (${r.kind}, priority ${r.priority})`,
    `- Topology: ${r.topology}; suite: ${r.suite ?? 'smoke'}`,
    `- Commit: \`${r.headSha ?? 'unknown'}\``,
    `- Requested by: @${r.requester.replace(/^github:/, '')}`,
  ];
  if (ctx.hosts.length) facts.push(`- Hosts: ${hostsText(ctx.hosts)}`);
  facts.push(...overTargetLines(r.receiptJson));
  if (ctx.executors?.length)
    facts.push(
      `- Backend: ${[...new Set(ctx.executors)].join(' + ')}${ctx.mode === 'task' ? ' (task: scripts/ci/spark-test.sh, no GitHub job)' : ''}`,
    );
  const extra = [ctx.fault ? `**Fault:** ${ctx.fault}` : null, ctx.note ?? null].filter(Boolean) as string[];
  const summary = (lead: string) => [lead, '', ...facts, ...(extra.length ? ['', ...extra] : [])].join('\n');

  switch (r.status) {
    case 'queued': {
      if (ctx.keptHost?.state === 'draining') {
        // title and summary both from the live plan's kept host: the row's persisted reason is the
        // last pass's, which may name another host (or still hold the creation placeholder)
        const id = ctx.keptHost.id;
        return {
          status: 'queued',
          title: `${displayHost(id)} draining — active job finishing`,
          summary: summary(
            `Waiting: ${id} draining for ${r.id}: the host finishes its current job before this one starts`,
          ),
        };
      }
      // the title is the spec's sentence, "Spark test queued — position 2"; the estimate stands on
      // its own line of the summary (docs/github-app.md "What people see on a PR")
      const estimate = ctx.eta
        ? `\n\nEstimate: ${ctx.eta}, from the finished work in the ledger and the queue ahead; work that arrives later with a higher priority moves it back.`
        : '';
      return {
        status: 'queued',
        title: `Spark test queued${r.position != null ? ` — position ${r.position}` : ''}`,
        summary: summary(`Waiting: ${r.reason ?? 'waiting for the next admission pass'}${estimate}`),
      };
    }
    case 'allocated':
      return {
        status: 'in_progress',
        title: `${hostsText(ctx.hosts)} allocated — environment preparing`,
        summary: summary(
          'Hosts granted; the relay agent is preparing them (service lent, GPU verified free).',
        ),
      };
    case 'preparing':
      if (ctx.mode === 'task')
        return {
          status: 'in_progress',
          title: `${hostsText(ctx.hosts)} prepared — task starting`,
          summary: summary(
            `Hosts prepared; a dstack task is starting that checks out exactly \`${r.headSha}\` and runs scripts/ci/spark-test.sh.`,
          ),
        };
      return {
        status: 'in_progress',
        title: `${hostsText(ctx.hosts)} prepared — runner starting`,
        summary: summary('Hosts prepared; a one-job runner is being registered and the workflow dispatched.'),
      };
    case 'running':
      // workflow_job completed sets the outcome before the agent reports the runner gone
      if (r.outcome === 'passed' || r.outcome === 'failed' || r.outcome === 'cancelled')
        return renderResult(r, ctx, summary);
      return {
        status: 'in_progress',
        title: `Spark test running — exact SHA ${short(r.headSha)}`,
        summary: summary(`Running on ${hostsText(ctx.hosts)} at exactly \`${r.headSha}\`.`),
      };
    case 'releasing':
    case 'done':
    case 'failed':
      return renderResult(r, ctx, summary);
    case 'cancelled':
      return {
        status: 'completed',
        conclusion: 'cancelled',
        title: 'Spark test cancelled — never started',
        summary: summary(`Cancelled while queued: ${r.reason ?? 'withdrawn'}`),
      };
    case 'superseded':
      return {
        status: 'completed',
        conclusion: 'neutral',
        title: `Spark test superseded — ${short(r.headSha)} is no longer the PR head`,
        summary: summary(`Superseded while queued: ${r.reason ?? 'a newer commit was pushed'}`),
      };
    default:
      return { status: 'queued', title: `Spark test ${r.status}`, summary: summary(r.reason ?? '') };
  }
}

/** The reservation's evidence, judged (core/evidence.ts): the host's, GitHub's and the job's words. */
export function judgeCheckEvidence(r: ReservationRow, ctx: RenderContext): EvidenceJudgment {
  return judgeEvidence({
    admittedSha: r.headSha,
    repo: r.repo,
    hosts: ctx.hosts,
    host: ctx.hostEvidence ?? {},
    job: parseStoredReceipts(r.receiptJson)?.byHost ?? {},
    github: ctx.mode === 'task' ? null : isJobOutcome(r.outcome) ? r.outcome : null,
    name: displayHost,
  });
}

function jobReceiptLine(hostId: string, x: Receipt, task: boolean): string {
  const toolchain = Object.keys(x.toolchain).length;
  // the repository's script never started (ADR 0177): the agent ends each reason of a task that
  // stopped before it with these words (agent/executor/ci-task.ts); a run killed mid-script also
  // has no phase, but its reason says how it ended, and it did run
  if (!x.phases.length && x.result === 'failed' && x.reason?.endsWith('; the script did not run'))
    return `- ${displayHost(hostId)}: not run — ${x.reason ?? 'the script did not start'} (log sha256 \`${x.log.sha256.slice(0, 12)}\`, ${x.log.lines} lines)${task ? '' : ' — reported by the job, not verified by the host'}`;
  return `- ${displayHost(hostId)}: ${x.result} (${x.suite}, exit ${x.exitCode ?? 'none'}, log sha256 \`${x.log.sha256.slice(0, 12)}\`, ${x.log.lines} lines${toolchain ? `, ${toolchain} toolchain entries` : ''})${task ? '' : ' — reported by the job, not verified by the host'}`;
}

/**
 * The evidence part of a finished check's summary: each host's own evidence (what the verdict
 * comes from), any contradiction, and what the jobs reported (detail only). Sanitized: check
 * names, results and short SHAs, never log lines or tokens.
 */
function evidenceText(r: ReservationRow, ctx: RenderContext, j: EvidenceJudgment): string[] {
  const out: string[] = [];
  const task = ctx.mode === 'task';
  for (const c of j.contradictions) out.push(`**Contradiction:** ${c}.`);
  const lines: string[] = [];
  for (const hostId of ctx.hosts) {
    const e = ctx.hostEvidence?.[hostId];
    if (!e) {
      lines.push(`- ${displayHost(hostId)}: no host evidence recorded`);
      continue;
    }
    const f = j.findings.find((x) => x.hostId === hostId)!;
    const pre = e.preflight
      ? `preflight ${e.preflight.ok ? 'passed' : 'FAILED'} (${e.preflight.checks.map((c) => `${c.name}${c.ok ? '' : c.fatal ? ' FAIL' : ' warn'}`).join(', ')})`
      : 'no preflight recorded';
    const ran = `${task ? 'task' : 'runner'} result ${e.runner.result ?? `none (${e.runner.detail})`}`;
    const tree = f.sha
      ? `work tree at \`${f.sha.slice(0, 7)}\`${f.sha === r.headSha ? ' (the admitted commit)' : ''}`
      : 'no commit read from the work tree';
    lines.push(`- ${displayHost(hostId)}: ${pre}; ${ran}; ${tree}`);
  }
  if (lines.length)
    out.push(
      '',
      `Host evidence (gathered by the Spark agent${ctx.hosts.length > 1 ? 's' : ''}, not by the job):`,
      ...lines,
    );
  const job = parseStoredReceipts(r.receiptJson)?.byHost ?? {};
  const reported = Object.entries(job);
  if (reported.length)
    out.push(
      '',
      task ? 'Task receipts (built by the agent from the task):' : 'Reported by the job (detail only):',
      ...reported.map(([h, x]) => jobReceiptLine(h, x, task)),
    );
  return out;
}

/** Why the evidence does not confirm a reported pass, in one title-sized phrase and sentences. */
function unconfirmed(j: EvidenceJudgment): { title: string; why: string[] } {
  if (j.contradictions.length) return { title: 'Spark test failed — evidence disagrees', why: [] };
  const bad = j.findings.filter((f) => f.result !== 'passed');
  if (bad.length)
    return {
      title: 'Spark test not verified — the host evidence does not confirm the pass',
      why: bad.map((f) => `${f.why.charAt(0).toUpperCase()}${f.why.slice(1)}.`),
    };
  return {
    title: `Spark test not verified — no host evidence from ${j.missing.map(displayHost).join(' + ')}`,
    why: [],
  };
}

function renderResult(r: ReservationRow, ctx: RenderContext, base: (lead: string) => string): CheckRunView {
  const ending = r.status === 'releasing' ? ' Hosts are being cleaned and released.' : '';
  const j = judgeCheckEvidence(r, ctx);
  const evidence = evidenceText(r, ctx, j);
  const summary = (lead: string) => [base(lead), ...evidence].join('\n');
  const recorded = j.complete ? ' Evidence receipt recorded in the ledger.' : '';
  switch (r.outcome) {
    case 'passed': {
      if (j.verdict === 'passed')
        return {
          status: 'completed',
          conclusion: 'success',
          title: 'Spark test passed — evidence receipt recorded',
          summary: summary(`The job passed at exactly \`${r.headSha}\`.${recorded}${ending}`),
        };
      // GitHub's word alone never passes the check: the hosts' evidence must confirm it
      if (j.verdict == null && (r.status === 'running' || r.status === 'releasing'))
        return {
          status: 'in_progress',
          title: `Spark test passed${ctx.mode === 'task' ? '' : ' on GitHub'} — waiting for the host evidence`,
          summary: summary(
            `${ctx.mode === 'task' ? 'The task' : 'The job'} passed; waiting for the evidence of ${j.missing.map(displayHost).join(' + ')}.${ending}`,
          ),
        };
      const u = unconfirmed(j);
      return {
        status: 'completed',
        conclusion: 'failure',
        title: u.title,
        summary: summary(
          [
            `${ctx.mode === 'task' ? 'The task' : 'GitHub'} reported a pass at \`${r.headSha}\`, but the host evidence does not confirm it.`,
            ...u.why,
          ].join(' ') + ending,
        ),
      };
    }
    case 'failed':
      return {
        status: 'completed',
        conclusion: 'failure',
        title: j.contradictions.length
          ? 'Spark test failed — evidence disagrees'
          : `Spark test failed — exact SHA ${short(r.headSha)}`,
        summary: summary(`The job failed.${recorded}${ending}`),
      };
    case 'cancelled':
      return {
        status: 'completed',
        conclusion: 'cancelled',
        title: 'Spark test cancelled — job cancelled on GitHub',
        summary: summary(`The workflow job was cancelled.${ending}`),
      };
    case 'foreign_job':
      // the check fails at once, not after cleanup: the admitted job never ran
      return {
        status: 'completed',
        conclusion: 'failure',
        title: 'Spark test failed — runner taken by a foreign job — stopped',
        summary: summary(
          `A job that is not the admitted one took the reservation's runner; the runner was stopped and the work failed. ${r.reason ?? ''}${ending}`.trim(),
        ),
      };
    case 'pair_node_lost':
      // the seed's words; final at once, even while the dark node still awaits its agent
      return {
        status: 'completed',
        conclusion: 'failure',
        title: (r.reason ?? 'a node lost contact during a pair run — pair failed as a unit')
          .replace(/^spark-(\d+)/, (m) => displayHost(m))
          .slice(0, 120),
        summary: summary(
          `${r.reason ?? 'A node lost contact during a pair run.'} The healthy node's runner was stopped and its evidence kept; the node that lost contact stays release-required until its agent returns and confirms cleanup.${ending}`,
        ),
      };
    case 'task_not_started':
    case 'runner_not_picked_up':
    case 'preflight_failed':
    case 'lease_lost':
      return notRun(r, r.outcome, summary);
    case 'queue_timeout':
      return {
        status: 'completed',
        conclusion: 'timed_out',
        title: 'Spark test timed out in the queue',
        summary: summary(r.reason ?? 'waited longer than the queue timeout'),
      };
    default: {
      if (ctx.taskStopped) {
        // the work ended before the task did: the agent stopped it through dstack
        const why = r.reason ?? r.outcome ?? 'released';
        return r.status === 'releasing'
          ? {
              status: 'in_progress',
              title: `${hostsText(ctx.hosts)} releasing — dstack task being stopped`,
              summary: summary(
                `Releasing: ${why}. The dstack task is stopped through dstack; the hosts are released once dstack reports it terminated.`,
              ),
            }
          : {
              status: 'completed',
              conclusion: r.status === 'done' ? 'cancelled' : 'failure',
              title: `Spark test stopped — ${r.outcome ?? 'released'}; dstack task terminated`,
              summary: summary(
                `Ended: ${why}. The dstack task was stopped through dstack and confirmed terminated before the hosts were released; no result for \`${r.headSha}\`.`,
              ),
            };
      }
      if (r.status === 'releasing') {
        return {
          status: 'in_progress',
          title: `${hostsText(ctx.hosts)} releasing — ${r.outcome ?? 'cleaning up'}`,
          summary: summary(`Releasing: ${r.reason ?? r.outcome ?? 'work ended'}.`),
        };
      }
      const ok = r.status === 'done';
      return {
        status: 'completed',
        conclusion: ok ? 'neutral' : 'failure',
        title: ok
          ? `Spark test ended — ${r.outcome ?? 'released'}`
          : `Spark test failed — ${r.outcome ?? 'see summary'}`,
        summary: summary(`Ended: ${r.reason ?? r.outcome ?? 'released'}`),
      };
    }
  }
}

/** The comment that queues `r`'s test again on its PR. */
function requeueCommand(r: ReservationRow): string {
  // functions/github/commands.ts: `/spark test [--pair] [--long]`
  return ['/spark test', r.topology === 'pair' ? '--pair' : null, r.suite === 'performance' ? '--long' : null]
    .filter(Boolean)
    .join(' ');
}

/**
 * Work that ended before the PR's script started because the infrastructure failed (ADR 0177): the
 * title names the cause in the spec's words, so a maintainer tells it from a test failure at a
 * glance, and the conclusion is GitHub's `cancelled` — never `success`, `neutral` or `skipped`,
 * which a required check counts as passing ("Required status checks must have a successful,
 * skipped, or neutral status", https://docs.github.com/en/repositories/configuring-branches-and-merges-in-your-repository/managing-protected-branches/about-protected-branches),
 * and not `failure`, which is a test's. Final at once, even while the hosts are still cleaned.
 * Nothing re-queues it: the summary says how.
 */
function notRun(r: ReservationRow, outcome: NotRunOutcome, summary: (lead: string) => string): CheckRunView {
  const cause = NOT_RUN_CAUSES[outcome];
  const again =
    r.pr != null
      ? `Nothing is queued again by itself: comment \`${requeueCommand(r)}\` on the PR to run it again.`
      : r.kind === 'merge'
        ? 'Nothing is queued again by itself: the next push to the branch runs merge CI again.'
        : 'Nothing is queued again by itself.';
  return {
    status: 'completed',
    conclusion: 'cancelled',
    title: `Spark test not run — ${cause}`,
    summary: summary(
      `Not run: ${r.reason ?? cause}. The PR's code did not run at \`${r.headSha ?? 'unknown'}\`, so this is not a test result. ${again}${r.status === 'releasing' ? ' The hosts are being cleaned and released.' : ''}`,
    ),
  };
}

/**
 * The name of every refusal's check run (ADR 0030). GitHub shows the latest run of a name per
 * commit, so a refusal under the result check's name ("Spark test") would let anyone who can
 * comment cover a failed Spark result; under its own name it sits beside the result instead.
 */
export const REFUSAL_CHECK_NAME = 'Spark request refused';

/** The name of the check run that answers `/spark status` when nothing is open (ADR 0030). */
export const STATUS_CHECK_NAME = 'Spark status';

/** A completed, neutral check run explaining why a request was refused (nothing was queued). */
export function renderRefusal(reason: string, who: string): CheckRunView {
  return {
    name: REFUSAL_CHECK_NAME,
    status: 'completed',
    conclusion: 'neutral',
    title: `Spark test refused — ${reason.length > 90 ? `${reason.slice(0, 87)}…` : reason}`,
    summary: [`Nothing was queued. Requested by @${who}.`, '', `Reason: ${reason}`].join('\n'),
  };
}

/**
 * GitHub's limit on a check run's `output.summary` (`maxLength: 65535` in its REST description of
 * "Create a check run" and "Update a check run"; a longer one is refused with 422).
 */
export const MAX_CHECK_RUN_SUMMARY = 65535;

const CUT = '… (cut: GitHub shows at most 65535 characters)';

/**
 * `summary` within {@link MAX_CHECK_RUN_SUMMARY} characters, as the senders send it. Text reaches a
 * summary from outside (a reason, a fault naming a runner from a webhook) without a bound at its
 * source, and a refused check run would keep showing an old state, so the end is cut and marked.
 * Characters are code points, as GitHub counts them, and a surrogate pair is never split.
 */
export function fitSummary(summary: string): string {
  if (summary.length <= MAX_CHECK_RUN_SUMMARY) return summary;
  const chars = [...summary];
  if (chars.length <= MAX_CHECK_RUN_SUMMARY) return summary;
  return chars.slice(0, MAX_CHECK_RUN_SUMMARY - [...CUT].length).join('') + CUT;
}
