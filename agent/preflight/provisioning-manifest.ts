import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { CheckResult } from './check.ts';
import type { CustomImport, ForcedPin } from './provisioning.ts';

/** `PROVISIONING-MANIFEST.json` beside the venv (in the venv's parent directory). */
export const besideVenv = (venv: string) =>
  join(dirname(venv.replace(/\/+$/, '')), 'PROVISIONING-MANIFEST.json');

/** When and how the doctor filled the model cache (`--prewarm`). */
export type Prewarm = { action: 'present' | 'downloaded'; at: string };

/** The provisioning section of the manifest (present when the doctor ran with a spec). */
export interface ProvisioningRecord {
  venv: string;
  /** The interpreter's sys.prefix as the probe saw it. */
  prefix: string | null;
  lock: { source: 'pip freeze' | 'importlib.metadata'; sha256: string; requirements: string[] } | null;
  pins: Record<string, { pinned: string; installed: string | null }>;
  servingBackend: { name: string; version: string | null } | null;
  forcedPins: ForcedPin[];
  model: {
    id: string;
    revision: string;
    resolvedRevision: string | null;
    trustRemoteCode: boolean;
    weightsPrewarmed: boolean;
    prewarm: Prewarm | null;
    customCode: { files: string[]; imports: CustomImport[] } | null;
  } | null;
  attention: { backend: string; capability: [number, number] | null } | null;
}

/** What PROVISIONING-MANIFEST.json holds. Versions and facts only: no paths, no env values. */
export interface ProvisioningManifest {
  schema: 'spark-provisioning-manifest/1';
  generatedAt: string;
  hostId: string | null;
  sourceCommit: string | null;
  python: {
    version: string;
    implementation: string;
    bare: boolean;
    inVenv: boolean;
    externallyManaged: boolean;
  } | null;
  torch: { version: string; cuda: string | null; cudaAvailable: boolean; device: string | null } | null;
  packages: Record<string, string | null>;
  tools: Record<string, string | null>;
  ok: boolean;
  checks: CheckResult[];
  provisioning?: ProvisioningRecord;
  /** Extra sections a caller adds (the preflight adds the verified lease). */
  [extra: string]: unknown;
}

/** Writes the manifest (pretty JSON, trailing newline). */
export function writeManifest(path: string, manifest: ProvisioningManifest): void {
  writeFileSync(path, `${JSON.stringify(manifest, null, 2)}\n`);
}
