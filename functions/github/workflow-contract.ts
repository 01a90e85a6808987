import { parse } from 'yaml';
import { SUITES, TOPOLOGIES } from '../../core/model.ts';
import { GitHubError } from './client.ts';
import type { GitHubService } from './service.ts';

/**
 * The workflow contract between the controller and a repository's dispatched workflow
 * (docs/github-app.md "The workflow contract", docs/adr/0131-workflow-contract-and-run-identity.md).
 * The controller reads the workflow file from the default branch and sends only the inputs it
 * declares, because GitHub refuses a dispatch with an undeclared input (422 "Unexpected inputs
 * provided"; REST "Create a workflow dispatch event"). It fills the spec's four inputs and, where
 * the workflow declares it, the runner-label nonce.
 */

/** The inputs of the spec's workflow contract; each must be declared. */
export const SPEC_INPUTS = ['reservation_id', 'head_sha', 'topology', 'suite'] as const;
/** The optional input that carries the per-reservation runner-label nonce (ADR 0040). */
export const NONCE_INPUT = 'nonce';
/** Values the controller may send for the choice inputs (it never sends others). */
const CHOICES: Record<string, readonly string[]> = {
  topology: TOPOLOGIES,
  suite: SUITES,
};
/** Input types a string value of ours satisfies (GitHub: string, choice, environment; not boolean/number). */
const STRING_TYPES = new Set(['string', 'choice']);

export interface DeclaredInput {
  required: boolean;
  type: string;
  options?: string[];
  hasDefault: boolean;
}

/** What the controller can do with one workflow file; `ok: false` refuses the dispatch. */
export interface WorkflowContract {
  ok: boolean;
  /** The workflow file (its name under `.github/workflows/`). */
  workflow: string;
  /** The `workflow_dispatch` inputs the file declares. */
  inputs: Record<string, DeclaredInput>;
  /** The inputs the controller fills and sends (only declared ones). */
  sends: string[];
  /** Whether the workflow takes the nonce, so the runner keeps the unguessable reservation label. */
  nonce: boolean;
  /** Why the dispatch is refused, each naming the fix (empty when `ok`). */
  problems: string[];
  /** Protections lost without refusing (e.g. no nonce input). */
  warnings: string[];
}

/** The warning when a workflow declares no nonce input (also what `doctor` shows). */
export const NONCE_LOST =
  'the workflow declares no `nonce` input: its runners carry only the allocation labels, so the unguessable per-reservation runner label protection is lost (any workflow of the repository that asks for those labels can race the admitted job for the runner); the foreign-job stop still applies: a job of another run on a Spark runner is stopped and fails the reservation visibly';

function inputsOf(doc: unknown): Record<string, Record<string, unknown>> | null {
  const on = (doc as { on?: unknown } | null)?.on;
  if (on === 'workflow_dispatch') return {};
  if (Array.isArray(on)) return on.includes('workflow_dispatch') ? {} : null;
  if (on && typeof on === 'object' && 'workflow_dispatch' in on) {
    const wd = (on as { workflow_dispatch?: { inputs?: unknown } | null }).workflow_dispatch;
    const inputs = wd?.inputs;
    return inputs && typeof inputs === 'object' ? (inputs as Record<string, Record<string, unknown>>) : {};
  }
  return null;
}

/**
 * Checks a workflow file's text against the contract: the spec's four inputs declared with types
 * and options the controller's values fit, no required input the controller cannot fill, and
 * whether the nonce is declared. Pure; the later `enable`/`doctor` gate calls it too.
 */
