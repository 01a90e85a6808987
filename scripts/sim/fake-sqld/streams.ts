import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import Database from 'libsql';
import { ProtocolError, type Stream, StreamExpiredError } from './hrana.ts';

/**
 * A Hrana stream and the database's write lock, as sqld's connection manager keeps them
 * (libsql-server connection_manager.rs; server.ts describes the stand-in).
 */

/**
 * The database's write lock as sqld's connection manager hands it out: one stream at a time, in
 * arrival order, held from the first write until the stream is back in autocommit; stolen from a
 * holder that has kept it past the transaction timeout while someone waits.
 */
export class WriteLock {
  holder: Stream | null = null;
  private since = 0;
  private readonly queue: { stream: Stream; wake: () => void }[] = [];
  private stealTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly txnTimeoutMs: number,
    private readonly steal: (holder: Stream) => void,
    private readonly onWait: () => void,
  ) {}

  async acquire(stream: Stream): Promise<void> {
    if (this.holder === stream) return;
    if (!this.holder && this.queue.length === 0) {
      this.take(stream);
      return;
    }
    this.onWait();
    await new Promise<void>((wake) => {
      this.queue.push({ stream, wake });
      this.armSteal();
    });
  }

  release(stream: Stream): void {
    if (this.holder !== stream) return;
    this.holder = null;
    this.disarm();
    const next = this.queue.shift();
    if (next) {
      this.take(next.stream);
      next.wake();
    }
  }

  /** A closed stream leaves the queue (its waiting request wakes up and fails) and the lock. */
  forget(stream: Stream): void {
    const i = this.queue.findIndex((w) => w.stream === stream);
    if (i >= 0) this.queue.splice(i, 1)[0]!.wake();
    this.release(stream);
  }

  shutdown(): void {
    this.disarm();
  }

  private take(stream: Stream): void {
    this.holder = stream;
    this.since = Date.now();
    this.armSteal();
  }

  private armSteal(): void {
    if (this.stealTimer || !this.holder || this.queue.length === 0) return;
    const holder = this.holder;
    this.stealTimer = setTimeout(
      () => {
        this.stealTimer = null;
        if (this.holder === holder && this.queue.length > 0) {
          this.steal(holder);
          this.release(holder);
        }
      },
      Math.max(0, this.since + this.txnTimeoutMs - Date.now()),
    );
    this.stealTimer.unref();
  }

  private disarm(): void {
    if (this.stealTimer) clearTimeout(this.stealTimer);
    this.stealTimer = null;
  }
}

/** Counters that let tests prove what actually happened on the wire. */
export interface FakeSqldStats {
  /** Every HTTP request received (pipelines, cursors, version probes, refused ones): round trips. */
  requests: number;
  pipelines: number;
  cursors: number;
  streamsOpened: number;
  streamsExpired: number;
  /** Writers that had to queue for the write lock behind another stream's transaction. */
  writeLockWaits: number;
  /** Transactions rolled back because they held the write lock past `txnTimeoutMs`. */
  txnsStolen: number;
  unauthorized: number;
  /** Largest number of streams that had an open transaction at the same time. */
  maxConcurrentTxns: number;
}

/** The Hrana streams of one stand-in: batons, each stream's own connection, idle expiry. */
export function createStreams(opts: {
  path: string;
  streamIdleMs: number;
  stats: FakeSqldStats;
  lock: WriteLock;
}) {
  const { streamIdleMs, stats, lock } = opts;
  const batonKey = randomBytes(32);
  const streams = new Map<string, Stream>();
  const expired = new Map<string, number>();

  const sign = (payload: Buffer) => createHmac('sha256', batonKey).update(payload).digest();
  const encodeBaton = (s: Stream) => {
    const payload = Buffer.alloc(16);
    payload.write(s.id, 0, 'hex');
    payload.writeBigUInt64BE(s.seq, 8);
    return Buffer.concat([payload, sign(payload)]).toString('base64url');
  };

  const closeStreamDb = (s: Stream) => {
    const db = s.db;
    s.db = null;
    if (db) {
      try {
        // closing a connection rolls back its transaction; do it explicitly so the write lock
        // is provably free before the next writer is woken
        if (db.inTransaction) db.exec('ROLLBACK');
      } catch {
        // the transaction is gone either way
      }
      db.close();
    }
    lock.forget(s);
  };

  const dropStream = (s: Stream) => {
    if (s.expireTimer) clearTimeout(s.expireTimer);
    closeStreamDb(s);
    streams.delete(s.id);
  };

  const acquireStream = (baton: string | null | undefined): Stream => {
    if (baton == null) {
      const s: Stream = {
        id: randomBytes(8).toString('hex'),
        seq: randomBytes(8).readBigUInt64BE(0),
        db: new Database(opts.path),
        sqls: new Map(),
        acquired: true,
        expireTimer: null,
        forcedRollback: false,
      };
      streams.set(s.id, s);
      stats.streamsOpened++;
      return s;
    }
    if (typeof baton !== 'string') throw new ProtocolError('Invalid baton');
    const data = Buffer.from(baton, 'base64url');
    if (data.length !== 48) throw new ProtocolError('Invalid baton: wrong size');
    const payload = data.subarray(0, 16);
    if (!timingSafeEqual(sign(payload), data.subarray(16))) throw new ProtocolError('Invalid baton: bad MAC');
    const id = payload.subarray(0, 8).toString('hex');
    const seq = payload.readBigUInt64BE(8);
    if (expired.has(id)) throw new StreamExpiredError();
    const s = streams.get(id);
    if (!s) throw new ProtocolError(`Invalid baton: stream ${id} not found`);
    if (s.acquired || s.seq !== seq) throw new ProtocolError('Baton reused');
    s.acquired = true;
    // the next request must show a new baton, which serializes requests on a stream
    s.seq = BigInt.asUintN(64, s.seq + 1n);
    if (s.expireTimer) clearTimeout(s.expireTimer);
    s.expireTimer = null;
    return s;
  };

  const releaseStream = (s: Stream): string | null => {
    s.acquired = false;
    if (!s.db) {
      streams.delete(s.id);
      return null;
    }
    s.expireTimer = setTimeout(() => {
      // an abandoned stream: roll back whatever it holds and remember it for a clearer error
      s.expireTimer = null;
      stats.streamsExpired++;
      dropStream(s);
      // sqld forgets expired streams after 5 minutes; from then on the baton is just invalid
      const now = Date.now();
      for (const [id, at] of expired) if (now - at > 300_000) expired.delete(id);
      expired.set(s.id, now);
    }, streamIdleMs);
    s.expireTimer.unref();
    return encodeBaton(s);
  };

  const trackTxns = () => {
    let n = 0;
    for (const s of streams.values()) if (s.db?.inTransaction) n++;
    if (n > stats.maxConcurrentTxns) stats.maxConcurrentTxns = n;
  };

  return { streams, closeStreamDb, dropStream, acquireStream, releaseStream, trackTxns };
}
