import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Seconds per test file, measured (see record-durations.ts); files under 0.5 s are not listed. */
const RECORDED: Readonly<Record<string, number>> = JSON.parse(
  readFileSync(join(import.meta.dirname, 'durations.json'), 'utf8'),
);

/**
 * Runs the longest test files first, so the two workers finish together instead of one running a
 * 30–50 s file alone at the end. Vitest's own order does this only from its results cache
 * (`node_modules/.vite/vitest`); without it — a fresh checkout, CI — it runs larger files first, and
 * the slowest files here are small ones (a model test, a demo driven as a child process) that
 * would then start last. The order: files that failed last time (cache), then by duration — the
 * cached one, else the recorded one — longest first. A file known to neither counts as quick: the
 * recording lists every file of 0.5 s or more (re-record when a new slow file comes in).
 */
export class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root;
    const cache = this.ctx.cache;
    const info = (f: TestSpecification) => {
      const path = relative(root, f.moduleId);
      const cached = cache.getFileTestResults(`${f.project.name}:${path}`);
      return {
        failed: cached?.failed === true,
        seconds: cached ? cached.duration / 1000 : (RECORDED[path] ?? 0),
      };
    };
    const known = new Map(files.map((f) => [f, info(f)]));
    return [...files].sort((a, b) => {
      const x = known.get(a)!;
      const y = known.get(b)!;
      if (x.failed !== y.failed) return x.failed ? -1 : 1;
      return y.seconds - x.seconds;
    });
  }
}
