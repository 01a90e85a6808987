import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { repoRoot } from '../../functions/node-server.ts';
import { makeTestLedger, tempDir } from '../../scripts/sim/ledger.ts';
import { type ControllerGroup, startControllerProcesses } from '../../scripts/sim/load/controllers.ts';

/**
 * The shipped Prometheus alert rules (functions/metrics/alert-rules.yml, docs/metrics.md
 * "Alerts"): Debian's `promtool` (package `prometheus`, installed by scripts/setup-test-deps.sh)
 * checks them and runs their unit tests (alert-rules.test.yml: each alert fires on its series and
 * not on its near misses), and every series and label value an expression selects must be in the
 * scrape of a real controller process (`functions/node.ts`, what `npm start` runs), so the rules
 * cannot drift from what `/metrics` exports.
 */

const RULES = join(repoRoot, 'functions', 'metrics', 'alert-rules.yml');
const RULE_TESTS = join(repoRoot, 'test', 'integration', 'alert-rules.test.yml');

function promtool(args: string[]): { status: number | null; output: string } {
  const r = spawnSync('promtool', args, { cwd: repoRoot, encoding: 'utf8' });
  if (r.error)
    throw new Error(`promtool not runnable (${r.error.message}): run bash scripts/setup-test-deps.sh`);
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

/** Each rule's `expr` in the rules file (Prometheus' rule-file format: groups of rules). */
function expressions(yaml: string): string[] {
  const doc = parse(yaml) as { groups: Array<{ rules: Array<{ alert?: string; expr: string }> }> };
  return doc.groups.flatMap((g) => g.rules.map((r) => r.expr));
}

interface Matcher {
  label: string;
  /** Label values that must each be exported (`=`, `!=`, and the alternatives of a literal `=~`). */
  values: string[];
  /** Any other regex matcher's pattern: at least one exported value must match it. */
  pattern: RegExp | null;
}

/** `name{label op "value", ...}` selectors of the controller's series in an expression. */
function selectors(expr: string): Array<{ name: string; matchers: Matcher[] }> {
  return [...expr.matchAll(/\b(spark_[a-z0-9_]+)(?:\{([^}]*)\})?/g)].map((m) => ({
    name: m[1]!,
    matchers: (m[2] ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)
      .map((s): Matcher => {
        const mm = /^([a-z_]+)\s*(=~|!=|=)\s*"([^"]*)"$/.exec(s);
        if (!mm) throw new Error(`unexpected matcher ${s} in ${expr}`);
        // a PromQL string escapes a backslash as two
        const value = mm[3]!.replace(/\\\\/g, '\\');
        if (mm[2] !== '=~') return { label: mm[1]!, values: [value], pattern: null };
        return /^[A-Za-z0-9_|-]+$/.test(value)
          ? { label: mm[1]!, values: value.split('|'), pattern: null }
          : { label: mm[1]!, values: [], pattern: new RegExp(`^(?:${value})$`) };
      }),
  }));
}

/** Sample lines of a Prometheus text scrape: series name → label sets. */
function samples(text: string): Map<string, Array<Record<string, string>>> {
  const out = new Map<string, Array<Record<string, string>>>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$/.exec(line);
    if (!m) throw new Error(`unparsable sample line: ${line}`);
    const labels = Object.fromEntries(
      [...(m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1]!, x[2]!]),
    );
    out.set(m[1]!, [...(out.get(m[1]!) ?? []), labels]);
  }
  return out;
}

describe('alert rules', () => {
  it('pass promtool check rules', () => {
    const r = promtool(['check', 'rules', RULES]);
    expect(r.status, r.output).toBe(0);
    expect(r.output).toMatch(/SUCCESS: 11 rules found/);
  });

  it('pass their unit tests (promtool test rules)', () => {
    const r = promtool(['test', 'rules', RULE_TESTS]);
    expect(r.status, r.output).toBe(0);
    expect(r.output).toMatch(/SUCCESS/);
  });

  describe('select only what a real controller exports', () => {
    let group: ControllerGroup;
    let cleanup: () => void;
    beforeAll(async () => {
      const tmp = tempDir('spark-alert-rules-');
      cleanup = tmp.cleanup;
      const ledgerUrl = `file:${join(tmp.dir, 'spark.db')}`;
      const config = { hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }] };
      (await makeTestLedger({ url: ledgerUrl, config })).close();
      group = await startControllerProcesses({ count: 1, dir: tmp.dir, ledgerUrl, config });
    }, 90_000);
    afterAll(async () => {
      await group?.stop();
      cleanup?.();
    });

    it('every series and label value the expressions name is in the scrape', async () => {
      const exprs = expressions(readFileSync(RULES, 'utf8'));
      expect(exprs).toHaveLength(11);
      const scraped = samples(await (await fetch(`${group.procs[0]!.url}/metrics`)).text());
      const used = exprs.flatMap(selectors);
      // the extractor found the selectors (a parse that found none would check nothing)
      expect([...new Set(used.map((s) => s.name))].sort()).toEqual([
        'spark_anonymous_bodies_refused_total',
        'spark_home_service_restore_failures',
        'spark_home_service_up',
        'spark_host_state',
        'spark_ledger_events_total',
        'spark_ledger_write_errors_total',
        'spark_webhook_inbox_depth',
        'spark_webhook_inbox_oldest_pending_seconds',
      ]);
      for (const { name, matchers } of used) {
        const series = scraped.get(name);
        expect(series, `${name} is not exported by /metrics`).toBeDefined();
        for (const { label, values, pattern } of matchers) {
          for (const value of values)
            expect(
              series!.some((l) => l[label] === value),
              `/metrics has no ${name}{${label}="${value}"}`,
            ).toBe(true);
          if (pattern)
            expect(
              series!.some((l) => pattern.test(l[label] ?? '')),
              `/metrics has no ${name}{${label}=~"${pattern.source}"}`,
            ).toBe(true);
        }
      }
    });
  });
});
