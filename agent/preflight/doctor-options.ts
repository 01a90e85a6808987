import type { ProcessRunner } from './process.ts';
import type { ProvisioningSpec } from './provisioning.ts';

/** What `runDoctor` (agent/preflight/doctor.ts) checks, where it writes, and with what. */
export interface DoctorOptions {
  /** The environment child processes will see; PATH decides which `python`/`ninja`/`nvcc` resolve. */
  env: Record<string, string | undefined>;
  /** The managed model cache (SPARK_MODEL_CACHE); null fails the check. */
  modelCache: string | null;
  /**
   * How the model cache must look to whoever runs the doctor. `writable` (default): the operator,
   * who provisions and pre-warms it. `read-only`: a job (the in-job preflight) — PR code reads the
   * weights every later lease loads too, so it must not be able to change them, and a cache the
   * job can write is a finding (docs/in-job.md "Provisioning doctor").
   */
  modelCacheAccess?: ModelCacheAccess;
  /** Modules that must import (fatal), e.g. ["torch", "flash_attn"]. */
  imports?: readonly string[];
  /** Modules checked softly: a failure is a warning line, not a failed preflight. */
  softImports?: readonly string[];
  /** Whether torch must import with a CUDA (not `+cpu`) build and see a GPU. Default 'required'. */
  torch?: 'required' | 'skip';
  /** Tools that must resolve on PATH. Default ninja, nvcc, c++. */
  tools?: readonly string[];
  /** Distributions whose versions go into the manifest. */
  packages?: readonly string[];
  /** Checked-out source whose commit goes into the manifest (null: none). */
  sourceDir?: string | null;
  /** Host id for the manifest (SPARK_HOST_ID). */
  hostId?: string | null;
  /** Where to write PROVISIONING-MANIFEST.json; null writes nothing. */
  manifestPath?: string | null;
  /** Limit for the Python probe (imports can hang); tools get a tenth of it. Default 60 s. */
  timeoutMs?: number;
  /** The provisioning spec to hold the environment against; null: none. */
  spec?: ProvisioningSpec | null;
  /** Fill the HF cache with the spec's model at its pinned revision first (offline-safe when present). */
  prewarm?: boolean;
  /**
   * The manifest written at provisioning time beside the venv: the live lock is compared with it
   * (a job must run on the environment that was provisioned). Null: no comparison.
   */
  provisionedManifestPath?: string | null;
  runner?: ProcessRunner;
  now?: () => Date;
}

export type ModelCacheAccess = 'writable' | 'read-only';

export const DEFAULT_TOOLS = ['ninja', 'nvcc', 'c++'] as const;
export const DEFAULT_PACKAGES = [
  'torch',
  'numpy',
  'triton',
  'transformers',
  'vllm',
  'safetensors',
  'ninja',
] as const;
