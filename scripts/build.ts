/**
 * The one esbuild script: bundles every single-file deployable (agent, sparkctl, action entry points).
 * `npm run build` builds all; `npm run build -- agent` builds the named targets.
 * Output is deterministic so a test can rebuild committed bundles and diff them.
 */
import { type BuildOptions, build } from 'esbuild';

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
