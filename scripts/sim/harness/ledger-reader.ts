import { type Client, createClient } from '@libsql/client';

/**
 * Read-only view of a running controller's ledger file with plain SQL, for the system harness and
 * the demo's timeline. The controller process owns every write (only `functions/ledger/` writes
 * the ledger); this reads the tables as they are stored, so it needs no drizzle schema and keeps
 * working when the controller's modules move. Columns come back camelCased (`head_sha` → `headSha`).
 */

/** A row with its columns camelCased; the fields the harness relies on are typed. */
type Row<Known> = Known & { [column: string]: unknown };

export type ReservationRow = Row<{
  id: string;
  kind: string;
  topology: string;
  status: string;
  outcome: string | null;
  reason: string | null;
  repo: string | null;
  pr: number | null;
  headSha: string | null;
  receiptJson: string | null;
}>;

export type LeaseRow = Row<{
  id: string;
  reservationId: string;
  hostId: string;
  status: string;
  exitCode: number | null;
  evidenceJson: string | null;
}>;

export type HostRow = Row<{ id: string; phase: string; note: string | null; lastHeartbeatAt: number | null }>;

export interface EventRow {
  id: number;
  /** When it was recorded (ms since the epoch, the controller's clock). */
  at: number;
  type: string;
  subjectId: string;
  cause: string | null;
}

export interface LedgerReader {
  reservation(id: string): Promise<ReservationRow | null>;
  /** Every reservation, oldest first. */
  reservations(): Promise<ReservationRow[]>;
  /** A reservation's leases, ordered by host id. */
  leases(reservationId: string): Promise<LeaseRow[]>;
  host(id: string): Promise<HostRow | null>;
  /** Events about one subject (reservation, host or lease id), oldest first. */
  history(subjectId: string): Promise<EventRow[]>;
  /** Events after the given event id, oldest first (for a live timeline). */
  eventsAfter(id: number): Promise<EventRow[]>;
  close(): void;
}

const camel = (column: string) => column.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());

async function rows<T>(db: Client, sql: string, args: (string | number)[] = []): Promise<T[]> {
  const rs = await db.execute({ sql, args });
  return rs.rows.map((r) => {
    const o: Record<string, unknown> = {};
    rs.columns.forEach((c, i) => {
      o[camel(c)] = r[i];
    });
    return o as T;
  });
}

/** Opens a read connection to the ledger at `url` (a `file:` URL of the controller's ledger). */
export function openLedgerReader(url: string): LedgerReader {
  const db = createClient({ url });
  return {
    async reservation(id) {
      return (await rows<ReservationRow>(db, 'SELECT * FROM reservations WHERE id = ?', [id]))[0] ?? null;
    },
    reservations: () => rows<ReservationRow>(db, 'SELECT * FROM reservations ORDER BY seq'),
    leases: (reservationId) =>
      rows<LeaseRow>(db, 'SELECT * FROM leases WHERE reservation_id = ? ORDER BY host_id', [reservationId]),
    async host(id) {
      return (await rows<HostRow>(db, 'SELECT * FROM hosts WHERE id = ?', [id]))[0] ?? null;
    },
    history: (subjectId) =>
      rows<EventRow>(
        db,
        'SELECT id, at, type, subject_id, cause FROM events WHERE subject_id = ? ORDER BY id',
        [subjectId],
      ),
    eventsAfter: (id) =>
      rows<EventRow>(db, 'SELECT id, at, type, subject_id, cause FROM events WHERE id > ? ORDER BY id', [id]),
    close: () => db.close(),
  };
}
