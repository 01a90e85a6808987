import { randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AppManifest } from './manifest.ts';
import { CreateAppError, EXIT } from './options.ts';

/**
 * The local setup page of `create-app`, on 127.0.0.1 only: `GET /` posts the manifest to GitHub's
 * new-App form by itself (a form the page submits, as GitHub's manifest docs show it), and
 * `GET /callback` takes GitHub's redirect with the temporary code. A redirect whose `state` is not
 * the one this run sent is refused and the run goes on waiting: only the form this command opened
 * can finish it (https://docs.github.com/en/apps/sharing-github-apps/registering-a-github-app-from-a-manifest,
 * "state"). Requests naming another Host are refused, so a web page cannot reach the setup page
 * through a DNS name that resolves to loopback.
 */

/** What the page shows once the App exists. */
export interface Created {
  name: string;
  id: number;
  installUrl: string;
  secretsFile: string;
}

export interface SetupServer {
  /** The setup page, e.g. http://127.0.0.1:41234/ */
  url: string;
  /** Where GitHub sends the person back (`redirect_url`). */
  callbackUrl: string;
  /** Settles once a redirect with this run's `state` was handled: the App, or why it failed. */
  done: Promise<Created>;
  close(): Promise<void>;
}

const html = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

function page(title: string, body: string, nonce?: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${html(title)}</title>
<style${nonce ? ` nonce="${nonce}"` : ''}>body{font:15px/1.5 system-ui,sans-serif;max-width:46rem;margin:3rem auto;padding:0 1rem}code,pre{background:#f4f4f4;padding:.1rem .3rem}pre{padding:.8rem;overflow:auto}</style>
</head><body>${body}</body></html>`;
}

const sameText = (a: string, b: string) => {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
};

export async function startSetupServer(opts: {
  port: number;
  /** GitHub's new-App form, `state` included. */
  formUrl: string;
  /** Builds the manifest once the callback URL (with the port) is known. */
  manifest: (callbackUrl: string) => AppManifest;
  /** Where the manifest goes: the form's account, for the page's words. */
  accountText: string;
  state: string;
  /** Exchanges the code and stores the secrets; its error is shown and ends the run. */
  onCode: (code: string) => Promise<Created>;
}): Promise<SetupServer> {
  let manifest: AppManifest | null = null;
  let handled = false;
  let settle!: { ok: (c: Created) => void; fail: (e: unknown) => void };
  const done = new Promise<Created>((ok, fail) => {
    settle = { ok, fail };
  });
  // the run's end is reported through `done`; a rejection nobody awaits yet must not crash it
  done.catch(() => {});
  let origin = '';
  const formOrigin = new URL(opts.formUrl).origin;

  /** Answers a page; resolves once it is handed to the socket. */
  const send = (
    res: ServerResponse,
    status: number,
    body: string,
    nonce?: string,
    extra: Record<string, string> = {},
  ): Promise<void> => {
    res.writeHead(status, {
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'no-store',
      // the callback URL holds the code: no page of this server hands it on
      'referrer-policy': 'no-referrer',
      'content-security-policy': `default-src 'none'; ${nonce ? `script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}';` : "style-src 'unsafe-inline';"} form-action ${formOrigin}; base-uri 'none'; frame-ancestors 'none'`,
      'x-content-type-options': 'nosniff',
      ...extra,
    });
    return new Promise<void>((r) => res.end(body, () => r()));
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', origin);
    const host = req.headers.host ?? '';
    const port = new URL(origin).port;
    if (host !== `127.0.0.1:${port}` && host !== `localhost:${port}`)
      return send(res, 421, page('Wrong host', '<p>Open this page as http://127.0.0.1 on this machine.</p>'));
    if (req.method !== 'GET')
      return send(res, 405, page('Not allowed', '<p>GET only.</p>'), undefined, { allow: 'GET' });
    if (url.pathname === '/') {
      const nonce = randomBytes(16).toString('base64');
      const json = JSON.stringify(manifest);
      return send(
        res,
        200,
        page(
          'Create the Spark Controller GitHub App',
          `<h1>Create the Spark Controller GitHub App</h1>
<p>This page sends the App manifest to GitHub's “new GitHub App” form for ${html(opts.accountText)}. There, check the name and choose <b>Create GitHub App</b>; GitHub then sends you back here and the App's id, private key and webhook secret are stored for the controller.</p>
<form id="manifest-form" method="post" action="${html(opts.formUrl)}">
<input type="hidden" name="manifest" value="${html(json)}">
<button type="submit">Continue to GitHub</button>
</form>
<details><summary>The manifest</summary><pre>${html(JSON.stringify(manifest, null, 2))}</pre></details>
<script nonce="${nonce}">document.getElementById('manifest-form').submit();</script>`,
          nonce,
        ),
        nonce,
      );
    }
    if (url.pathname === '/callback') {
      const code = url.searchParams.get('code') ?? '';
      const state = url.searchParams.get('state') ?? '';
      if (!sameText(state, opts.state))
        return send(
          res,
          400,
          page(
            'Not this run',
            '<h1>This redirect is not for this run</h1><p>Its <code>state</code> does not match the form this command opened, so nothing was created or stored. Use the page this command printed.</p>',
          ),
        );
      if (!code) return send(res, 400, page('No code', '<h1>GitHub sent no code</h1>'));
      if (handled)
        return send(res, 409, page('Already done', '<h1>This run has handled its code already</h1>'));
      handled = true;
      let created: Created;
      try {
        created = await opts.onCode(code);
      } catch (e) {
        const message = e instanceof CreateAppError ? e.message : 'internal error (see the terminal)';
        await send(
          res,
          502,
          page('Not created', `<h1>The App's credentials were not stored</h1><p>${html(message)}</p>`),
        );
        return settle.fail(e);
      }
      // the page first, then the run ends (and the server closes)
      await send(
        res,
        200,
        page(
          'GitHub App created',
          `<h1>Created the GitHub App “${html(created.name)}”</h1>
<p>App id <code>${created.id}</code>. Its id, private key and webhook secret are in <code>${html(created.secretsFile)}</code> (mode 0600).</p>
<p>Next: <a id="install" href="${html(created.installUrl)}">install the App on the approved repositories</a>, then start the controller. You can close this tab.</p>`,
        ),
      );
      return settle.ok(created);
    }
    return send(res, 404, page('Not found', '<p>Not found.</p>'));
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((e) => {
      if (!res.headersSent) void send(res, 500, page('Error', '<p>internal error</p>'));
      settle.fail(e);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) =>
      reject(
        e.code === 'EADDRINUSE'
          ? new CreateAppError(
              EXIT.usage,
              `port ${opts.port} on 127.0.0.1 is taken: choose another with --port`,
            )
          : e,
      ),
    );
    server.listen(opts.port, '127.0.0.1', () => resolve());
  });
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const callbackUrl = `${origin}/callback`;
  manifest = opts.manifest(callbackUrl);
  return {
    url: `${origin}/`,
    callbackUrl,
    done,
    async close() {
      // answered pages are flushed already; a browser's idle keep-alive connection is not waited for
      const closed = new Promise<void>((r) => server.close(() => r()));
      server.closeIdleConnections();
      const force = setTimeout(() => server.closeAllConnections(), 1000);
      await closed;
      clearTimeout(force);
    },
  };
}