export function inspectWorkflowContract(text: string, workflow: string): WorkflowContract {
  const out: WorkflowContract = {
    ok: false,
    workflow,
    inputs: {},
    sends: [],
    nonce: false,
    problems: [],
    warnings: [],
  };
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (e) {
    out.problems.push(
      `.github/workflows/${workflow} is not valid YAML (${(e as Error).message.split('\n')[0]})`,
    );
    return out;
  }
  const raw = inputsOf(doc);
  if (!raw) {
    out.problems.push(
      `.github/workflows/${workflow} has no \`on: workflow_dispatch\` trigger; the controller dispatches it`,
    );
    return out;
  }
  for (const [name, v] of Object.entries(raw)) {
    const d = v ?? {};
    out.inputs[name] = {
      required: d.required === true,
      type: typeof d.type === 'string' ? d.type : 'string',
      ...(Array.isArray(d.options) ? { options: d.options.map(String) } : {}),
      hasDefault: d.default != null,
    };
  }
  const fillable = new Set<string>([...SPEC_INPUTS, NONCE_INPUT]);
  for (const name of SPEC_INPUTS) {
    const d = out.inputs[name];
    if (!d) {
      out.problems.push(
        `input \`${name}\` is not declared: the Spark workflow contract needs ${SPEC_INPUTS.join(', ')} (docs/github-app.md)`,
      );
      continue;
    }
    if (!STRING_TYPES.has(d.type))
      out.problems.push(
        `input \`${name}\` has type ${d.type}: make it a string${CHOICES[name] ? ' or a choice' : ''}`,
      );
    const missing = d.options && CHOICES[name] ? CHOICES[name].filter((c) => !d.options!.includes(c)) : [];
    if (missing.length)
      out.problems.push(
        `input \`${name}\` does not offer ${missing.map((m) => `'${m}'`).join(', ')}, which the controller sends: add ${missing.length === 1 ? 'it' : 'them'} to its options`,
      );
    else if (d.type === 'choice' && !d.options)
      out.problems.push(
        `input \`${name}\` is a choice without options: list ${(CHOICES[name] ?? []).join(', ')}`,
      );
  }
  const nonce = out.inputs[NONCE_INPUT];
  if (nonce && !STRING_TYPES.has(nonce.type))
    out.problems.push(`input \`${NONCE_INPUT}\` has type ${nonce.type}: make it a string`);
  for (const [name, d] of Object.entries(out.inputs)) {
    if (!fillable.has(name) && d.required && !d.hasDefault)
      out.problems.push(
        `input \`${name}\` is required and the controller cannot fill it: give it a default or make it optional`,
      );
  }
  out.nonce = nonce != null;
  if (!out.nonce) out.warnings.push(NONCE_LOST);
  out.sends = Object.keys(out.inputs).filter((n) => fillable.has(n));
  out.ok = out.problems.length === 0;
  return out;
}

/** The values the controller sends for a reservation, restricted to what `contract` declares. */
export function dispatchInputs(
  contract: WorkflowContract,
  values: { reservationId: string; headSha: string; topology: string; suite: string; nonce: string },
): Record<string, string> {
  const all: Record<string, string> = {
    reservation_id: values.reservationId,
    head_sha: values.headSha,
    topology: values.topology,
    suite: values.suite,
    [NONCE_INPUT]: values.nonce,
  };
  return Object.fromEntries(contract.sends.map((n) => [n, all[n]!]));
}

function decodeBase64(b64: string): string {
  const bin = atob(b64.replace(/\s+/g, ''));
  return new TextDecoder().decode(Uint8Array.from(bin, (ch) => ch.charCodeAt(0)));
}

/**
 * Reads `.github/workflows/<workflow>` on `ref` (the default branch: a dispatched run uses the
 * workflow file of the ref it runs on) with `contents: read` (REST "Get repository content",
 * base64 `content`) and inspects it. A file GitHub does not have is a contract problem; any other
 * failure is GitHub's (retried by the caller where GitHub says so).
 */
export async function readWorkflowContract(
  svc: Pick<GitHubService, 'client'>,
  repo: string,
  workflow: string,
  ref: string,
  installationId: number | null,
): Promise<WorkflowContract> {
  const path = `.github/workflows/${workflow}`;
  let res: { data: { type?: string; encoding?: string; content?: string } | unknown[] };
  try {
    res = await svc.client.request(
      'GET',
      `/repos/${repo}/contents/${path.split('/').map(encodeURIComponent).join('/')}?ref=${encodeURIComponent(ref)}`,
      { installationId },
    );
  } catch (e) {
    if (e instanceof GitHubError && e.status === 404) {
      const c = inspectWorkflowContract('', workflow);
      c.problems = [
        `${path} is not on ${repo}'s ${ref} branch: add the Spark workflow there (workflows-templates/)`,
      ];
      c.warnings = [];
      return c;
    }
    throw e;
  }
  const file = res.data as { type?: string; encoding?: string; content?: string };
  if (Array.isArray(res.data) || file.type !== 'file' || file.encoding !== 'base64' || file.content == null)
    throw new GitHubError(0, `GitHub did not answer ${path} on ${repo} as a base64 file`, false);
  return inspectedOnce(file.content, workflow);
}

/** Workflow files already inspected, by name and content (the most recent {@link INSPECTED_KEPT}). */
const inspected = new Map<string, WorkflowContract>();
const INSPECTED_KEPT = 32;

/**
 * {@link inspectWorkflowContract} of a file's base64 content, parsed once per distinct content:
 * every dispatch reads the file (docs/adr/0131), and parsing its YAML was 3–13 ms of CPU on the
 * handover's path (docs/adr/0275-handover-bench-finishes.md). The result depends on the text and
 * name alone, so a changed file is a new key; each caller gets its own copy.
 */
function inspectedOnce(content: string, workflow: string): WorkflowContract {
  const key = `${workflow}\n${content}`;
  let c = inspected.get(key);
  if (!c) {
    c = inspectWorkflowContract(decodeBase64(content), workflow);
    if (inspected.size >= INSPECTED_KEPT) inspected.delete(inspected.keys().next().value!);
    inspected.set(key, c);
  }
  return structuredClone(c);
}
