import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { describe, expect, it } from 'vitest';
import {
  createPortAllocator,
  ephemeralRange,
  freePort,
  IANA_EPHEMERAL,
  PORT_FLOOR,
  portSlice,
  SLICES,
} from '../../scripts/sim/doubles/ports.ts';

/**
 * The ports handed to servers that bind them later are outside the kernel's ephemeral range, a
 * slice per test worker, and free when handed out (docs/adr/0285-test-ports-outside-the-ephemeral-range.md).
 */

const listen = (port: number) =>
  new Promise<Server>((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(port, '127.0.0.1', () => res(s));
  });
const close = (s: Server) => new Promise<void>((r) => s.close(() => r()));

describe('test server ports', () => {
  it("reads the kernel's ephemeral range, and IANA's where there is none", () => {
    expect(ephemeralRange('32768\t60999\n')).toEqual([32768, 60999]);
    expect(ephemeralRange(null)).toEqual([...IANA_EPHEMERAL]);
    expect(ephemeralRange('garbage')).toEqual([...IANA_EPHEMERAL]);
  });

  it('gives each worker its own slice below the ephemeral range, and says how to make room when there is none', () => {
    const slices = Array.from({ length: SLICES }, (_, id) => portSlice([32768, 60999], id));
    for (const [i, s] of slices.entries()) {
      expect(s.first).toBeGreaterThanOrEqual(PORT_FLOOR);
      expect(s.last).toBeLessThan(32768);
      expect(s.last - s.first).toBeGreaterThan(1000);
      if (i > 0) expect(s.first).toBeGreaterThan(slices[i - 1]!.last);
    }
    // vitest's worker ids run 1…maxWorkers: workers 1 and 2 never share a port
    expect(portSlice([32768, 60999], 1)).not.toEqual(portSlice([32768, 60999], 2));
    // a range starting low leaves the ports above it
    const above = portSlice([1024, 40000], 3);
    expect(above.first).toBeGreaterThan(40000);
    expect(() => portSlice([1024, 65535], 1)).toThrow(/net\.ipv4\.ip_local_port_range/);
  });

  it('walks the slice from a random start, skips a port something listens on, and wraps round', async () => {
    const slice = { first: 20_000, last: 20_003 };
    const taken = new Set([20_003]);
    const next = createPortAllocator(
      slice,
      () => 0.5,
      async (p) => !taken.has(p),
    );
    expect([await next(), await next(), await next(), await next()]).toEqual([
      20_002, 20_000, 20_001, 20_002,
    ]);
    taken.add(20_000).add(20_001).add(20_002);
    await expect(next()).rejects.toThrow('no free loopback port in 20000-20003');
  });

  it("hands out distinct free ports outside this machine's ephemeral range, each one a server can bind", async () => {
    let proc: string | null = null;
    try {
      proc = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8');
    } catch {
      proc = null;
    }
    const [lo, hi] = ephemeralRange(proc);
    const ports = [await freePort(), await freePort(), await freePort()];
    expect(new Set(ports).size).toBe(3);
    for (const p of ports) expect(p < lo || p > hi, `${p} is in ${lo}-${hi}`).toBe(true);
    // from this worker's slice (vitest sets VITEST_POOL_ID in each worker)
    expect(process.env.VITEST_POOL_ID).toMatch(/^[1-9]\d*$/);
    const mine = portSlice([lo, hi], Number(process.env.VITEST_POOL_ID));
    for (const p of ports)
      expect(p >= mine.first && p <= mine.last, `${p} not in ${mine.first}-${mine.last}`).toBe(true);
    // a port a server listens on is not handed out; once it is closed, it is
    const p = ports[0]!;
    const only = createPortAllocator({ first: p, last: p });
    const held = await listen(p);
    await expect(only()).rejects.toThrow(`no free loopback port in ${p}-${p}`);
    await close(held);
    expect(await only()).toBe(p);
    await close(await listen(p));
  });
});
