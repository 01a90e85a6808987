import type { Row, Value } from '@libsql/client';
import { valueFromSql } from './local-values.ts';

/**
 * Rows of the local client's results shaped as `@libsql/client/sqlite3` shapes them: enumerable
 * named columns, non-enumerable indices and `length`.
 */

/**
 * Rows share one prototype per statement: `length` and the indices are non-enumerable getters
 * over the own, enumerable named columns, as in `@libsql/client` (drizzle reads rows both by
 * `Array.prototype.slice.call(row)` and by `Object.keys`). A result with duplicate column names
 * gets no prototype: each row then carries its indices itself.
 */
export function rowPrototype(columns: string[]): object | null {
  if (new Set(columns).size !== columns.length) return null;
  const proto: PropertyDescriptorMap = { length: { value: columns.length } };
  columns.forEach((name, i) => {
    proto[i] = {
      get(this: Record<string, Value>) {
        return this[name];
      },
    };
  });
  return Object.create(Object.prototype, proto) as object;
}

/** A row of a result with duplicate column names: indices are its own, the first name wins. */
export function slowRow(values: unknown[], columns: string[]): Row {
  const row = {};
  Object.defineProperty(row, 'length', { value: values.length });
  for (let i = 0; i < values.length; i++) {
    const value = valueFromSql(values[i]);
    Object.defineProperty(row, i, { value });
    const name = columns[i]!;
    if (!Object.hasOwn(row, name)) {
      Object.defineProperty(row, name, { value, enumerable: true, configurable: true, writable: true });
    }
  }
  return row as Row;
}
