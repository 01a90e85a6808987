/**
 * The one esbuild script: bundles every single-file deployable (agent, sparkctl, action entry points).
 * `npm run build` builds all; `npm run build -- agent` builds the named targets.
 * Output is deterministic so a test can rebuild committed bundles and diff them.
 */
import { existsSync, readFileSync, symlinkSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type BuildOptions, build, type Plugin } from 'esbuild';

export interface Target {
  name: string;
  entry: string;
  outfile: string;
  /** Extra esbuild options (e.g. banner for a shebang). */
  options?: BuildOptions;
}

/** Every bundle. Each part registers its targets here with one entry. */
export const targets: Target[] = [
  {
    name: 'sparkctl',
    entry: 'cli/bundle-entry.ts',
    outfile: 'cli/dist/sparkctl.mjs',
    options: {
      banner: {
        js: "#!/usr/bin/env node\nimport { createRequire as __spark_createRequire } from 'node:module'; const require = __spark_createRequire(import.meta.url);",
      },
    },
  },
  {
    name: 'agent',
    entry: 'agent/main.ts',
    outfile: 'agent/dist/spark-agent.mjs',
    options: {
      banner: {
        js: "#!/usr/bin/env node\nimport { createRequire as __spark_createRequire } from 'node:module'; const require = __spark_createRequire(import.meta.url);",
      },
    },
  },
  {
    name: 'preflight',
    entry: 'agent/preflight/bin.ts',
    outfile: 'agent/dist/spark-runner-preflight.mjs',
    options: {
      banner: {
        js: "#!/usr/bin/env node\nimport { createRequire as __spark_createRequire } from 'node:module'; const require = __spark_createRequire(import.meta.url);",
      },
    },
  },
  {
    name: 'action-commit-binding',
    entry: 'actions/commit-binding/src/index.ts',
    outfile: 'actions/commit-binding/dist/index.mjs',
  },
  {
    name: 'action-lease-preflight',
    entry: 'actions/lease-preflight/src/index.ts',
    outfile: 'actions/lease-preflight/dist/index.mjs',
  },
  {
    name: 'action-spark-test',
    entry: 'actions/spark-test/src/index.ts',
    outfile: 'actions/spark-test/dist/index.mjs',
  },
];

/** The target called `name`, or a clear error naming the known ones. */
export function targetNamed(name: string): Target {
  const t = targets.find((x) => x.name === name);
  if (!t)
    throw new Error(
      `scripts/build.ts has no "${name}" target; known: ${targets.map((x) => x.name).join(', ')}`,
    );
  return t;
}

export async function buildTarget(t: Target, outfile = t.outfile): Promise<void> {
  await build({
    entryPoints: [t.entry],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    legalComments: 'none',
    logLevel: 'warning',
    // a checkout whose node_modules is a link (a git worktree sharing one install) must build the same
    // bytes as a plain checkout: the bundle's path comments name node_modules/, not the link's target
    preserveSymlinks: true,
    // createRequire lets bundled CommonJS dependencies require Node built-ins from ESM
    banner: {
      js: "import { createRequire as __spark_createRequire } from 'node:module'; const require = __spark_createRequire(import.meta.url);",
    },
    ...t.options,
  });
}

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * `import.meta.url`, `.dirname` and `.filename` of each bundled module of this checkout become that
 * module's own source location, so code that finds files beside itself (functions/ledger/migrations-fs.ts
 * reads `migrations/`, functions/node-server.ts's `repoRoot`) finds the same files from the bundle
 * (docs/adr/0255-controller-bundle-for-tests.md).
 */
export const sourceImportMeta: Plugin = {
  name: 'source-import-meta',
  setup(b) {
    b.onLoad({ filter: /\.[cm]?ts$/ }, (args) => {
      if (args.path.includes('/node_modules/')) return undefined;
      const text = readFileSync(args.path, 'utf8');
      if (!text.includes('import.meta.') && !text.startsWith('#!')) return undefined;
      // the entry's `#!/usr/bin/env -S npx tsx` line is the source's, not the bundle's
      const contents = text
        .replace(/^#!.*\n/, '')
        .replaceAll('import.meta.url', JSON.stringify(pathToFileURL(args.path).href))
        .replaceAll('import.meta.dirname', JSON.stringify(dirname(args.path)))
        .replaceAll('import.meta.filename', JSON.stringify(args.path));
      return { contents, loader: 'ts' };
    });
  },
};

/**
 * The controller (`functions/node.ts`, what `npm start` runs with tsx) as one file for the tests'
 * processes: not a deployable (the controller ships as source), built once per test run by the
 * vitest global setup test/setup/controller-bundle.ts. Dependencies stay imports of this checkout's
 * node_modules (a `node_modules` link beside `outfile` when it is elsewhere), the same packages the
 * source loads, native libSQL binding included (docs/adr/0255-controller-bundle-for-tests.md).
 */
export async function buildControllerNode(outfile: string): Promise<void> {
  await buildTarget(
    {
      name: 'controller-node',
      entry: 'functions/node.ts',
      outfile,
      options: { packages: 'external', plugins: [sourceImportMeta], absWorkingDir: REPO_ROOT },
    },
    outfile,
  );
  const modules = join(dirname(outfile), 'node_modules');
  const inCheckout = resolve(outfile).startsWith(`${REPO_ROOT}${sep}`);
  if (!inCheckout && !existsSync(modules)) symlinkSync(join(REPO_ROOT, 'node_modules'), modules, 'dir');
}

async function main() {
  const wanted = process.argv.slice(2);
  const chosen = wanted.length ? targets.filter((t) => wanted.includes(t.name)) : targets;
  const unknown = wanted.filter((w) => !targets.some((t) => t.name === w));
  if (unknown.length) {
    console.error(
      `unknown build target(s): ${unknown.join(', ')}; known: ${targets.map((t) => t.name).join(', ')}`,
    );
    process.exit(2);
  }
  for (const t of chosen) {
    await buildTarget(t);
    console.log(`built ${t.name} → ${t.outfile}`);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
