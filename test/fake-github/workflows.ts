import { parse } from 'yaml';

/**
 * Just enough of a workflow file for the fake GitHub's dispatch: the `workflow_dispatch` inputs
 * GitHub validates a dispatch against, the `run-name` it renders into the run's display title,
 * and the jobs (with their `runs-on` labels) the run queues. Expressions are evaluated only in
 * the forms the Spark templates use (`${{ inputs.x }}`, `${{ matrix.x }}`, `inputs.x == 'v'`);
 * anything else is a TypeError, so the fake never guesses what GitHub would do.
 */

export interface WorkflowInput {
  required: boolean;
  type: string;
  options?: string[];
  default?: string;
}

export interface WorkflowDef {
  name: string;
  inputs: Record<string, WorkflowInput>;
  renderRunName(inputs: Record<string, string>): string;
  jobsFor(inputs: Record<string, string>): { name: string; labels: string[] }[];
}

type RawJob = {
  name?: string;
  if?: string;
  'runs-on': string | string[];
  strategy?: { matrix?: Record<string, unknown[]> };
};

function render(
  text: string,
  ctx: { inputs: Record<string, string>; matrix?: Record<string, unknown> },
): string {
  return text.replace(/\$\{\{\s*([^}]+?)\s*\}\}/g, (_m, expr: string) => {
    const m = /^(inputs|matrix)\.([A-Za-z_][\w-]*)$/.exec(expr);
    if (!m) throw new TypeError(`fake GitHub: unsupported expression \${{ ${expr} }}`);
    const v = m[1] === 'inputs' ? ctx.inputs[m[2]!] : ctx.matrix?.[m[2]!];
    // GitHub renders a missing value as the empty string
    return v == null ? '' : String(v);
  });
}

function condition(expr: string | undefined, inputs: Record<string, string>): boolean {
  if (expr == null) return true;
  const inner = /^\$\{\{\s*(.+?)\s*\}\}$/.exec(expr.trim())?.[1] ?? expr.trim();
  const m = /^inputs\.([A-Za-z_][\w-]*)\s*(==|!=)\s*'([^']*)'$/.exec(inner);
  if (!m) throw new TypeError(`fake GitHub: unsupported if: ${expr}`);
  // GitHub compares strings case-insensitively in expressions
  const eq = (inputs[m[1]!] ?? '').toLowerCase() === m[3]!.toLowerCase();
  return m[2] === '==' ? eq : !eq;
}

/** Reads a workflow file's dispatch inputs, run-name and jobs. */
export function loadWorkflow(text: string): WorkflowDef {
  const doc = parse(text) as {
    name?: string;
    'run-name'?: string;
    on: { workflow_dispatch?: { inputs?: Record<string, Record<string, unknown>> } };
    jobs: Record<string, RawJob>;
  };
  const inputs: Record<string, WorkflowInput> = {};
  for (const [k, v] of Object.entries(doc.on.workflow_dispatch?.inputs ?? {})) {
    inputs[k] = {
      required: v.required === true,
      type: String(v.type ?? 'string'),
      ...(Array.isArray(v.options) ? { options: v.options.map(String) } : {}),
      ...(v.default != null ? { default: String(v.default) } : {}),
    };
  }
  const name = doc.name ?? 'workflow';
  return {
    name,
    inputs,
    renderRunName: (values) => (doc['run-name'] ? render(doc['run-name'], { inputs: values }) : name),
    jobsFor(values) {
      const out: { name: string; labels: string[] }[] = [];
      for (const [key, job] of Object.entries(doc.jobs)) {
        if (!condition(job.if, values)) continue;
        const matrix = Object.entries(job.strategy?.matrix ?? {});
        if (matrix.length > 1) throw new TypeError('fake GitHub: only one-dimensional matrices');
        const combos: Record<string, unknown>[] = matrix.length
          ? (matrix[0]![1] as unknown[]).map((v) => ({ [matrix[0]![0]]: v }))
          : [{}];
        for (const m of combos) {
          const runsOn = Array.isArray(job['runs-on']) ? job['runs-on'] : [job['runs-on']];
          out.push({
            name: render(job.name ?? key, { inputs: values, matrix: m }),
            labels: runsOn.map((l) => render(String(l), { inputs: values, matrix: m })),
          });
        }
      }
      return out;
    },
  };
}
