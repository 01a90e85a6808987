/** JSON-lines logger on stderr (journald keeps it). Never given tokens, JIT configs or env values. */
export interface AgentLogger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

const LEVELS = { debug: 10, info: 20, warn: 30, error: 40 } as const;

export function createAgentLogger(level: keyof typeof LEVELS, hostId: string): AgentLogger {
  const min = LEVELS[level];
  const emit = (lvl: keyof typeof LEVELS) => (msg: string, fields?: Record<string, unknown>) => {
    if (LEVELS[lvl] < min) return;
    process.stderr.write(
      `${JSON.stringify({ t: new Date().toISOString(), level: lvl, name: 'spark-agent', host: hostId, msg, ...fields })}\n`,
    );
  };
  return { debug: emit('debug'), info: emit('info'), warn: emit('warn'), error: emit('error') };
}
