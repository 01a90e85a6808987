import { type CheckResult, failed, passed, softFailed } from './check.ts';
import type { ProbeAnswer } from './python-probe.ts';

/** The torch lines of the interpreter probe's answer: imports, not a +cpu wheel, sees a GPU. */
export function torchChecks(answer: ProbeAnswer): CheckResult[] {
  const t = answer.torch;
  if (!t) return [failed('torch', 'the probe returned no torch information')];
  if ('error' in t) return [failed('torch', `import torch failed: ${t.error}`)];
  const out: CheckResult[] = [passed('torch', `torch ${t.version} imports`)];
  out.push(
    /\+cpu\b/.test(t.version)
      ? failed(
          'torch-build',
          `torch ${t.version} is a CPU-only wheel (a serving wheel may have replaced the CUDA build); reinstall torch from the CUDA wheel index`,
        )
      : passed('torch-build', `torch ${t.version} is not a +cpu wheel`),
  );
  if (t.cuda == null) {
    out.push(failed('torch-cuda', `torch ${t.version} was built without CUDA (torch.version.cuda is None)`));
  } else if (!t.cudaAvailable) {
    out.push(
      failed(
        'torch-cuda',
        `torch ${t.version} (CUDA ${t.cuda}) sees no GPU: torch.cuda.is_available() is False (driver or CUDA_VISIBLE_DEVICES?)`,
      ),
    );
  } else {
    out.push(passed('torch-cuda', `CUDA ${t.cuda} available${t.device ? ` on ${t.device}` : ''}`));
  }
  return out;
}

/** One module the probe tried to import: a failed line when fatal, a warning line when soft. */
export function importCheck(answer: ProbeAnswer, name: string, fatal: boolean): CheckResult {
  const error = answer.imports[name];
  const label = `${fatal ? 'import' : 'soft-import'}:${name}`;
  if (error == null) return passed(label, 'imports');
  return fatal
    ? failed(label, `import ${name} failed: ${error}`)
    : softFailed(label, `import ${name} failed: ${error}`);
}
