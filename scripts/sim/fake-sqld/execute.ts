import type Database from 'libsql';
import {
  type Batch,
  type BatchCond,
  type BatchResult,
  isBusy,
  ProtocolError,
  requireDb,
  resolveSql,
  type Stmt,
  StmtError,
  type StmtResult,
  type Stream,
  type StreamRequest,
  type StreamResult,
  singleStmt,
  sqliteError,
  TXN_TIMEOUT_ERROR,
  valueFromSql,
  valueToSql,
} from './hrana.ts';
import { scanSql } from './sql.ts';
import type { WriteLock } from './streams.ts';

/**
 * Statement execution on a stream's connection: one statement, a batch with its conditions, and
 * the stream requests of a pipeline, queueing for the write lock when they write (server.ts
 * describes the stand-in).
 */
export function createExecutor(deps: {
  lock: WriteLock;
  trackTxns: () => void;
  closeStreamDb: (s: Stream) => void;
}) {
  const { lock, trackTxns, closeStreamDb } = deps;
  /** Runs one statement on the stream's connection, queueing for the write lock when it writes. */
  const execStmt = async (s: Stream, stmt: Stmt): Promise<StmtResult> => {
    const db = requireDb(s);
    const sql = resolveSql(s, stmt.sql, stmt.sql_id);
    const args = stmt.args ?? [];
    const named = stmt.named_args ?? [];
    if (args.length > 0 && named.length > 0) {
      throw new StmtError(
        'Specifying both positional and named arguments is not supported',
        'ARGS_BOTH_POSITIONAL_AND_NAMED',
      );
    }
    let bind: unknown[] | Record<string, unknown> = args.map(valueToSql);
    if (named.length > 0) {
      const obj: Record<string, unknown> = {};
      // libsql binds by bare name; Hrana names may carry the `:`/`@`/`$` prefix
      for (const a of named) obj[a.name.replace(/^[:@$]/, '')] = valueToSql(a.value);
      bind = obj;
    }
    const scanned = singleStmt(sql);
    const writes = scanned.kind === 'write' || scanned.kind === 'begin-write';
    if (writes) await lock.acquire(s);
    if (s.db !== db) throw new ProtocolError('The stream was closed');

    let prepared: Database.Statement;
    try {
      prepared = db.prepare(scanned.text);
    } catch (e) {
      const msg = (e as Error).message ?? '';
      settle(s);
      if (/syntax error|incomplete input|unrecognized token/i.test(msg)) {
        throw new StmtError(`SQL string could not be parsed: ${msg}`, 'SQL_PARSE_ERROR');
      }
      throw sqliteError(e);
    }
    prepared.safeIntegers(true);
    const reader = prepared.reader;
    const run = () => {
      if (reader) {
        prepared.raw(true);
        return { rows: prepared.all(bind) as unknown[][], info: null };
      }
      return { rows: [] as unknown[][], info: prepared.run(bind) };
    };
    let out: ReturnType<typeof run>;
    try {
      try {
        out = run();
      } catch (e) {
        // a statement classified as a read turned out to need the write lock: queue and retry
        // the same statement (re-running resets it)
        if (!isBusy(e) || lock.holder === s) throw e;
        await lock.acquire(s);
        if (s.db !== db) throw new ProtocolError('The stream was closed');
        out = run();
      }
    } catch (e) {
      settle(s);
      if (e instanceof ProtocolError) throw e;
      throw sqliteError(e);
    }
    let affected = 0;
    let lastRowid: string | null = null;
    if (out.info) {
      affected = out.info.changes;
      lastRowid = BigInt(out.info.lastInsertRowid).toString();
    } else if (writes) {
      // INSERT/UPDATE/DELETE … RETURNING: the counters come from the connection
      const q = db.prepare('SELECT changes(), last_insert_rowid()');
      q.safeIntegers(true);
      q.raw(true);
      const [row] = q.all() as [bigint, bigint][];
      affected = Number(row![0]);
      lastRowid = row![1].toString();
    }
    const cols = reader ? prepared.columns().map((c) => ({ name: c.name, decltype: c.type ?? null })) : [];
    settle(s);
    return {
      cols,
      rows: stmt.want_rows === false ? [] : out.rows.map((r) => r.map(valueFromSql)),
      affected_row_count: affected,
      last_insert_rowid: lastRowid,
    };
  };

  /** After every statement: a stream back in autocommit gives the write lock to the next writer. */
  const settle = (s: Stream) => {
    trackTxns();
    if (lock.holder === s && !s.db?.inTransaction) lock.release(s);
  };

  const evalCond = (
    cond: BatchCond,
    step: number,
    results: BatchResult,
    s: Stream,
    version: number,
  ): boolean => {
    switch (cond?.type) {
      case 'ok':
      case 'error': {
        if (typeof cond.step !== 'number' || cond.step >= step) {
          throw new ProtocolError('Invalid reference to step in a batch condition');
        }
        return cond.type === 'ok'
          ? results.step_results[cond.step] != null
          : results.step_errors[cond.step] != null;
      }
      case 'not':
        return !evalCond(cond.cond, step, results, s, version);
      case 'and':
        return cond.conds.every((c) => evalCond(c, step, results, s, version));
      case 'or':
        return cond.conds.some((c) => evalCond(c, step, results, s, version));
      case 'is_autocommit':
        if (version < 3) throw new ProtocolError('The `is_autocommit` condition requires Hrana 3');
        return !s.db?.inTransaction;
      default:
        throw new ProtocolError('Unknown batch condition');
    }
  };

  const execBatch = async (s: Stream, batch: Batch, version: number): Promise<BatchResult> => {
    requireDb(s);
    if (!Array.isArray(batch?.steps)) throw new ProtocolError('A batch needs steps');
    const results: BatchResult = { step_results: [], step_errors: [] };
    // a stolen transaction fails every step of the next program, like sqld's forced rollback
    const timedOut = s.forcedRollback;
    s.forcedRollback = false;
    for (let i = 0; i < batch.steps.length; i++) {
      const step = batch.steps[i]!;
      if (timedOut) {
        results.step_results.push(null);
        results.step_errors.push(TXN_TIMEOUT_ERROR().toProto());
        continue;
      }
      if (step.condition != null && !evalCond(step.condition, i, results, s, version)) {
        results.step_results.push(null);
        results.step_errors.push(null);
        continue;
      }
      try {
        results.step_results.push(await execStmt(s, step.stmt));
        results.step_errors.push(null);
      } catch (e) {
        if (!(e instanceof StmtError)) throw e;
        results.step_results.push(null);
        results.step_errors.push(e.toProto());
      }
    }
    return results;
  };

  const handleRequest = async (s: Stream, req: StreamRequest, version: number): Promise<StreamResult> => {
    const ok = (response: Record<string, unknown>): StreamResult => ({ type: 'ok', response });
    try {
      switch (req?.type) {
        case 'close':
          closeStreamDb(s);
          return ok({ type: 'close' });
        case 'execute': {
          requireDb(s);
          if (s.forcedRollback) {
            s.forcedRollback = false;
            throw TXN_TIMEOUT_ERROR();
          }
          return ok({ type: 'execute', result: await execStmt(s, req.stmt) });
        }
        case 'batch':
          return ok({ type: 'batch', result: await execBatch(s, req.batch, version) });
        case 'sequence': {
          requireDb(s);
          if (s.forcedRollback) {
            s.forcedRollback = false;
            throw TXN_TIMEOUT_ERROR();
          }
          const sql = resolveSql(s, req.sql, req.sql_id);
          for (const stmt of scanSql(sql)) await execStmt(s, { sql: stmt.text, want_rows: false });
          return ok({ type: 'sequence' });
        }
        case 'describe': {
          const db = requireDb(s);
          const stmt = singleStmt(resolveSql(s, req.sql, req.sql_id));
          let cols: { name: string; decltype: string | null }[];
          try {
            const p = db.prepare(stmt.text);
            cols = p.reader ? p.columns().map((c) => ({ name: c.name, decltype: c.type ?? null })) : [];
          } catch (e) {
            throw sqliteError(e);
          }
          return ok({
            type: 'describe',
            result: {
              params: stmt.params.map((name) => ({ name })),
              cols,
              is_explain: stmt.tokens[0] === 'EXPLAIN',
              is_readonly: stmt.kind === 'read' || stmt.kind === 'begin-read',
            },
          });
        }
        case 'store_sql': {
          requireDb(s);
          if (s.sqls.has(req.sql_id)) throw new ProtocolError(`SQL text ${req.sql_id} already exists`);
          if (s.sqls.size >= 50) {
            throw new StmtError(
              `The server already stores ${s.sqls.size} SQL texts, it cannot store more`,
              'SQL_STORE_TOO_MANY',
            );
          }
          if (Buffer.byteLength(req.sql) > 5000) {
            throw new StmtError('The statement is too large to be stored', 'SQL_STORE_TOO_LARGE');
          }
          s.sqls.set(req.sql_id, req.sql);
          return ok({ type: 'store_sql' });
        }
        case 'close_sql':
          s.sqls.delete(req.sql_id);
          return ok({ type: 'close_sql' });
        case 'get_autocommit':
          if (version < 3) throw new ProtocolError('The `get_autocommit` request requires Hrana 3');
          return ok({ type: 'get_autocommit', is_autocommit: !requireDb(s).inTransaction });
        default:
          throw new ProtocolError(
            `Unknown stream request ${JSON.stringify((req as { type?: unknown })?.type)}`,
          );
      }
    } catch (e) {
      if (e instanceof StmtError) return { type: 'error', error: e.toProto() };
      throw e;
    }
  };

  return { execBatch, handleRequest };
}
