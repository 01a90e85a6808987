import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/**
 * Loopback ports for the servers the tests, the demo and the benches start, chosen before the
 * server binds them (docs/adr/0285-test-ports-outside-the-ephemeral-range.md).
 *
 * A port the kernel handed to `listen(0)` and got back is a random free port of the ephemeral
 * range, the same range every other `listen(0)` and every outbound connection on the machine draws
 * from: between our close and the child's bind (seconds, for a controller started under load)
 * another process can take it, and the child fails with EADDRINUSE. So ports come from below the
 * ephemeral range, where the kernel never picks one on its own; each test worker has its own slice
 * of it, walked from a random start (other test runs on the machine use the same slices), and a
 * port is handed out only after a listen on it succeeded.
 */

/** Ports below this are left alone: privileged, and the well-known services' (RFC 6335 §6). */
export const PORT_FLOOR = 10_000;
/** Slices of the ports below the ephemeral range; a test worker takes `poolId % SLICES`. */
export const SLICES = 8;
/**
 * The ephemeral range where `/proc/sys/net/ipv4/ip_local_port_range` cannot be read: IANA's
 * dynamic ports, which macOS and Windows use (RFC 6335 §6).
 */
export const IANA_EPHEMERAL: readonly [number, number] = [49152, 65535];

/**
 * The kernel's ephemeral port range, from the text of `/proc/sys/net/ipv4/ip_local_port_range`
 * ("32768\t60999"; https://docs.kernel.org/networking/ip-sysctl.html), or IANA's when there is none.
 */
export function ephemeralRange(procText: string | null): [number, number] {
  const m = procText ? /^\s*(\d+)\s+(\d+)\s*$/.exec(procText) : null;
  if (!m) return [...IANA_EPHEMERAL];
  return [Number(m[1]), Number(m[2])];
}

/**
 * The ports a test worker may hand out: its slice of `[PORT_FLOOR, ephemeral start)`, or of the
 * ports above the ephemeral range when those are more (a range set to start low). Throws when
 * neither side leaves a slice of at least 64 ports, with the sysctl that makes room.
 */
export function portSlice(
  ephemeral: readonly [number, number],
  poolId: number,
): { first: number; last: number } {
  const below = { first: PORT_FLOOR, last: ephemeral[0] - 1 };
  const above = { first: Math.max(PORT_FLOOR, ephemeral[1] + 1), last: 65535 };
  const size = (r: { first: number; last: number }) => Math.max(0, r.last - r.first + 1);
  const side = size(below) >= size(above) ? below : above;
  const each = Math.floor(size(side) / SLICES);
  if (each < 64) {
    throw new Error(
      `the ephemeral port range ${ephemeral[0]}-${ephemeral[1]} leaves no ports for test servers outside it: ` +
        'narrow it, e.g. sysctl -w net.ipv4.ip_local_port_range="32768 60999"',
    );
  }
  const slice = ((poolId % SLICES) + SLICES) % SLICES;
  const first = side.first + slice * each;
  return { first, last: first + each - 1 };
}

/** Whether a listen on 127.0.0.1:`port` succeeds now (closed again before resolving). */
export function canListen(port: number): Promise<boolean> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', (e: NodeJS.ErrnoException) =>
      e.code === 'EADDRINUSE' || e.code === 'EACCES' ? res(false) : rej(e),
    );
    s.listen({ port, host: '127.0.0.1', exclusive: true }, () => s.close(() => res(true)));
  });
}

/**
 * A port allocator over `slice`: each call walks on from the last port it gave (from a random
 * start), so one process never gives a port twice before it has gone round the slice, and gives
 * the first port a listen succeeds on.
 */
export function createPortAllocator(
  slice: { first: number; last: number },
  random: () => number = Math.random,
  listens: (port: number) => Promise<boolean> = canListen,
): () => Promise<number> {
  const size = slice.last - slice.first + 1;
  let next = Math.floor(random() * size);
  return async () => {
    for (let tried = 0; tried < size; tried++) {
      const port = slice.first + next;
      next = (next + 1) % size;
      if (await listens(port)) return port;
    }
    throw new Error(`no free loopback port in ${slice.first}-${slice.last}`);
  };
}

let allocate: (() => Promise<number>) | null = null;

/**
 * A loopback port free now and outside the kernel's ephemeral range, for a server that binds it
 * later (a child process given it on its command line or in its config). Servers in this process
 * that can listen on port 0 and read the port back should do that instead.
 */
export function freePort(): Promise<number> {
  if (!allocate) {
    let proc: string | null = null;
    try {
      proc = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8');
    } catch {
      proc = null;
    }
    // vitest numbers its workers 1…maxWorkers (https://vitest.dev/advanced/pool); outside vitest, 0
    allocate = createPortAllocator(
      portSlice(ephemeralRange(proc), Number(process.env.VITEST_POOL_ID ?? 0) || 0),
    );
  }
  return allocate();
}
