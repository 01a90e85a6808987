import { parse } from 'yaml';

/**
 * Just enough of a workflow file for the fake GitHub's dispatch: the `workflow_dispatch` inputs
 * GitHub validates a dispatch against, the `run-name` it renders into the run's display title,
 * and the jobs (with their `runs-on` labels) the run queues. Expressions are evaluated in the
 * subset `evaluate` documents; anything else is a TypeError, so the fake never guesses.
 */

export interface WorkflowInput {
  required: boolean;
  type: string;
  options?: string[];
  default?: string;
}

export interface WorkflowDef {
  /** The file's text, as the contents API serves it. */
  text: string;
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

type Ctx = { inputs: Record<string, string>; matrix?: Record<string, unknown> };

/**
 * GitHub Actions expressions, in the subset the Spark templates and the spec's workflow use:
 * string/number/boolean/null literals, `inputs.x` and `matrix.x`, `fromJSON(...)`, `!`, `==`,
 * `!=`, `&&`, `||` and parentheses. `&&`/`||` yield an operand (falsy: false, 0, '', null) and
 * strings compare case-insensitively, as documented
 * (https://docs.github.com/en/actions/reference/workflows-and-actions/expressions). Anything else
 * is a TypeError, so the fake never guesses what GitHub would do.
 */
function evaluate(src: string, ctx: Ctx): unknown {
  const tokens = src.match(/'(?:[^']|'')*'|-?\d+(?:\.\d+)?|[A-Za-z_][\w.-]*|==|!=|&&|\|\||[()!,]|\S/g) ?? [];
  let i = 0;
  const peek = () => tokens[i];
  const next = () => tokens[i++];
  const fail = (what: string): never => {
    throw new TypeError(`fake GitHub: unsupported expression ${what} in \${{ ${src} }}`);
  };
  const truthy = (v: unknown) => !(v === false || v === 0 || v === '' || v == null);
  const equal = (a: unknown, b: unknown) =>
    typeof a === 'string' && typeof b === 'string' ? a.toLowerCase() === b.toLowerCase() : a === b;
  const primary = (): unknown => {
    const t = next();
    if (t === undefined) return fail('(end)');
    if (t === '(') {
      const v = or();
      if (next() !== ')') fail('(unbalanced)');
      return v;
    }
    if (t === '!') return !truthy(primary());
    if (t.startsWith("'")) return t.slice(1, -1).replace(/''/g, "'");
    if (/^-?\d/.test(t)) return Number(t);
    if (t === 'true' || t === 'false') return t === 'true';
    if (t === 'null') return null;
    if (t.toLowerCase() === 'fromjson' && peek() === '(') {
      next();
      const arg = or();
      if (next() !== ')') fail('fromJSON(…');
      return JSON.parse(String(arg));
    }
    const m = /^(inputs|matrix)\.([A-Za-z_][\w-]*)$/.exec(t);
    if (!m) return fail(t);
    const v = m[1] === 'inputs' ? ctx.inputs[m[2]!] : ctx.matrix?.[m[2]!];
    return v ?? null;
  };
  const comparison = (): unknown => {
    let v = primary();
    while (peek() === '==' || peek() === '!=') {
      const op = next();
      const w = primary();
      v = op === '==' ? equal(v, w) : !equal(v, w);
    }
    return v;
  };
  const and = (): unknown => {
    let v = comparison();
    while (peek() === '&&') {
      next();
      const w = comparison();
      v = truthy(v) ? w : v;
    }
    return v;
  };
  function or(): unknown {
    let v = and();
    while (peek() === '||') {
      next();
      const w = and();
      v = truthy(v) ? v : w;
    }
    return v;
  }
  const v = or();
  if (i !== tokens.length) fail(String(peek()));
  return v;
}

const WHOLE = /^\s*\$\{\{\s*([\s\S]+?)\s*\}\}\s*$/;

/** A value with `${{ }}` in it: a lone expression keeps its type (an array for runs-on), else text. */
function resolve(text: string, ctx: Ctx): unknown {
  const whole = WHOLE.exec(text);
  if (whole) return evaluate(whole[1]!, ctx);
  // GitHub renders a missing value as the empty string
  return text.replace(/\$\{\{\s*([\s\S]+?)\s*\}\}/g, (_m, expr: string) => {
    const v = evaluate(expr, ctx);
    return v == null ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v);
  });
}

function render(text: string, ctx: Ctx): string {
  return String(resolve(text, ctx) ?? '');
}

function condition(expr: string | undefined, inputs: Record<string, string>): boolean {
  if (expr == null) return true;
  const inner = WHOLE.exec(expr)?.[1] ?? expr.trim();
  const v = evaluate(inner, { inputs });
  return !(v === false || v === 0 || v === '' || v == null);
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
    text,
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
          const ctx = { inputs: values, matrix: m };
          // runs-on: a label, a list of labels, or one expression that yields either (the spec's
          // `fromJSON('[…]')` form)
          const raw = job['runs-on'];
          const resolved = Array.isArray(raw)
            ? raw.map((l) => render(String(l), ctx))
            : resolve(String(raw), ctx);
          const labels = Array.isArray(resolved) ? resolved.map(String) : [String(resolved)];
          out.push({ name: render(job.name ?? key, ctx), labels });
        }
      }
      return out;
    },
  };
}
