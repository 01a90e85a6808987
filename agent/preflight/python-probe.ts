import { z } from 'zod';

/**
 * One Python process answers every interpreter question at once (imports are the slow part, so
 * they run once): version, venv/PEP 668 state, torch build and device capability, declared
 * imports, package versions, the installed-distribution lock, and the imports of a model's
 * remote code. It runs with `-I` from an empty directory (see doctor.ts).
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
    "prefix": sys.prefix,
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
        cap = getattr(torch.cuda, "get_device_capability", None)
        out["torch"]["capability"] = list(cap(0)) if cuda_ok and cap else None
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
if cfg.get("freeze"):
    # the same name==version lines pip freeze prints, without needing pip in the venv
    try:
        from importlib import metadata
        seen = {}
        for d in metadata.distributions():
            n = d.metadata["Name"]
            if n and n not in seen:
                seen[n] = d.version
        out["freeze"] = sorted((n + "==" + v for n, v in seen.items()), key=str.lower)
    except BaseException:
        out["freeze"] = None
if cfg.get("customCodeDir"):
    # every absolute import in the model repository's .py files, read with ast (never executed);
    # imports guarded as optional (try/except ImportError, if is_x_available()) are skipped, as
    # transformers' own check_imports does
    import ast, importlib.util
    root = cfg["customCodeDir"]
    files = []
    for d, _dirs, names in os.walk(root):
        for n in names:
            if n.endswith(".py"):
                files.append(os.path.relpath(os.path.join(d, n), root))
    files.sort()
    local = {os.path.splitext(os.path.basename(f))[0] for f in files}
    optional = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    def guarded_try(node):
        for h in node.handlers:
            if h.type is None:
                return True
            types = list(h.type.elts) if isinstance(h.type, ast.Tuple) else [h.type]
            if any(isinstance(t, ast.Name) and t.id in optional for t in types):
                return True
        return False
    def availability_if(node):
        for c in ast.walk(node.test):
            if isinstance(c, ast.Call):
                f = c.func
                name = f.id if isinstance(f, ast.Name) else (f.attr if isinstance(f, ast.Attribute) else "")
                if name.startswith("is_") and name.endswith("_available"):
                    return True
        return False
    found = {}
    bad = {}
    class Imports(ast.NodeVisitor):
        def __init__(self, f):
            self.f = f
        def add(self, name):
            top = name.split(".")[0]
            if top and top not in local and top != "__future__":
                found.setdefault(top, set()).add(self.f)
        def visit_Try(self, node):
            if guarded_try(node):
                for n in node.handlers + node.orelse + node.finalbody:
                    self.visit(n)
                return
            self.generic_visit(node)
        visit_TryStar = visit_Try
        def visit_If(self, node):
            if availability_if(node):
                for n in node.orelse:
                    self.visit(n)
                return
            self.generic_visit(node)
        def visit_Import(self, node):
            for a in node.names:
                self.add(a.name)
        def visit_ImportFrom(self, node):
            if node.level == 0 and node.module:
                self.add(node.module)
    for f in files:
        try:
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                Imports(f).visit(ast.parse(fh.read(), f))
        except BaseException as e:
            bad[f] = err(e)
    res = []
    for mod in sorted(found):
        try:
            ok = importlib.util.find_spec(mod) is not None
        except BaseException:
            ok = False
        res.append({"module": mod, "files": sorted(found[mod]), "found": ok})
    out["customCode"] = {"files": files, "imports": res, "errors": bad}
sys.stdout = real_stdout
print("${PROBE_MARKER}")
print(json.dumps(out))
`;

export const ProbeAnswerSchema = z.object({
  prefix: z.string(),
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
        capability: z.tuple([z.number().int(), z.number().int()]).nullable().optional(),
      }),
      z.object({ error: z.string() }),
    ])
    .optional(),
  imports: z.record(z.string(), z.string().nullable()),
  packages: z.record(z.string(), z.string().nullable()),
  freeze: z.array(z.string()).nullable().optional(),
  customCode: z
    .object({
      files: z.array(z.string()),
      imports: z.array(z.object({ module: z.string(), files: z.array(z.string()), found: z.boolean() })),
      errors: z.record(z.string(), z.string()),
    })
    .optional(),
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

/**
 * Fills the HF cache with one model repository at one revision (huggingface_hub's
 * snapshot_download into HF_HOME/hub); prints the snapshot path after the marker.
 */
export const PREWARM_SCRIPT = `
import json, sys
cfg = json.loads(sys.argv[1])
real_stdout = sys.stdout
sys.stdout = sys.stderr
from huggingface_hub import snapshot_download
path = snapshot_download(repo_id=cfg["id"], revision=cfg["revision"])
sys.stdout = real_stdout
print("${PROBE_MARKER}")
print(json.dumps({"path": path}))
`;
