/**
 * Statement timing for the admission and scheduler benches (`SPARK_BENCH_STATEMENTS=1`): every
 * statement the ledger sends through its client, and each commit, timed by SQL text while a
 * measured pass runs, so a bench can say which statements a pass's time goes to without editing
 * the ledger (docs/performance.md "Where the time goes, and what is left"). The client is wrapped
 * at the factory `openLedgerDb` takes (functions/ledger/db.ts `OpenOptions.createClient`); the
 * ledger's code runs as it is. The timings include the client's own JS around each statement.
 */
import type { ClientFactory } from '../../functions/ledger/raw-baseline.ts';
import { benchNumber } from '../settings.ts';

/** Whether the benches time statements (`SPARK_BENCH_STATEMENTS=1`). */
export const TIME_STATEMENTS = benchNumber('SPARK_BENCH_STATEMENTS', 0) > 0;

/** One statement text's timings over the measured passes. */
export interface StatementFigure {
  /** The statement's first 100 characters, whitespace folded (a long one's from its last FROM on). */
  sql: string;
  /** How many times it ran in measured passes. */
  count: number;
  /** Median of one run, µs. */
  p50Us: number;
  /** Time per measured pass, µs (its mean share of a pass). */
  perPassUs: number;
}

export class StatementTimes {
  /** Set while a measured pass runs; statements outside it are not counted. */
  on = false;
  /** Measured passes, for the per-pass share. */
  passes = 0;
  private readonly times = new Map<string, number[]>();

  /** Forgets what was timed so far (a warm-up's passes). */
  reset(): void {
    this.times.clear();
    this.passes = 0;
  }

  add(sql: string, ms: number): void {
    if (!this.on) return;
    const flat = sql.replace(/\s+/g, ' ').trim();
    // a read's columns say less than where it reads from: the reservation reads share theirs
    const from = flat.lastIndexOf(' FROM ');
    const key = from > 60 ? `${flat.slice(0, 40)} …${flat.slice(from, from + 90)}` : flat.slice(0, 100);
    const a = this.times.get(key);
    if (a) a.push(ms);
    else this.times.set(key, [ms]);
  }

  /** Times `p` under `sql` when it settles. */
  async time<T>(sql: string, p: () => Promise<T>): Promise<T> {
    const t0 = performance.now();
    try {
      return await p();
    } finally {
      this.add(sql, performance.now() - t0);
    }
  }

  /** `factory`'s clients, with every statement, batch and commit timed. */
  wrap(factory: ClientFactory): ClientFactory {
    return (cfg) => timedClient(factory(cfg), this);
  }

  /** The statements by their share of a pass, largest first. */
  summary(top = 12): StatementFigure[] {
    const out: StatementFigure[] = [];
    for (const [sql, a] of this.times) {
      const sorted = [...a].sort((x, y) => x - y);
      const sum = a.reduce((x, y) => x + y, 0);
      out.push({
        sql,
        count: a.length,
        p50Us: Math.round(sorted[Math.floor(sorted.length / 2)]! * 1000),
        perPassUs: Math.round((sum / Math.max(1, this.passes)) * 1000),
      });
    }
    return out.sort((a, b) => b.perPassUs - a.perPassUs).slice(0, top);
  }
}

type Client = ReturnType<ClientFactory>;
type Transaction = Awaited<ReturnType<Client['transaction']>>;
type InStatement = Parameters<Transaction['execute']>[0];
type InArgs = Parameters<Client['execute']>[1];

const sqlOf = (stmt: InStatement | string): string => (typeof stmt === 'string' ? stmt : stmt.sql);

function timedTransaction(tx: Transaction, times: StatementTimes): Transaction {
  return new Proxy(tx, {
    get(target, prop, receiver) {
      if (prop === 'execute')
        return (stmt: InStatement) => times.time(sqlOf(stmt), () => target.execute(stmt));
      if (prop === 'batch')
        return (stmts: InStatement[]) =>
          times.time(`batch of ${stmts.length}: ${stmts.map(sqlOf).join('; ')}`, () => target.batch(stmts));
      if (prop === 'commit') return () => times.time('COMMIT', () => target.commit());
      const v = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

function timedClient(client: Client, times: StatementTimes): Client {
  return new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === 'execute')
        return (stmt: InStatement | string, args?: InArgs) =>
          times.time(sqlOf(stmt), () =>
            typeof stmt === 'string' ? target.execute(stmt, args) : target.execute(stmt),
          );
      if (prop === 'transaction')
        return async (...args: unknown[]) =>
          timedTransaction(
            await times.time('BEGIN', () =>
              (target.transaction as (...a: unknown[]) => Promise<Transaction>).apply(target, args),
            ),
            times,
          );
      const v = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}
