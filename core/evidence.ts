import {
  type HostEvidence,
  isPassingResult,
  type RunnerJobResult,
  type WorkTree,
} from './protocol/host-evidence.ts';
import type { Receipt } from './protocol/receipt.ts';

/**
 * Judging a reservation's evidence (ADR 0160). The verdict comes from what each host's agent
 * observed itself — its preflight before the runner started, the runner's own job result and
 * the commit in the work tree after the job — and from GitHub's `workflow_job` conclusion. A
 * receipt the job posted may only add detail: where it, GitHub or the work tree disagree with the
 * host's evidence, the judgment names the contradiction and the verdict is `failed`. Pure.
 */

export type Verdict = 'passed' | 'failed' | 'cancelled';

export interface EvidenceFacts {
  /** The commit admitted for the reservation (null: none bound). */
  admittedSha: string | null;
  /** `owner/name`: picks the runner's checkout `<name>/<name>` among the work trees. */
  repo: string | null;
  /** Every leased host; each must report its evidence. */
  hosts: readonly string[];
  /** The agents' evidence, by host. */
  host: Readonly<Record<string, HostEvidence | undefined>>;
  /** Receipts the jobs posted (or a task's agent built), by host: detail, never the verdict. */
  job: Readonly<Record<string, Receipt | undefined>>;
  /** GitHub's `workflow_job` conclusion as recorded, when it came. */
  github: Verdict | null;
  /** How a host is named in sentences (default: its id). */
  name?: (hostId: string) => string;
}

export interface HostFinding {
  hostId: string;
  result: Verdict;
  /** One sentence: what the host's evidence says. */
  why: string;
  /** The commit found in the checkout, when one was read. */
  sha: string | null;
  runnerResult: RunnerJobResult | null;
}

export interface EvidenceJudgment {
  /** Every leased host reported its evidence. */
  complete: boolean;
  /** Hosts whose evidence has not arrived. */
  missing: string[];
  findings: HostFinding[];
  /** Where the sources disagree, one sentence each; any one fails the verdict. */
  contradictions: string[];
  /** `passed` only when complete, without contradiction and every host passed; null while open. */
  verdict: Verdict | null;
}

const short = (sha: string) => sha.slice(0, 7);

/** The checkout the evidence is about: a task's only one, or the runner's `<name>/<name>`. */
export function workTreeOf(e: HostEvidence, repo: string | null): WorkTree | null {
  if (e.mode === 'task') return e.workTrees[0] ?? null;
  const name = repo?.split('/')[1];
  if (!name) return e.workTrees.length === 1 ? e.workTrees[0]! : null;
  return e.workTrees.find((w) => w.path === `${name}/${name}`) ?? null;
}

/** What one host's own evidence says, without looking at any other source. */
export function judgeHost(
  hostId: string,
  e: HostEvidence,
  f: Pick<EvidenceFacts, 'admittedSha' | 'repo' | 'name'>,
): HostFinding {
  const who = (f.name ?? ((h: string) => h))(hostId);
  const tree = workTreeOf(e, f.repo);
  const base = { hostId, sha: tree?.sha ?? null, runnerResult: e.runner.result };
  if (!e.preflight) return { ...base, result: 'failed', why: `no host preflight was recorded on ${who}` };
  if (!e.preflight.ok) {
    const bad = e.preflight.checks.filter((c) => !c.ok && c.fatal);
    return {
      ...base,
      result: 'failed',
      why: `the host preflight failed on ${who} (${bad.map((c) => `${c.name}: ${c.detail}`).join('; ') || 'no check named'})`,
    };
  }
  const r = e.runner.result;
  const what = e.mode === 'task' ? 'task' : 'runner';
  if (r == null)
    return {
      ...base,
      result: 'failed',
      why: `the ${what} on ${who} reported no job result (${e.runner.detail})`,
    };
  if (r === 'Canceled')
    return { ...base, result: 'cancelled', why: `the ${what} on ${who} reported its job Canceled` };
  if (!isPassingResult(r))
    return { ...base, result: 'failed', why: `the ${what} on ${who} reported its job ${r}` };
  if (f.admittedSha && !tree?.sha) {
    return {
      ...base,
      result: 'failed',
      why: `no commit could be read from the work tree on ${who} after the job (${tree?.detail ?? 'no checkout of the repository found'})`,
    };
  }
  return {
    ...base,
    result: 'passed',
    why: `the ${what} on ${who} reported its job ${r}${tree?.sha ? ` at \`${short(tree.sha)}\`` : ''}`,
  };
}

/** The contradictions one host's evidence has with the admitted commit, its job's receipt and GitHub. */
export function contradictionsOf(
  hostId: string,
  e: HostEvidence,
  finding: HostFinding,
  f: Pick<EvidenceFacts, 'admittedSha' | 'job' | 'github' | 'name'>,
): string[] {
  const who = (f.name ?? ((h: string) => h))(hostId);
  const out: string[] = [];
  const ran = e.runner.result;
  // a run that failed at another commit says so itself (a task's commit binding fails exactly
  // then); a pass — the runner's word of one — at another commit is a contradiction
  if (f.admittedSha && finding.sha && finding.sha !== f.admittedSha && isPassingResult(ran)) {
    out.push(
      `the work tree on ${who} is at \`${short(finding.sha)}\` after the job, not the admitted \`${short(f.admittedSha)}\``,
    );
  }
  const receipt = f.job[hostId];
  // a receipt may add detail, never replace the host's evidence: where they disagree, say so
  if (receipt && ran != null) {
    const hostPassed = isPassingResult(ran);
    if (receipt.result === 'passed' && !hostPassed)
      out.push(
        `the job's receipt from ${who} says passed, but the ${e.mode === 'task' ? 'task' : 'runner'} reported its job ${ran}`,
      );
    else if (receipt.result === 'failed' && hostPassed)
      out.push(`the job's receipt from ${who} says failed, but the runner reported its job ${ran}`);
  }
  if (e.mode === 'runner' && f.github && ran != null) {
    if (f.github === 'passed' && !isPassingResult(ran))
      out.push(`GitHub reports the job passed, but the runner on ${who} reported ${ran}`);
    else if (f.github === 'failed' && isPassingResult(ran))
      out.push(`GitHub reports the job failed, but the runner on ${who} reported ${ran}`);
  }
  return out;
}

/** Judges every host's evidence together (see the module comment). */
export function judgeEvidence(f: EvidenceFacts): EvidenceJudgment {
  const findings: HostFinding[] = [];
  const contradictions: string[] = [];
  const missing: string[] = [];
  for (const hostId of f.hosts) {
    const e = f.host[hostId];
    if (!e) {
      missing.push(hostId);
      continue;
    }
    const finding = judgeHost(hostId, e, f);
    findings.push(finding);
    contradictions.push(...contradictionsOf(hostId, e, finding, f));
  }
  const complete = missing.length === 0 && f.hosts.length > 0;
  let verdict: Verdict | null;
  if (contradictions.length || findings.some((x) => x.result === 'failed')) verdict = 'failed';
  else if (findings.some((x) => x.result === 'cancelled')) verdict = 'cancelled';
  else verdict = complete ? 'passed' : null;
  return { complete, missing, findings, contradictions, verdict };
}
