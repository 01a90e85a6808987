import { resolve } from 'node:path';
import * as core from '@actions/core';
import { z } from 'zod';

/** Validated inputs of the commit-binding action (the only module reading inputs/env). */
export interface CommitBindingSettings {
  /** Admitted commit, lower-case 40 hex. */
  headSha: string;
  /** Absolute path of the checkout. */
  path: string;
}

const Inputs = z.object({
  headSha: z
    .string()
    .transform((s) => s.trim().toLowerCase())
    .pipe(
      z
        .string()
        .regex(/^[0-9a-f]{40}$/, 'head_sha must be the full 40-character commit SHA the controller admitted'),
    ),
  path: z.string().min(1),
});

export function getInputs(): CommitBindingSettings {
  const parsed = Inputs.safeParse({
    headSha: core.getInput('head_sha', { required: true }),
    path: core.getInput('path') || '.',
  });
  if (!parsed.success) {
    throw new Error(`invalid input: ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  }
  return {
    headSha: parsed.data.headSha,
    path: resolve(process.env.GITHUB_WORKSPACE ?? process.cwd(), parsed.data.path),
  };
}
