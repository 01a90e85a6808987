import { z } from 'zod';

/**
 * One Python process answers every interpreter question at once (imports are the slow part, so
 * they run once): version, venv/PEP 668 state, torch build, declared imports, package versions.
 * Imports may print; stdout is redirected to stderr until the marker line so the JSON stays clean.
 */
export const PROBE_MARKER = '@@spark-doctor-probe@@';

export const PYTHON_PROBE = `
import json, os, sys, sysconfig, importlib
cfg = json.loads(sys.argv[1])
real_stdout = sys.stdout
sys.stdout = sys.stderr
def err(e):
    text = str(e).strip().splitlines()
    return type(e).__name__ + (": " + text[0] if text else "")
out = {
    "version": sys.version.split()[0],
    "implementation": sys.implementation.name,
    "inVenv": sys.prefix != sys.base_prefix,
}
marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
# PEP 668: installers honour the marker only outside a virtual environment
out["externallyManaged"] = (not out["inVenv"]) and os.path.isfile(marker)
if cfg["torch"]:
    try:
        import torch
        cuda_ok = bool(torch.cuda.is_available())
        out["torch"] = {
            "version": str(torch.__version__),
            "cuda": getattr(getattr(torch, "version", None), "cuda", None),
            "cudaAvailable": cuda_ok,
            "device": torch.cuda.get_device_name(0) if cuda_ok else None,
        }
    except BaseException as e:
        out["torch"] = {"error": err(e)}
imports = {}
for name in cfg["imports"]:
    try:
        importlib.import_module(name)
        imports[name] = None
    except BaseException as e:
        imports[name] = err(e)
out["imports"] = imports
versions = {}
try:
    from importlib import metadata
    for name in cfg["packages"]:
        try:
            versions[name] = metadata.version(name)
        except BaseException:
            versions[name] = None
except BaseException:
    pass
out["packages"] = versions
sys.stdout = real_stdout
print("${PROBE_MARKER}")
print(json.dumps(out))
`;

export const ProbeAnswerSchema = z.object({
  version: z.string(),
  implementation: z.string(),
  inVenv: z.boolean(),
  externallyManaged: z.boolean(),
  torch: z
    .union([
      z.object({
        version: z.string(),
        cuda: z.string().nullable(),
        cudaAvailable: z.boolean(),
        device: z.string().nullable(),
      }),
      z.object({ error: z.string() }),
    ])
    .optional(),
  imports: z.record(z.string(), z.string().nullable()),
  packages: z.record(z.string(), z.string().nullable()),
});
export type ProbeAnswer = z.infer<typeof ProbeAnswerSchema>;

/** Extracts the probe's JSON from stdout; null when the marker or the shape is missing. */
export function parseProbeOutput(stdout: string): ProbeAnswer | null {
  const at = stdout.lastIndexOf(PROBE_MARKER);
  if (at < 0) return null;
  try {
    const parsed = ProbeAnswerSchema.safeParse(JSON.parse(stdout.slice(at + PROBE_MARKER.length).trim()));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}
