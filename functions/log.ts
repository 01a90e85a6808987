/** A small structured logger (JSON lines on stderr) usable on Node and Workers. */
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

const LEVELS = { debug: 10, info: 20, warn: 30, error: 40 } as const;

export function createLogger(level: keyof typeof LEVELS = 'info', name = 'controller'): Logger {
  const min = LEVELS[level];
  const emit = (lvl: keyof typeof LEVELS) => (msg: string, fields?: Record<string, unknown>) => {
    if (LEVELS[lvl] < min) return;
    console.error(JSON.stringify({ t: new Date().toISOString(), level: lvl, name, msg, ...fields }));
  };
  return { debug: emit('debug'), info: emit('info'), warn: emit('warn'), error: emit('error') };
}

export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };
