import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { type CheckResult, failed, passed, softFailed } from './check.ts';

/**
 * The provisioning spec of a runner environment: which venv, the exact pins
 * and the standing guidelines they are held against, the model at a pinned revision, and the
 * attention backend. A host file the operator owns (never one from the PR under test); the
 * doctor checks the live environment against it and records the result in
 * PROVISIONING-MANIFEST.json beside the venv.
 */

const pkgName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'expected a distribution name like "torch"');
const sha40 = z
  .string()
  .regex(/^[0-9a-f]{40}$/, 'expected the full 40-character commit sha of the model revision');
const moduleName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'expected a top-level module name');

export const ATTENTION_BACKENDS = ['flash-attn-3', 'flash-attn-2', 'flashinfer', 'sdpa'] as const;
export type AttentionBackend = (typeof ATTENTION_BACKENDS)[number];

export const ProvisioningSpecSchema = z
  .object({
    /** Absolute path of the venv the jobs run in (its bin/ comes first on the runner PATH). */
    venv: z.string().startsWith('/', 'venv must be an absolute path'),
    /** Exact versions, as `pip freeze` prints them (torch with its local CUDA tag, e.g. 2.9.0+cu130). */
    pins: z.record(pkgName, z.string().min(1)),
    /** Which distribution is the serving backend (must be pinned). */
    servingBackend: pkgName.optional(),
    /** Standing guidelines: a PEP 440 specifier per distribution, e.g. { "transformers": ">=4.57" }. */
    guidelines: z.record(pkgName, z.string().min(1)).default({}),
    /** Why a pin is forced against its guideline; a deviation without a reason fails. */
    forced: z
      .record(pkgName, z.string().min(10, 'say why the pin is forced (at least 10 characters)'))
      .default({}),
    model: z
      .object({
        id: z.string().regex(/^[\w.-]+\/[\w.-]+$/, 'model id must be "org/name"'),
        revision: sha40,
        trustRemoteCode: z.boolean().default(false),
      })
      .strict()
      .optional(),
    attentionBackend: z.enum(ATTENTION_BACKENDS).optional(),
    /** Extra serving-stack modules whose absence in custom code is a soft check. */
    stack: z.array(moduleName).default([]),
  })
  .strict()
  .superRefine((s, ctx) => {
    if (s.servingBackend && !(s.servingBackend in s.pins))
      ctx.addIssue({
        code: 'custom',
        path: ['servingBackend'],
        message: 'the serving backend must be pinned',
      });
    for (const k of Object.keys(s.forced))
      if (!(k in s.guidelines))
        ctx.addIssue({
          code: 'custom',
          path: ['forced', k],
          message: `no guideline for ${k} to force against`,
        });
  });
export type ProvisioningSpec = z.infer<typeof ProvisioningSpecSchema>;

/** Reads and validates a spec file; throws a TypeError naming the file and every problem. */
export function readProvisioningSpec(path: string): ProvisioningSpec {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new TypeError(`provisioning spec ${path}: ${(e as Error).message}`);
  }
  const r = ProvisioningSpecSchema.safeParse(raw);
  if (!r.success)
    throw new TypeError(
      `provisioning spec ${path}: ${r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ')}`,
    );
  return r.data;
}

/** PEP 503 name normalization (pip freeze prints the distribution's own spelling). */
export const normalizeName = (n: string) => n.toLowerCase().replace(/[-_.]+/g, '-');

/** `name==version` lines (pip freeze) → normalized name → version; other lines are skipped. */
export function parseFreeze(lines: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const l of lines) {
    const m = /^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$/.exec(l.trim());
    if (m) out.set(normalizeName(m[1]!), m[2]!);
  }
  return out;
}

type Parsed = {
  release: number[];
  pre: [number, number] | null;
  post: number;
  dev: number | null;
  local: string;
};

// PEP 440 public versions in their common forms: 1.2.3, 1.2rc1, 1.2.post1, 1.2.dev3, 2.9.0+cu130
function parseVersion(v: string): Parsed | null {
  const m =
    /^v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|rc|alpha|beta|c)[-_.]?(\d*))?(?:[-_.]?post[-_.]?(\d*))?(?:[-_.]?dev[-_.]?(\d*))?(?:\+([a-z0-9.]+))?$/i.exec(
      v.trim(),
    );
  if (!m) return null;
  const preKind = { a: 0, alpha: 0, b: 1, beta: 1, c: 2, rc: 2 }[(m[2] ?? '').toLowerCase()];
  return {
    release: m[1]!.split('.').map(Number),
    pre: preKind == null ? null : [preKind, Number(m[3] || 0)],
    post: m[4] != null ? Number(m[4] || 0) : -1,
    dev: m[5] != null ? Number(m[5] || 0) : null,
    local: (m[6] ?? '').toLowerCase(),
  };
}

function cmpRelease(a: number[], b: number[]): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d) return Math.sign(d);
  }
  return 0;
}

