import type { PollLogs } from './models.ts';
import { serverClientError } from './models.ts';

/**
 * A job submission's log as dstack's file log storage keeps and serves it — dstackai/dstack
 * 0.21.2, `src/dstack/_internal/server/services/logs/filelog.py` (`FileLogStorage`), the default
 * storage of a server without CloudWatch/GCP/Fluent Bit settings:
 *
 * - one JSON line per runner log event, `{timestamp, log_source, message}`; `log_source` is always
 *   `stdout` (`_runner_log_event_to_log_event`: the job runs on a pty, one stream) and `message`
 *   the chunk decoded as UTF-8 with `errors="replace"`;
 * - `logs/poll` answers `message` base64 of that text (`poll_logs_async`, services/logs/__init__.py);
 * - **ascending**: `next_token` is a line number, set only when a full page (`limit`) was read and
 *   another line follows (`_poll_logs_ascending`);
 * - **descending**: newest first; `next_token` is the byte offset of the last (oldest) event
 *   returned, set only when more than `limit` events were found (`_poll_logs_descending`);
 * - a token that is not a non-negative integer is a `ServerClientError` ("Invalid next_token");
 * - `start_time` is exclusive, `end_time` exclusive ascending and inclusive descending, as written.
 */

export interface StoredEvent {
  timestamp: string;
  log_source: 'stdout';
  message: string;
}

export class SubmissionLog {
  readonly events: StoredEvent[] = [];
  /** Byte offset in the log file where each event's line starts. */
  private readonly offsets: number[] = [];
  private size = 0;
  private lastMs = 0;

  /** One runner log event; the runner keeps timestamps distinct (routers/logs.py comment). */
  append(chunk: Buffer): void {
    const ms = Math.max(Date.now(), this.lastMs + 1);
    this.lastMs = ms;
    const e: StoredEvent = {
      timestamp: new Date(ms).toISOString(),
      log_source: 'stdout',
      message: new TextDecoder('utf-8', { fatal: false }).decode(chunk),
    };
    this.offsets.push(this.size);
    this.events.push(e);
    this.size += Buffer.byteLength(`${JSON.stringify(e)}\n`);
  }

  /** The whole output as the runner read it, for tests to look at. */
  text(): string {
    return this.events.map((e) => e.message).join('');
  }

  /** `POST …/logs/poll`: `{status, body}` as the server answers. */
  poll(req: PollLogs): { status: number; body: unknown } {
    let start: number | null = null;
    if (req.next_token != null) {
      const v = /^[+-]?\d+$/.test(req.next_token.trim()) ? Number(req.next_token) : Number.NaN;
      if (!Number.isInteger(v) || v < 0)
        return serverClientError(`Invalid next_token: ${req.next_token}. Must be a non-negative integer.`);
      start = v;
    }
    const t = (s: string) => Date.parse(s);
    const startTime = req.start_time ? t(req.start_time) : null;
    const endTime = req.end_time ? t(req.end_time) : null;
    const out = (picked: StoredEvent[], next: string | null) => ({
      status: 200,
      body: {
        logs: picked.map((e) => ({ ...e, message: Buffer.from(e.message, 'utf8').toString('base64') })),
        external_url: null,
        next_token: next,
      },
    });
    if (!req.descending) {
      const logs: StoredEvent[] = [];
      let line = start ?? 0;
      if (line > this.events.length) return out([], null);
      for (; line < this.events.length; ) {
        const e = this.events[line]!;
        line++;
        if (startTime != null && t(e.timestamp) <= startTime) continue;
        if (endTime != null && t(e.timestamp) >= endTime) break;
        logs.push(e);
        if (logs.length >= req.limit) return out(logs, line < this.events.length ? String(line) : null);
      }
      return out(logs, null);
    }
    const candidates: { e: StoredEvent; offset: number }[] = [];
    for (let i = this.events.length - 1; i >= 0; i--) {
      const offset = this.offsets[i]!;
      if (start != null && start < this.size && offset >= start) continue;
      const e = this.events[i]!;
      if (endTime != null && t(e.timestamp) > endTime) continue;
      if (startTime != null && t(e.timestamp) <= startTime) break;
      candidates.push({ e, offset });
      if (candidates.length > req.limit) break;
    }
    const page = candidates.slice(0, req.limit);
    const next = candidates.length > req.limit ? String(candidates[req.limit - 1]!.offset) : null;
    return out(
      page.map((c) => c.e),
      next,
    );
  }
}
