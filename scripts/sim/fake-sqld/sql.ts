/**
 * Just enough SQL lexing for the fake sqld: split a text into statements (as `sqlite3_complete`
 * does, so a `;` inside a string, comment or trigger body does not end a statement), find the
 * parameters of each statement, and classify it the way sqld's query analysis does (read, write,
 * transaction control) so writers can be queued for the database's single write lock.
 */

export type StmtKind = 'read' | 'write' | 'begin-read' | 'begin-write' | 'txn-end' | 'savepoint';

export interface ScannedStmt {
  /** The statement text, without the terminating `;`. */
  text: string;
  /** Upper-cased keywords/identifiers and punctuation, in order (literals elided). */
  tokens: string[];
  /** Parameter names in order of appearance (`?NNN`, `:a`, `@a`, `$a`); `null` for a bare `?`. */
  params: (string | null)[];
  kind: StmtKind;
}

const IDENT_START = /[A-Za-z_\u0080-\uffff]/;
const IDENT_PART = /[A-Za-z0-9_$\u0080-\uffff]/;

/** Splits `sql` into its non-empty statements. */
export function scanSql(sql: string): ScannedStmt[] {
  const out: ScannedStmt[] = [];
  let start = 0;
  let tokens: string[] = [];
  let params: (string | null)[] = [];
  let inTrigger = false;
  // the token right before a `;`; inside CREATE TRIGGER only `END ;` ends the statement
  let last = '';
  const flush = (end: number) => {
    if (tokens.length > 0) {
      out.push({ text: sql.slice(start, end).trim(), tokens, params, kind: classify(tokens) });
    }
    tokens = [];
    params = [];
    inTrigger = false;
    last = '';
  };
  const n = sql.length;
  let i = 0;
  while (i < n) {
    const c = sql[i]!;
    if (c === '-' && sql[i + 1] === '-') {
      const nl = sql.indexOf('\n', i);
      i = nl < 0 ? n : nl + 1;
    } else if (c === '/' && sql[i + 1] === '*') {
      const close = sql.indexOf('*/', i + 2);
      i = close < 0 ? n : close + 2;
    } else if (c === "'" || c === '"' || c === '`') {
      // a doubled quote is an escaped quote inside the literal
      let j = i + 1;
      for (;;) {
        const q = sql.indexOf(c, j);
        if (q < 0) {
          j = n;
          break;
        }
        if (sql[q + 1] === c) j = q + 2;
        else {
          j = q + 1;
          break;
        }
      }
      tokens.push(c === "'" ? '<string>' : '<ident>');
      last = '';
      i = j;
    } else if (c === '[') {
      const close = sql.indexOf(']', i);
      tokens.push('<ident>');
      last = '';
      i = close < 0 ? n : close + 1;
    } else if (c === ';') {
      if (inTrigger && last !== 'END') {
        tokens.push(';');
        last = '';
        i++;
      } else {
        flush(i);
        i++;
        start = i;
      }
    } else if (IDENT_START.test(c)) {
      let j = i + 1;
      while (j < n && IDENT_PART.test(sql[j]!)) j++;
      const word = sql.slice(i, j).toUpperCase();
      tokens.push(word);
      last = word;
      if (
        word === 'TRIGGER' &&
        (tokens.length === 2 ||
          (tokens.length === 3 && (tokens[1] === 'TEMP' || tokens[1] === 'TEMPORARY'))) &&
        tokens[0] === 'CREATE'
      ) {
        inTrigger = true;
      }
      i = j;
    } else if (c === '?') {
      let j = i + 1;
      while (j < n && /[0-9]/.test(sql[j]!)) j++;
      params.push(j > i + 1 ? sql.slice(i, j) : null);
      tokens.push('?');
      last = '';
      i = j;
    } else if ((c === ':' || c === '@' || c === '$') && i + 1 < n && IDENT_PART.test(sql[i + 1]!)) {
      let j = i + 1;
      while (j < n && IDENT_PART.test(sql[j]!)) j++;
      params.push(sql.slice(i, j));
      tokens.push('?');
      last = '';
      i = j;
    } else if (/\s/.test(c)) {
      i++;
    } else if (/[0-9]/.test(c)) {
      let j = i + 1;
      while (j < n && /[0-9A-Za-z_.]/.test(sql[j]!)) j++;
      tokens.push('<number>');
      last = '';
      i = j;
    } else {
      tokens.push(c);
      last = '';
      i++;
    }
  }
  flush(n);
  return out;
}

/** sqld-style statement kind: which statements need the database's write lock. */
function classify(tokens: string[]): StmtKind {
  const [first, second] = tokens;
  switch (first) {
    case 'SELECT':
    case 'VALUES':
    case 'EXPLAIN':
      return 'read';
    case 'WITH':
      // a CTE may front an INSERT/UPDATE/DELETE
      return tokens.some((t) => t === 'INSERT' || t === 'UPDATE' || t === 'DELETE' || t === 'REPLACE')
        ? 'write'
        : 'read';
    case 'BEGIN':
      return second === 'IMMEDIATE' || second === 'EXCLUSIVE' ? 'begin-write' : 'begin-read';
    case 'COMMIT':
    case 'END':
    case 'ROLLBACK':
      return tokens.includes('TO') ? 'savepoint' : 'txn-end';
    case 'SAVEPOINT':
    case 'RELEASE':
      return 'savepoint';
    case 'PRAGMA':
      // `PRAGMA x = y` may write (user_version, journal_mode); `PRAGMA x` / `PRAGMA x(t)` reads
      return tokens.includes('=') ? 'write' : 'read';
    default:
      return 'write';
  }
}
