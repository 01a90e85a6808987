import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';

/**
 * A burst of unauthenticated partial bodies against a real controller process, measured from
 * outside: `count` raw TCP connections each send a webhook request head with a well-formed (but
 * wrong) signature and a Content-Length just under the 2 MiB webhook limit, then `bodyBytes` of
 * the body, and keep the connection open without sending the rest — what an attacker does to
 * make the controller hold every body at once. Meanwhile `/healthz` is asked in a loop on fresh
 * connections. The controller's resident memory (VmRSS from /proc) is sampled before, during and
 * after the burst; after every connection was closed the burst waits `settleMs` and reports where
 * RSS settled. Used by `test/e2e/anonymous-bodies.test.ts` and `npm run bench` (anonymous-bodies).
 */

const MiB = 1024 * 1024;

export interface BodyBurstOptions {
  /** Base URL of the controller (http://127.0.0.1:port). */
  url: string;
  /** Its process id (RSS is read from /proc/<pid>/status). */
  pid: number;
  path?: string;
  /**
   * The request head's headers for connection `i`; default: a webhook delivery with a
   * well-formed, wrong signature. `Content-Length` (or chunked framing) is added here.
   */
  headers?: (i: number) => Record<string, string>;
  /** Send the body chunked (no Content-Length) instead of declaring `declaredBytes`. */
  chunked?: boolean;
  count: number;
  /** Bytes of body each connection sends before it stops and waits. */
  bodyBytes: number;
  /** The Content-Length each connection declares (more than it sends: the body stays partial); unused when chunked. */
  declaredBytes: number;
  /** How long every connection is kept open once all have sent what they will send. */
  holdMs: number;
  /** How long to watch RSS after the last connection closed. */
  settleMs: number;
  /** Gives up on one connection's sending after this (the server may stop reading it). */
  sendTimeoutMs?: number;
  /**
   * The server answers every connection without reading its body (a refusal before the body):
   * wait until each one has its answer or was closed (at most 30 s), instead of until the answers
   * pause. A loaded machine can leave the server's last answers seconds apart.
   */
  everyAnswered?: boolean;
}

/** One burst of a run. */
export interface BurstRound {
  /** RSS at this burst's peak, MiB. */
  peakMiB: number;
  /** RSS once its connections closed and `settleMs` passed, MiB. */
  afterMiB: number;
  /**
   * Answers its connections got, by status ("none": still waiting when they were closed;
   * "reset:CODE": the server closed it unread and the client saw CODE before any answer).
   */
  statuses: Record<string, number>;
  /**
   * The shortest time from a connection's connect to its 408 answer, measured here (null: no
   * 408). The controller answers 408 to a body still arriving at its deadline; a connection's
   * own clock starts before the server's, so this is never shorter than the server's wait.
   */
  earliest408Ms: number | null;
  /** Retry-After values seen on its 503 answers. */
  retryAfter: string[];
  /** Bytes its connections handed to the kernel together (head and body), MiB. */
  sentMiB: number;
  /** `/healthz` while it ran: asked, answered 200, not answered 200 within 5 s, and latency. */
  healthz: { asked: number; ok: number; failed: number; p50Ms: number; maxMs: number };
}

export interface BodyBurstResult {
  rssBeforeMiB: number;
  /** The highest RSS of any burst, MiB. */
  rssPeakMiB: number;
  /** Growth at the peak, MiB (peak − before). */
  rssGrowthMiB: number;
  /** RSS after the last burst's connections closed and `settleMs` passed, MiB. */
  rssAfterMiB: number;
  /** What is still resident after the last burst, MiB (after − before). */
  rssHeldMiB: number;
  /** RSS after the last burst and one full GC in the process (see `gcProcess`), MiB; null without it. */
  rssAfterGcMiB: number | null;
  /** What the process still holds after that GC, MiB (after GC − before); null without it. */
  rssHeldAfterGcMiB: number | null;
  /** How the process accounted its memory after each GC (MiB: rss, heapTotal, heapUsed, external, arrayBuffers), before and after the bursts. */
  gcReports: GcReport[];
  /**
   * What V8 and Node still hold after the bursts and a GC, over what they held before, MiB:
   * heap in use plus external memory (array buffers, native buffers). RSS beyond this is memory
   * the allocator (glibc) kept for reuse after it was freed. Null without a GC hook.
   */
  heldByProcessMiB: number | null;
  rounds: BurstRound[];
}

/** Memory as the process accounts it after a GC (MiB), from the `gc-on-signal: done …` line. */
export type GcReport = Record<'rss' | 'heapTotal' | 'heapUsed' | 'external' | 'arrayBuffers', number>;

/** The flags that let {@link gcProcess} collect garbage in a controller process (node args before the entry). */
export const GC_ON_SIGNAL_NODE_ARGS = [
  '--expose-gc',
  '--import',
  fileURLToPath(new URL('./gc-on-signal.mjs', import.meta.url)),
];

