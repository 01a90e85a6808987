import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiToken } from '../../functions/auth/tokens.ts';
import { makeTestLedger, tempDir } from '../../scripts/sim/ledger.ts';
import { type ControllerGroup, startControllerProcesses } from '../../scripts/sim/load/controllers.ts';

/**
 * a body is bounded while it streams. A real controller process (`functions/
 * node.ts`) gets a 200 MiB chunked body (no Content-Length, so nothing but counting the chunks can
 * refuse it) on `/api/v1` routes; its resident memory, sampled from /proc while the body is sent,
 * stays within 64 MiB of where it was, it answers 413 `payload_too_large`, and it keeps answering.
 * Before the app-wide limit, `c.req.text()` buffered the whole body (~770 MiB of RSS).
 */

const MiB = 1024 * 1024;
const TOTAL = 200 * MiB;

let group: ControllerGroup;
let cleanup: () => void;
/** An operator token: authenticated callers are the ones whose bodies used to be read whole. */
let token = '';

function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

/** Sends `total` bytes chunked to `url`, writing only when the socket drains; resolves with the answer. */
function sendChunked(url: string, total: number): Promise<{ status: number; body: string; sent: number }> {
  return new Promise((resolve, reject) => {
    const chunk = Buffer.alloc(MiB, 0x7b); // '{' — never valid JSON, never parsed
    let sent = 0;
    let answered: { status: number; body: string } | null = null;
    const req = request(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'transfer-encoding': 'chunked',
        authorization: `Bearer ${token}`,
      },
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => {
        answered = { status: res.statusCode ?? 0, body };
        // the server may stop reading once it answered; the rest of the body is not needed
        req.destroy();
        resolve({ ...answered, sent });
      });
    });
    req.on('error', (e) => {
      if (!answered) reject(e);
    });
    const pump = () => {
      while (sent < total && !answered) {
        sent += chunk.length;
        if (!req.write(chunk)) {
          req.once('drain', pump);
          return;
        }
      }
      if (!answered) req.end();
    };
    pump();
  });
}

beforeAll(async () => {
  const tmp = tempDir('spark-bodies-');
  cleanup = tmp.cleanup;
  const ledgerUrl = `file:${join(tmp.dir, 'spark.db')}`;
  const config = { hosts: [{ id: 'spark-1', homeService: 'deckard' }, { id: 'spark-2' }] };
  const seed = await makeTestLedger({ url: ledgerUrl, config });
  token = (
    await createApiToken(seed.ledger, { name: 'bodies', scopes: ['operate', 'develop', 'emergency'] }, 'test')
  ).token;
  seed.close();
  group = await startControllerProcesses({ count: 1, dir: tmp.dir, ledgerUrl, config });
}, 90_000);

afterAll(async () => {
  await group?.stop();
  cleanup?.();
});

describe('oversized chunked bodies', () => {
  for (const path of ['/api/v1/reservations', '/api/v1/tokens']) {
    it(`a 200 MiB chunked body to POST ${path} is refused while it streams`, async () => {
      const p = group.procs[0]!;
      const before = rssBytes(p.pid);
      let peak = before;
      const sampler = setInterval(() => {
        peak = Math.max(peak, rssBytes(p.pid));
      }, 10);
      const answer = await sendChunked(`${p.url}${path}`, TOTAL).finally(() => clearInterval(sampler));
      peak = Math.max(peak, rssBytes(p.pid));
      expect(answer.status).toBe(413);
      expect(JSON.parse(answer.body)).toMatchObject({ error: { code: 'payload_too_large' } });
      expect(peak - before, `RSS grew from ${before} to ${peak}`).toBeLessThan(64 * MiB);
      const health = await fetch(`${p.url}/healthz`);
      expect(health.status).toBe(200);
    }, 120_000);
  }
});
