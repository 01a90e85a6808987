import { createPrivateKey } from 'node:crypto';
import * as z from 'zod';
import { CreateAppError, EXIT } from './options.ts';

/**
 * The manifest flow's last step: `POST /app-manifests/{code}/conversions`, without
 * authentication (the code is the credential; it works once, within the hour). The answer holds
 * the App's id, its private key and its webhook secret; GitHub shows the key this once.
 * https://docs.github.com/en/rest/apps/apps#create-a-github-app-from-a-manifest
 */

/** The part of GitHub's answer the controller needs (the rest, e.g. the OAuth client secret, it never uses). */
export const ConvertedApp = z.object({
  id: z.number().int().positive(),
  slug: z.string().min(1),
  name: z.string(),
  html_url: z.string().url(),
  owner: z.object({ login: z.string() }).passthrough().nullable().optional(),
  permissions: z.record(z.string(), z.string()),
  events: z.array(z.string()),
  webhook_secret: z.string().min(1).nullable(),
  pem: z.string().includes('PRIVATE KEY'),
});
export type ConvertedApp = z.infer<typeof ConvertedApp>;

/** A code as GitHub hands it back on the redirect: something safe to put in a URL path. */
export const CODE_RE = /^[A-Za-z0-9_-]{1,200}$/;

export async function convertCode(apiUrl: string, code: string): Promise<ConvertedApp> {
  if (!CODE_RE.test(code)) throw new CreateAppError(EXIT.github, 'the redirect carried a malformed code');
  let res: Response;
  try {
    res = await fetch(`${apiUrl}/app-manifests/${code}/conversions`, {
      method: 'POST',
      headers: {
        accept: 'application/vnd.github+json',
        'x-github-api-version': '2022-11-28',
        'user-agent': 'spark-controller-create-app',
      },
      signal: AbortSignal.timeout(30_000),
    });
  } catch (e) {
    throw new CreateAppError(
      EXIT.github,
      `cannot reach GitHub at ${apiUrl} (${(e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message}); the App may exist already: check GitHub's App settings before running create-app again`,
    );
  }
  const text = await res.text();
  if (res.status !== 201) {
    const message = (() => {
      try {
        return String((JSON.parse(text) as { message?: unknown }).message ?? '');
      } catch {
        return '';
      }
    })();
    throw new CreateAppError(
      EXIT.github,
      res.status === 404
        ? 'GitHub answered 404 for the code: it is unknown, already used, or older than an hour. Run create-app again (an App GitHub created meanwhile can be deleted in its settings)'
        : `GitHub answered ${res.status}${message ? ` (${message})` : ''} for the code; run create-app again`,
    );
  }
  let parsed: ConvertedApp;
  try {
    parsed = ConvertedApp.parse(JSON.parse(text));
  } catch {
    throw new CreateAppError(
      EXIT.github,
      `GitHub's answer to the code is not an App with its id, key and webhook secret (POST ${apiUrl}/app-manifests/…/conversions)`,
    );
  }
  return parsed;
}

/**
 * The key as PKCS#8: GitHub hands out PKCS#1 ("BEGIN RSA PRIVATE KEY", the description's example),
 * which the controller signs with on Node, but Workers' WebCrypto imports only PKCS#8
 * (universal-github-app-jwt, "Private key formats"); one format serves both.
 */
export function toPkcs8(pem: string): string {
  try {
    return createPrivateKey(pem).export({ type: 'pkcs8', format: 'pem' }).toString();
  } catch {
    throw new CreateAppError(EXIT.github, "GitHub's answer holds no usable private key");
  }
}