/** Orders two versions by PEP 440 rules, ignoring the local tag; null when either does not parse. */
export function compareVersions(a: string, b: string): number | null {
  const x = parseVersion(a);
  const y = parseVersion(b);
  if (!x || !y) return null;
  const r = cmpRelease(x.release, y.release);
  if (r) return r;
  // dev < pre < final < post
  const rank = (p: Parsed): [number, number, number, number] => [
    p.pre == null && p.dev != null && p.post < 0 ? -1 : p.pre == null ? 1 : 0,
    p.pre?.[0] ?? 0,
    p.pre?.[1] ?? 0,
    p.post,
  ];
  const [ra, rb] = [rank(x), rank(y)];
  for (let i = 0; i < 4; i++) if (ra[i] !== rb[i]) return Math.sign(ra[i]! - rb[i]!);
  if (x.dev === y.dev) return 0;
  // a .devN sorts before the same version without it
  if (x.dev == null) return 1;
  if (y.dev == null) return -1;
  return Math.sign(x.dev - y.dev);
}

/**
 * Whether `version` satisfies a PEP 440 specifier set (`>=2.8,<2.10`, `==2.9.*`, `~=4.57`, `!=x`).
 * Null when the specifier or version cannot be read (the caller reports that, never guesses).
 */
export function satisfies(version: string, specifier: string): boolean | null {
  const v = parseVersion(version);
  if (!v) return null;
  for (const part of specifier
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^(===|==|!=|~=|>=|<=|>|<)\s*(\S+)$/.exec(part);
    if (!m) return null;
    const [, op, want] = m as unknown as [string, string, string];
    if ((op === '==' || op === '!=') && want.endsWith('.*')) {
      const prefix = want.slice(0, -2).split('.').map(Number);
      const ok = prefix.every((n, i) => v.release[i] === n);
      if (ok !== (op === '==')) return false;
      continue;
    }
    if (op === '===') {
      if (version !== want) return false;
      continue;
    }
    // a local tag in the specifier must match exactly (==2.9.0+cu130); otherwise it is ignored
    if (op === '==' && want.includes('+')) {
      if (parseVersion(want)?.local !== v.local || compareVersions(version, want) !== 0) return false;
      continue;
    }
    const c = compareVersions(version, want);
    if (c == null) return null;
    if (op === '~=') {
      const w = parseVersion(want)!;
      if (w.release.length < 2) return null;
      const upper = [...w.release.slice(0, -2), w.release[w.release.length - 2]! + 1];
      if (c < 0 || cmpRelease(v.release, upper) >= 0) return false;
      continue;
    }
    const ok = { '==': c === 0, '!=': c !== 0, '>=': c >= 0, '<=': c <= 0, '>': c > 0, '<': c < 0 }[op];
    if (!ok) return false;
  }
  return true;
}

/** A pin held against its guideline: recorded in the manifest, never chosen silently. */
export interface ForcedPin {
  package: string;
  pin: string;
  guideline: string;
  reason: string;
}

/**
 * Pins against the live lock and the standing guidelines: `pin:<pkg>` fails when the venv does
 * not hold exactly the pinned version; `guideline:<pkg>` fails when a pin breaks its guideline
 * without a declared reason, and warns (and is listed as forced) when it has one.
 */
export function checkPins(
  spec: ProvisioningSpec,
  installed: Map<string, string>,
): { checks: CheckResult[]; forced: ForcedPin[] } {
  const checks: CheckResult[] = [];
  const forced: ForcedPin[] = [];
  for (const [pkg, pin] of Object.entries(spec.pins)) {
    const have = installed.get(normalizeName(pkg));
    checks.push(
      have == null
        ? failed(`pin:${pkg}`, `${pkg}==${pin} is pinned but not installed in ${spec.venv}`)
        : have === pin
          ? passed(`pin:${pkg}`, `${pkg}==${pin}`)
          : failed(
              `pin:${pkg}`,
              `${pkg} is pinned to ${pin} but ${spec.venv} has ${have}${/\+cpu$/.test(have) ? ' (a CPU-only wheel replaced the pinned build)' : ''}: reinstall the pinned version`,
            ),
    );
  }
  for (const [pkg, guideline] of Object.entries(spec.guidelines)) {
    const pin = spec.pins[pkg];
    if (pin == null) continue;
    const ok = satisfies(pin, guideline);
    const reason = spec.forced[pkg];
    if (ok == null) {
      checks.push(failed(`guideline:${pkg}`, `cannot compare ${pkg}==${pin} with guideline "${guideline}"`));
    } else if (ok) {
      checks.push(passed(`guideline:${pkg}`, `${pkg}==${pin} follows "${guideline}"`));
    } else if (reason) {
      forced.push({ package: pkg, pin, guideline, reason });
      checks.push(
        softFailed(
          `guideline:${pkg}`,
          `${pkg}==${pin} is forced against the guideline "${guideline}": ${reason}`,
        ),
      );
    } else {
      checks.push(
        failed(
          `guideline:${pkg}`,
          `${pkg}==${pin} breaks the standing guideline "${guideline}": follow it, or declare why under "forced" in the provisioning spec`,
        ),
      );
    }
  }
  return { checks, forced };
}

