import type { InArgs, InValue, Value } from '@libsql/client';

/**
 * Values between `@libsql/client`'s types and the native `libsql` binding, converted as
 * `@libsql/client/sqlite3` converts them (`intMode: 'number'`, blobs as `ArrayBuffer`).
 */

const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

export function valueFromSql(v: unknown): Value {
  if (typeof v === 'bigint') {
    if (v < MIN_SAFE || v > MAX_SAFE) {
      throw new RangeError('Received integer which cannot be safely represented as a JavaScript number');
    }
    return Number(v);
  }
  if (v instanceof Buffer) return v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength) as ArrayBuffer;
  return v as Value;
}

const MIN_INT = -9223372036854775808n;
const MAX_INT = 9223372036854775807n;

export function valueToSql(v: InValue): unknown {
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) {
      throw new RangeError('Only finite numbers (not Infinity or NaN) can be passed as arguments');
    }
    return v;
  }
  if (typeof v === 'bigint') {
    if (v < MIN_INT || v > MAX_INT) {
      throw new RangeError(
        'bigint is too large to be represented as a 64-bit integer and passed as argument',
      );
    }
    return v;
  }
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (v instanceof ArrayBuffer) return Buffer.from(v);
  if (v instanceof Date) return v.valueOf();
  if (v === undefined) throw new TypeError('undefined cannot be passed as argument to the database');
  return v;
}

export function argsToSql(args: InArgs | undefined): unknown {
  if (!args) return [];
  if (Array.isArray(args)) return args.map(valueToSql);
  const out: Record<string, unknown> = {};
  for (const name in args) {
    const key = name[0] === '@' || name[0] === '$' || name[0] === ':' ? name.slice(1) : name;
    out[key] = valueToSql(args[name] as InValue);
  }
  return out;
}
