import type { z } from 'zod';
import { ErrorBody } from '../core/protocol/api.ts';
import { CliError, EXIT } from './errors.ts';
import type { CliSettings } from './settings.ts';

/** The controller's operator/user API as sparkctl and the MCP server use it. */
export interface ApiClient {
  readonly url: string;
  call<S extends z.ZodType>(method: string, path: string, schema: S, body?: unknown): Promise<z.output<S>>;
}

function statusExit(status: number): number {
  if (status === 401) return EXIT.unauthorized;
  if (status === 403) return EXIT.forbidden;
  if (status === 404) return EXIT.notFound;
  if (status === 409) return EXIT.conflict;
  if (status === 400 || status === 413 || status === 422) return EXIT.usage;
  return EXIT.failed;
}

/** Creates a client; every failure is a {@link CliError} with a one-line message and exit code. */
export function createApiClient(settings: CliSettings, fetchImpl: typeof fetch = fetch): ApiClient {
  const hint401 =
    settings.tokenSource === 'none'
      ? 'no token given: set SPARK_TOKEN, pass --token or put "token" in ' + settings.configPath
      : `check the token from ${settings.tokenSource}`;
  const rootPath = new URL(settings.url).pathname.replace(/\/+$/, '');
  return {
    url: settings.url,
    async call(method, path, schema, body) {
      let res: Response;
      try {
        res = await fetchImpl(`${settings.url}${path}`, {
          method,
          headers: {
            accept: 'application/json',
            ...(settings.token ? { authorization: `Bearer ${settings.token}` } : {}),
            ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
          },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
          signal: AbortSignal.timeout(30_000),
        });
      } catch (e) {
        const c = (e as { cause?: { code?: string; message?: string } }).cause;
        const cause = c?.code ?? c?.message ?? (e as Error).message;
        throw new CliError(
          EXIT.unreachable,
          `cannot reach the controller at ${settings.url} (${cause}): is it running? set SPARK_URL or --url`,
          'unreachable',
        );
      }
      const text = await res.text();
      let json: unknown = null;
      try {
        json = text ? JSON.parse(text) : null;
      } catch {
        json = null;
      }
      if (!res.ok) {
        const err = ErrorBody.safeParse(json);
        const code = err.success ? err.data.error.code : `http_${res.status}`;
        let message = err.success ? err.data.error.message : `HTTP ${res.status} from ${method} ${path}`;
        if (res.status === 401) message = `unauthorized: ${message} (${hint401})`;
        else if (res.status === 403) message = `forbidden: ${message}`;
        else if (res.status === 404 && message.startsWith('no route'))
          message = rootPath
            ? `${message}: the controller URL ${settings.url} has the path ${rootPath}; it must be the controller's root URL (${new URL(settings.url).origin}, unless a proxy serves it under that path)`
            : `${message}: this controller does not offer that API (is the part that serves it deployed?)`;
        throw new CliError(statusExit(res.status), message, code, json);
      }
      const parsed = schema.safeParse(json);
      if (!parsed.success) {
        throw new CliError(
          EXIT.failed,
          `unexpected answer from ${method} ${path}: ${parsed.error.issues
            .slice(0, 3)
            .map((i) => `${i.path.join('.')}: ${i.message}`)
            .join('; ')} (controller and sparkctl versions differ?)`,
          'bad_response',
        );
      }
      return parsed.data;
    },
  };
}
