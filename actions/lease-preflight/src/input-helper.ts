import { isAbsolute, resolve } from 'node:path';
import * as core from '@actions/core';
import { z } from 'zod';

/** The host command this action delegates to (installed by the Spark agent bundle). */
export const HOST_COMMAND = 'spark-runner-preflight';

/** Validated inputs of the lease-preflight action (the only module reading inputs/env). */
export interface LeasePreflightSettings {
  reservationId: string;
  minFreeGb: string;
  imports: string[];
  softImports: string[];
  torch: 'required' | 'skip';
  tools: string[];
  manifestPath: string;
  /** Host path of the provisioning spec; null: none. */
  provisioningSpec: string | null;
  workspace: string;
  /** PATH the host command is looked up on. */
  path: string;
  /** Environment handed to the host command (the runner's: it carries the lease credentials). */
  env: NodeJS.ProcessEnv;
}

const list = (v: string) =>
  v
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);

const Inputs = z.object({
  reservationId: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'reservation_id must look like "r-12"'),
  minFreeGb: z.string().regex(/^\d+(\.\d+)?$/, 'min_free_gb must be a number of GB, e.g. "50"'),
  torch: z.enum(['required', 'skip'], { message: 'torch must be "required" or "skip"' }),
});

export function getInputs(): LeasePreflightSettings {
  const parsed = Inputs.safeParse({
    reservationId: core.getInput('reservation_id', { required: true }),
    minFreeGb: core.getInput('min_free_gb') || '50',
    // the shipped lanes (Rust CUDA workspaces) use no torch; a lane that does says so
    torch: core.getInput('torch') || 'skip',
  });
  if (!parsed.success) {
    throw new Error(`invalid input: ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  }
  const workspace = resolve(process.env.GITHUB_WORKSPACE ?? process.cwd());
  const manifest = core.getInput('manifest');
  const spec = core.getInput('provisioning_spec').trim();
  // the spec says what the environment must be: it comes from the host, never from the checkout
  if (spec && (!isAbsolute(spec) || `${resolve(spec)}/`.startsWith(`${workspace}/`))) {
    throw new Error(
      `invalid input: provisioning_spec must be an absolute path of a host file the operator owns, outside the checkout; got "${spec}"`,
    );
  }
  const tools = core.getInput('tools');
  return {
    ...parsed.data,
    imports: list(core.getInput('imports')),
    softImports: list(core.getInput('soft_imports')),
    tools: tools ? list(tools) : ['cargo', 'rustc', 'nvcc', 'c++'],
    manifestPath: resolve(workspace, manifest || 'PROVISIONING-MANIFEST.json'),
    provisioningSpec: spec || null,
    workspace,
    path: process.env.PATH ?? '',
    env: process.env,
  };
}