/**
 * Runs one full GC in a controller process started with {@link GC_ON_SIGNAL_NODE_ARGS}: sends
 * SIGUSR2 to `pid` (a process the caller started) and waits until its stderr, read through
 * `stderr()`, says it is done.
 */
export async function gcProcess(pid: number, stderr: () => string, timeoutMs = 10_000): Promise<GcReport> {
  const reports = () => stderr().match(/gc-on-signal: done[^\n]*/g) ?? [];
  const done = reports().length;
  process.kill(pid, 'SIGUSR2');
  const until = performance.now() + timeoutMs;
  while (reports().length === done) {
    if (performance.now() > until)
      throw new Error(`process ${pid} did not report a GC: ${stderr().slice(-500)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  // the allocator hands freed pages back as the collection's sweepers finish
  await new Promise((r) => setTimeout(r, 1000));
  const line = reports()[done]!;
  const value = (k: keyof GcReport) => {
    const m = new RegExp(`\\b${k}=([0-9.]+)`).exec(line);
    if (!m) throw new Error(`no ${k} in "${line}"`);
    return Number(m[1]);
  };
  return {
    rss: value('rss'),
    heapTotal: value('heapTotal'),
    heapUsed: value('heapUsed'),
    external: value('external'),
    arrayBuffers: value('arrayBuffers'),
  };
}

export function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

const mib = (n: number) => Math.round((n / MiB) * 10) / 10;

/** One `/healthz` on a fresh connection; resolves with its status and milliseconds (status 0 on failure). */
function healthz(url: string, timeoutMs: number): Promise<{ status: number; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const req = request(`${url}/healthz`, { agent: false, timeout: timeoutMs }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - t0 }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => resolve({ status: 0, ms: performance.now() - t0 }));
    req.end();
  });
}

interface Conn {
  socket: Socket;
  status: string | null;
  /** performance.now() at connect, and at the answer's head. */
  openedAt: number;
  answeredAt: number | null;
  retryAfter: string | null;
  /** The socket error that ended it before any answer (ECONNRESET, EPIPE: the server closed it unread). */
  endedBy: string | null;
  sent: number;
  done: Promise<void>;
}

function openConn(o: BodyBurstOptions, i: number, chunk: Buffer): Conn {
  const u = new URL(o.url);
  const socket = connect({ host: u.hostname, port: Number(u.port) });
  const conn: Conn = {
    socket,
    status: null,
    openedAt: performance.now(),
    answeredAt: null,
    endedBy: null,
    retryAfter: null,
    sent: 0,
    done: Promise.resolve(),
  };
  let head = '';
  socket.setEncoding('latin1');
  socket.on('data', (d: string) => {
    if (conn.status) return;
    head += d;
    const end = head.indexOf('\r\n\r\n');
    if (end < 0 && head.length < 8192) return;
    conn.status = /^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 'garbled';
    conn.answeredAt = performance.now();
    conn.retryAfter = /\r\nretry-after:\s*([^\r\n]+)/i.exec(head)?.[1] ?? null;
  });
  socket.on('error', (e: NodeJS.ErrnoException) => {
    // a reset after the server answered (or refused to read) is part of the outcome
    if (!conn.status) conn.endedBy ??= e.code ?? e.message;
  });
  conn.done = new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, o.sendTimeoutMs ?? 15_000);
    const finish = () => {
      clearTimeout(timer);
      resolve();
    };
    socket.once('close', finish);
    socket.once('connect', () => {
      conn.openedAt = performance.now();
      const headers = {
        ...(o.headers?.(i) ?? {
          'Content-Type': 'application/json',
          'X-Hub-Signature-256': `sha256=${'0'.repeat(64)}`,
          'X-GitHub-Event': 'push',
          'X-GitHub-Delivery': `burst-${i}`,
        }),
        ...(o.chunked ? { 'Transfer-Encoding': 'chunked' } : { 'Content-Length': String(o.declaredBytes) }),
      };
      socket.write(
        [
          `POST ${o.path ?? '/github/webhooks'} HTTP/1.1`,
          `Host: ${u.host}`,
          ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
          '',
          '',
        ].join('\r\n'),
      );
      // chunked framing: one chunk per write, never the terminating zero-length chunk
      const frame = (b: Buffer) =>
        o.chunked ? Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from('\r\n')]) : b;
      const full = frame(chunk);
      const pump = () => {
        while (conn.sent < o.bodyBytes && !socket.destroyed && !conn.status) {
          const n = Math.min(chunk.length, o.bodyBytes - conn.sent);
          conn.sent += n;
          if (!socket.write(n === chunk.length ? full : frame(chunk.subarray(0, n)))) {
            socket.once('drain', pump);
            return;
          }
        }
        finish();
      };
      pump();
    });
  });
  return conn;
}

/** Runs `rounds` bursts one after another (see the file comment) and reports what it measured. */
export async function runBodyBurst(
  o: BodyBurstOptions & { rounds?: number; gc?: () => Promise<GcReport> },
): Promise<BodyBurstResult> {
  // settle the process first: the first requests compile routes and warm caches
  for (let i = 0; i < 5; i++) await healthz(o.url, 5000);
  // with a GC hook, "before" and "after GC" are both measured with no garbage left
  const gcReports: GcReport[] = [];
  if (o.gc) gcReports.push(await o.gc());
  const before = rssBytes(o.pid);
  let peak = before;
  const rounds: BurstRound[] = [];
  for (let r = 0; r < (o.rounds ?? 1); r++) {
    const round = await burstOnce(o);
    peak = Math.max(peak, round.peak);
    rounds.push(round.result);
  }
  const after = rssBytes(o.pid);
  let afterGc: number | null = null;
  if (o.gc) {
    gcReports.push(await o.gc());
    afterGc = rssBytes(o.pid);
  }
  return {
    rssBeforeMiB: mib(before),
    rssPeakMiB: mib(peak),
    rssGrowthMiB: mib(peak - before),
    rssAfterMiB: mib(after),
    rssHeldMiB: mib(after - before),
    rssAfterGcMiB: afterGc === null ? null : mib(afterGc),
    rssHeldAfterGcMiB: afterGc === null ? null : mib(afterGc - before),
    gcReports,
    heldByProcessMiB:
      gcReports.length === 2
        ? mib(
            (gcReports[1]!.heapUsed +
              gcReports[1]!.external -
              gcReports[0]!.heapUsed -
              gcReports[0]!.external) *
              MiB,
          )
        : null,
    rounds,
  };
}

async function burstOnce(o: BodyBurstOptions): Promise<{ peak: number; result: BurstRound }> {
  let peak = rssBytes(o.pid);
  const sample = () => {
    try {
      peak = Math.max(peak, rssBytes(o.pid));
    } catch {
      // the process is gone: the caller sees it from its exit
    }
  };
  const sampler = setInterval(sample, 20);

  let probing = true;
  const probes: Array<{ status: number; ms: number }> = [];
  const prober = (async () => {
    while (probing) {
      probes.push(await healthz(o.url, 5000));
      await new Promise((r) => setTimeout(r, 100));
    }
  })();

  const chunk = Buffer.alloc(64 * 1024, 0x20); // spaces: valid JSON whitespace, never a full document
  const conns = Array.from({ length: o.count }, (_, i) => openConn(o, i, chunk));
  await Promise.all(conns.map((c) => c.done));
  await new Promise((r) => setTimeout(r, o.holdMs));
  // answers still arriving (a slow machine reaches the last connections late): wait on them, not
  // on the clock — until half a second passes with no new answer (at most 20 s more)
  if (o.everyAnswered) {
    for (const end = performance.now() + 30_000; performance.now() < end; ) {
      if (conns.every((c) => c.status != null || c.socket.destroyed)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
  } else
    for (const end = performance.now() + 20_000; performance.now() < end; ) {
      const answered = conns.filter((c) => c.status != null).length;
      await new Promise((r) => setTimeout(r, 500));
      if (conns.filter((c) => c.status != null).length === answered) break;
    }
  sample();
  for (const c of conns) c.socket.destroy();
  probing = false;
  await prober;

  const settleUntil = performance.now() + o.settleMs;
  while (performance.now() < settleUntil) {
    await new Promise((r) => setTimeout(r, 250));
    sample();
  }
  clearInterval(sampler);

  const statuses: Record<string, number> = {};
  for (const c of conns) {
    const k = c.status ?? (c.endedBy ? `reset:${c.endedBy}` : 'none');
    statuses[k] = (statuses[k] ?? 0) + 1;
  }
  const lat = probes
    .filter((p) => p.status === 200)
    .map((p) => p.ms)
    .sort((a, b) => a - b);
  return {
    peak,
    result: {
      peakMiB: mib(peak),
      afterMiB: mib(rssBytes(o.pid)),
      statuses,
      earliest408Ms: conns.reduce<number | null>((least, c) => {
        if (c.status !== '408' || c.answeredAt == null) return least;
        const ms = Math.round(c.answeredAt - c.openedAt);
        return least == null ? ms : Math.min(least, ms);
      }, null),
      retryAfter: [...new Set(conns.flatMap((c) => (c.retryAfter ? [c.retryAfter] : [])))],
      sentMiB: mib(conns.reduce((n, c) => n + c.socket.bytesWritten, 0)),
      healthz: {
        asked: probes.length,
        ok: lat.length,
        failed: probes.length - lat.length,
        p50Ms: Math.round(lat[Math.floor(lat.length / 2)] ?? 0),
        maxMs: Math.round(lat.at(-1) ?? 0),
      },
    },
  };
}