/** Where huggingface_hub keeps a model repository under HF_HOME (hub/models--org--name). */
export function hfRepoDir(hfHome: string, modelId: string): string {
  return join(hfHome, 'hub', `models--${modelId.replace('/', '--')}`);
}

/** The snapshot dir of `revision`, or null when it is not in the cache. */
export function hfSnapshot(hfHome: string, modelId: string, revision: string): string | null {
  const dir = join(hfRepoDir(hfHome, modelId), 'snapshots', revision);
  return existsSync(join(dir, 'config.json')) ? dir : null;
}

/**
 * Whether the weights of a cached snapshot are all present: every shard a safetensors index
 * names, or at least one weight file when there is no index.
 */
export function weightsPresent(snapshot: string): boolean {
  const index = join(snapshot, 'model.safetensors.index.json');
  if (existsSync(index)) {
    try {
      const map = (JSON.parse(readFileSync(index, 'utf8')) as { weight_map?: Record<string, string> })
        .weight_map;
      const shards = new Set(Object.values(map ?? {}));
      return shards.size > 0 && [...shards].every((s) => existsSync(join(snapshot, s)));
    } catch {
      return false;
    }
  }
  return readdirSync(snapshot).some(
    (f) => /\.(safetensors|bin|gguf)$/.test(f) && statSync(join(snapshot, f)).size > 0,
  );
}

/** SM ranges each attention backend runs on (major.minor as one number, e.g. 12.1). */
export const ATTENTION_SM: Record<AttentionBackend, { min: number; max: number | null; note: string }> = {
  // FlashAttention 3 targets Ampere/Hopper kernels (SM 80–90)
  'flash-attn-3': { min: 8.0, max: 9.0, note: 'FlashAttention 3 needs SM 8.0–9.0' },
  'flash-attn-2': { min: 8.0, max: 9.0, note: 'FlashAttention 2 needs SM 8.0–9.0' },
  // GB10 (DGX Spark) is SM 12.x: flashinfer is the backend that runs there
  flashinfer: { min: 7.5, max: null, note: 'flashinfer needs SM 7.5 or newer' },
  sdpa: { min: 0, max: null, note: 'torch SDPA runs on any CUDA GPU' },
};

/** A named failure when the pinned attention backend cannot run on this GPU's SM. */
export function checkAttentionBackend(
  backend: AttentionBackend,
  capability: readonly [number, number] | null,
  device: string | null,
): CheckResult {
  const name = 'attention-backend';
  if (!capability)
    return failed(
      name,
      `cannot check ${backend}: torch reported no device capability (no CUDA GPU visible?)`,
    );
  const sm = capability[0] + capability[1] / 10;
  const smText = `SM ${capability[0]}.${capability[1]}`;
  const fits = (b: AttentionBackend) =>
    sm >= ATTENTION_SM[b].min && (ATTENTION_SM[b].max == null || sm <= ATTENTION_SM[b].max!);
  if (fits(backend)) return passed(name, `${backend} runs on ${device ?? 'this GPU'} (${smText})`);
  const instead = ATTENTION_BACKENDS.filter((b) => b !== 'sdpa' && fits(b));
  return failed(
    name,
    `${ATTENTION_SM[backend].note}; ${device ?? 'this GPU'} is ${smText}: pin ${instead.length ? instead.join(' or ') : 'sdpa'} instead`,
  );
}

/** Modules of the serving stack: missing ones in custom code only warn (they are pinned and checked elsewhere). */
export const STACK_MODULES = [
  'torch',
  'transformers',
  'vllm',
  'sglang',
  'flash_attn',
  'flash_attn_interface',
  'flashinfer',
  'triton',
  'xformers',
  'numpy',
  'safetensors',
  'accelerate',
  'tokenizers',
  'huggingface_hub',
  'sentencepiece',
  'einops',
] as const;

/** One module the model's remote code imports, with the files importing it and whether it resolves. */
export interface CustomImport {
  module: string;
  files: string[];
  found: boolean;
}

/**
 * `custom-code:<module>` checks: a missing non-stack module fails naming the files that import
 * it, a missing stack module only warns.
 */
export function checkCustomImports(
  imports: readonly CustomImport[],
  stack: readonly string[],
  venv: string,
): CheckResult[] {
  const stackSet = new Set([...STACK_MODULES, ...stack]);
  return imports.map((i) => {
    const name = `custom-code:${i.module}`;
    if (i.found) return passed(name, `imported by ${i.files.join(', ')}; resolves`);
    const why = `the model's remote code (${i.files.join(', ')}) imports ${i.module}, which is not installed in ${venv}`;
    return stackSet.has(i.module)
      ? softFailed(name, `${why} (serving-stack module: checked by the pins)`)
      : failed(name, `${why}: add it to the provisioning pins before any server starts`);
  });
}
