import { timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Database from 'libsql';
import { createExecutor } from './execute.ts';
import {
  type Batch,
  type BatchResult,
  ProtocolError,
  StreamExpiredError,
  type StreamRequest,
  type StreamResult,
} from './hrana.ts';
import { createStreams, type FakeSqldStats, WriteLock } from './streams.ts';

export type { FakeSqldStats } from './streams.ts';

/**
 * A local stand-in for sqld / Turso speaking Hrana over HTTP (JSON encoding, versions 2 and 3)
 * exactly as `@libsql/client`'s http transport does: `POST v2/pipeline` / `v3/pipeline` with a
 * baton, `POST v3/cursor`, and the `GET v2` / `GET v3` version probes (`v3-protobuf` answers 404,
 * so a probing client settles on JSON).
 *
 * It is backed by a real libSQL database file (the `libsql` package). Every Hrana stream owns its
 * own connection, so an interactive transaction (`BEGIN IMMEDIATE` … `COMMIT` across several
 * pipeline requests that pass the baton along) is a real SQLite transaction. Behaviour copied from
 * sqld (libsql-server/src/hrana and connection_manager.rs):
 *
 * - batons are HMAC-signed `(stream id, sequence)` pairs; a baton works once, a reused or forged
 *   baton is a 400, and a stream idle for 10 s expires (rolled back, then `STREAM_EXPIRED`);
 * - writers queue FIFO for the database's single write lock instead of failing with SQLITE_BUSY;
 *   a writer waiting on a transaction that has held the lock for 5 s steals it: the holder is
 *   rolled back and its next request fails with `TRANSACTION_TIMEOUT`;
 * - statement errors are `SQLite error: …` with the base SQLite code; one statement per `execute`
 *   (`SQL_MANY_STATEMENTS`); at most 50 stored SQL texts of at most 5 kB per stream;
 * - with an auth token set, pipeline/cursor requests need `Authorization: Bearer <token>`
 *   (401 `{"error": …}` otherwise), while the version probes stay public.
 */

export interface FakeSqldOptions {
  /** Database file; created if missing. */
  path: string;
  /** When set, pipeline and cursor requests must carry `Authorization: Bearer <authToken>`. */
  authToken?: string | undefined;
  /** Idle time after which an unused stream is rolled back and closed (sqld: 10 s). */
  streamIdleMs?: number | undefined;
  /** How long a transaction may hold the write lock before a waiting writer steals it (sqld: 5 s). */
  txnTimeoutMs?: number | undefined;
  /**
   * A network round-trip time injected into every HTTP request (the scale-out path: a Worker and
   * a remote libSQL are a network apart): half before the request is handled (the request on its
   * way), half before its answer is written (the answer on its way back). A transaction spread over
   * several requests holds the write lock across those delays, as it does over a real network.
   */
  rttMs?: number | undefined;
}

export interface FakeSqld {
  /** `http://127.0.0.1:<port>`, ready for `createClient({ url })`. */
  url: string;
  port: number;
  stats: FakeSqldStats;
  /** Streams currently open (not closed, not expired). */
  openStreams(): number;
  /** Changes the injected round-trip time for requests from now on (see {@link FakeSqldOptions.rttMs}). */
  setRttMs(ms: number): void;
  /** Stops listening, drops every connection and rolls back every open stream (idempotent). */
  close(): Promise<void>;
}

export async function startFakeSqld(opts: FakeSqldOptions): Promise<FakeSqld> {
  const streamIdleMs = opts.streamIdleMs ?? 10_000;
  const txnTimeoutMs = opts.txnTimeoutMs ?? 5_000;
  const stats: FakeSqldStats = {
    requests: 0,
    pipelines: 0,
    cursors: 0,
    streamsOpened: 0,
    streamsExpired: 0,
    writeLockWaits: 0,
    txnsStolen: 0,
    unauthorized: 0,
    maxConcurrentTxns: 0,
  };

  // WAL once for the file (it is persistent), as sqld runs its databases
  const setup = new Database(opts.path);
  setup.exec('PRAGMA journal_mode = WAL');
  setup.close();

  const lock = new WriteLock(
    txnTimeoutMs,
    (holder) => {
      stats.txnsStolen++;
      holder.forcedRollback = true;
      try {
        holder.db?.exec('ROLLBACK');
      } catch {
        // already outside a transaction
      }
    },
    () => {
      stats.writeLockWaits++;
    },
  );

  const { streams, dropStream, acquireStream, releaseStream, trackTxns, closeStreamDb } = createStreams({
    path: opts.path,
    streamIdleMs,
    stats,
    lock,
  });
  const { execBatch, handleRequest } = createExecutor({ lock, trackTxns, closeStreamDb });

  // ------------------------------------------------------------------------------ HTTP layer

  const readJson = async (req: IncomingMessage): Promise<unknown> => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    try {
      return JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch (e) {
      throw new ProtocolError(`Could not deserialize JSON request body: ${(e as Error).message}`);
    }
  };

  const send = (res: ServerResponse, status: number, type: string, body: string) => {
    res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };

  const authorized = (req: IncomingMessage, res: ServerResponse): boolean => {
    if (!opts.authToken) return true;
    const header = req.headers.authorization;
    let why: string | null = null;
    if (!header) why = 'The `Authorization` HTTP header is required but was not specified';
    else if (!/^bearer /i.test(header))
      why = 'The authentication scheme in the `Authorization` HTTP header is not supported';
    else {
      const got = Buffer.from(header.slice(7).trim());
      const want = Buffer.from(opts.authToken);
      if (got.length !== want.length || !timingSafeEqual(got, want)) why = 'The JWT is invalid';
    }
    if (!why) return true;
    stats.unauthorized++;
    send(res, 401, 'application/json', JSON.stringify({ error: `Unauthorized: \`${why}\`` }));
    return false;
  };

  const pipeline = async (req: IncomingMessage, res: ServerResponse, version: number) => {
    const body = (await readJson(req)) as { baton?: string | null; requests?: StreamRequest[] } | null;
    if (!body || !Array.isArray(body.requests)) throw new ProtocolError('A pipeline needs requests');
    stats.pipelines++;
    const s = acquireStream(body.baton);
    const results: StreamResult[] = [];
    try {
      for (const r of body.requests) results.push(await handleRequest(s, r, version));
    } catch (e) {
      // sqld drops the stream (and so rolls back its connection) when a request cannot be handled
      dropStream(s);
      throw e;
    }
    const baton = releaseStream(s);
    send(res, 200, 'application/json', JSON.stringify({ baton, base_url: null, results }));
  };

  const cursor = async (req: IncomingMessage, res: ServerResponse) => {
    const body = (await readJson(req)) as { baton?: string | null; batch?: Batch } | null;
    if (!body?.batch) throw new ProtocolError('A cursor needs a batch');
    stats.cursors++;
    const s = acquireStream(body.baton);
    let result: BatchResult;
    try {
      result = await execBatch(s, body.batch, 3);
    } catch (e) {
      dropStream(s);
      throw e;
    }
    const baton = releaseStream(s);
    // newline-delimited: the cursor body first, then the entries of every executed step
    const lines: unknown[] = [{ baton, base_url: null }];
    result.step_results.forEach((r, step) => {
      const err = result.step_errors[step];
      if (err) lines.push({ type: 'step_error', step, error: err });
      else if (r) {
        lines.push({ type: 'step_begin', step, cols: r.cols });
        for (const row of r.rows) lines.push({ type: 'row', row });
        lines.push({
          type: 'step_end',
          affected_row_count: r.affected_row_count,
          last_insert_rowid: r.last_insert_rowid,
        });
      }
    });
    send(res, 200, 'text/plain', lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
  };

  let halfRtt = (opts.rttMs ?? 0) / 2;
  const travel = () => (halfRtt > 0 ? new Promise<void>((r) => setTimeout(r, halfRtt)) : Promise.resolve());
  const server = createServer((req, res) => {
    stats.requests++;
    const path = new URL(req.url ?? '/', 'http://fake-sqld').pathname.replace(/\/+$/, '') || '/';
    let answered = false;
    if (halfRtt > 0) {
      // every answer spends the second half of the round trip on its way back
      const { writeHead, end } = res;
      let answer: Promise<void> | null = null;
      res.writeHead = ((...args: Parameters<typeof writeHead>) => {
        answered = true;
        answer ??= travel();
        void answer.then(() => writeHead.apply(res, args));
        return res;
      }) as typeof res.writeHead;
      res.end = ((...args: Parameters<typeof end>) => {
        answer ??= travel();
        void answer.then(() => end.apply(res, args));
        return res;
      }) as typeof res.end;
    }
    const route = async () => {
      // the request's own half of the round trip, before the server sees it
      await travel();
      if (req.method === 'GET') {
        if (path === '/') return send(res, 200, 'text/plain', 'Hello, this is HTTP API v2 (Hrana over HTTP)');
        if (path === '/health') return send(res, 200, 'text/plain', '');
        if (path === '/version') return send(res, 200, 'text/plain', 'fake-sqld');
        // JSON only: `v3-protobuf` stays 404 so a probing client picks JSON
        if (path === '/v2' || path === '/v3') return send(res, 200, 'text/plain', '');
        return send(res, 404, 'text/plain', 'Not found');
      }
      if (req.method === 'POST') {
        const m = /^\/(v2|v3)\/(pipeline|cursor)$/.exec(path);
        if (!m || (m[1] === 'v2' && m[2] === 'cursor')) return send(res, 404, 'text/plain', 'Not found');
        if (!authorized(req, res)) return;
        const version = m[1] === 'v3' ? 3 : 2;
        return m[2] === 'pipeline' ? pipeline(req, res, version) : cursor(req, res);
      }
      return send(res, 405, 'text/plain', 'Method not allowed');
    };
    route().catch((e: unknown) => {
      if (res.headersSent || answered) return;
      if (e instanceof ProtocolError) send(res, 400, 'text/plain', e.message);
      else if (e instanceof StreamExpiredError) {
        send(res, 500, 'application/json', JSON.stringify({ message: e.message, code: 'STREAM_EXPIRED' }));
      } else send(res, 500, 'text/plain', `Internal Error: \`${String((e as Error)?.message ?? e)}\``);
    });
  });
  // no idle keep-alive timeout, as sqld's hyper server: https://docs.rs/hyper/0.14/hyper/server/conn/struct.Http.html
  server.keepAliveTimeout = 0;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  let closing: Promise<void> | undefined;

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    stats,
    openStreams: () => streams.size,
    setRttMs(ms) {
      halfRtt = ms / 2;
    },
    close() {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeAllConnections();
        await closed;
        lock.shutdown();
        for (const s of [...streams.values()]) dropStream(s);
      })();
      return closing;
    },
  };
}
