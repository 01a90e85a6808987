import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { createServer as createTlsServer } from 'node:tls';

/**
 * A network a test can cut: a Linux network namespace joined to the host
 * namespace by a veth pair on a private /30, so an agent started inside it reaches the controller
 * and the simulated GitHub only through that link, and `cut()` takes the link down as a host
 * dropping off the network would (its processes keep running, nothing answers them).
 *
 * The agent accepts plain `http:` only to loopback (agent/config.ts: anyone on the path of an
 * http URL could command the host), so the namespace reaches the controller as a real host does:
 * over HTTPS, through a TLS front on the veth's host-side address (a self-signed certificate for
 * that address, trusted by the agent and its runner through NODE_EXTRA_CA_CERTS) that forwards to
 * the controller on loopback. The GitHub Actions broker the simulated runner polls is forwarded
 * as plain TCP on the same address.
 *
 * Needs root and `ip netns` (iproute2); {@link netnsUnavailable} says why not when they are missing.
 */

/** Why a namespace cannot be made here, or null when it can. */
export function netnsUnavailable(): string | null {
  if (process.platform !== 'linux') return `not Linux (${process.platform})`;
  if (process.getuid?.() !== 0) return 'not root (ip netns needs CAP_SYS_ADMIN and CAP_NET_ADMIN)';
  try {
    execFileSync('ip', ['netns', 'list'], { stdio: 'ignore' });
  } catch (e) {
    return `ip netns is not usable: ${(e as Error).message.split('\n')[0]}`;
  }
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
  } catch {
    return 'openssl is missing (the TLS front needs a certificate)';
  }
  return null;
}

/** How an agent in the namespace is launched and what it connects to. */
export interface NamespaceRoute {
  /** Prefix of the agent's command line: `ip netns exec <ns>`. */
  launch: string[];
  /** The controller as the namespace sees it (HTTPS on the veth host address). */
  controllerUrl: string;
  /** The GitHub Actions broker as the namespace sees it. */
  actionsUrl: string;
  /** Extra environment of the agent (and, through `passEnv`, of its runner). */
  env: Record<string, string>;
  passEnv: string[];
}

export interface VethNamespace {
  /** The namespace's name (unique per call). */
  name: string;
  /** Address of the host side of the veth pair (where the forwarders listen). */
  hostAddress: string;
  /** Address inside the namespace. */
  nsAddress: string;
  /**
   * Forwards to the controller (`https://<hostAddress>:<port>` → `controllerPort` on 127.0.0.1)
   * and the Actions broker, and returns how to launch an agent inside the namespace.
   */
  route(endpoints: { controllerPort: number; actionsUrl: string }): Promise<NamespaceRoute>;
  /** Takes the link down (host side): the namespace loses the controller and GitHub. */
  cut(): void;
  /** Brings the link back. */
  restore(): void;
  /** Whether the namespace currently reaches the host side (carrier on its veth end). */
  linkUp(): boolean;
  /** Closes the forwarders and deletes the veth pair and the namespace; safe to call twice. */
  close(): Promise<void>;
}

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString();

/** A /30 in 10.213.0.0/16 that no interface here uses yet. */
function freeSubnet(): { host: string; ns: string } {
  const used = ip('-4', '-o', 'addr', 'show');
  for (let i = 0; i < 64; i++) {
    const n = randomBytes(2).readUInt16BE() & 0x3ffc; // 0..16380, a multiple of 4
    const base = `10.213.${n >> 8}.`;
    const low = n & 0xff;
    const host = `${base}${low + 1}`;
    if (!used.includes(` ${base}${low + 1}/`) && !used.includes(` ${base}${low + 2}/`))
      return { host, ns: `${base}${low + 2}` };
  }
  throw new Error('no free /30 in 10.213.0.0/16 (64 tries)');
}

/** Every namespace and link this process made, removed on exit even when afterAll never ran. */
const live = new Set<() => void>();
let exitHook = false;

/**
 * Creates the namespace and the veth pair (`ip netns add`, `ip link add … type veth peer`),
 * addresses the /30 and brings both ends and the namespace's loopback up. `dir` holds the TLS
 * key and certificate.
 */
export function createVethNamespace(dir: string): VethNamespace {
  const tag = `${process.pid.toString(36)}${randomBytes(3).toString('hex')}`.slice(-8);
  const name = `spark-story-${tag}`;
  const hostIf = `vsh${tag}`; // interface names: at most 15 characters
  const nsIf = `vsn${tag}`;
  const { host, ns } = freeSubnet();
  const servers: Server[] = [];
  const sockets = new Set<Socket>();
  let removed = false;
  const removeNet = () => {
    if (removed) return;
    removed = true;
    live.delete(removeNet);
    // deleting one end of a veth pair deletes both; the namespace goes with its last reference
    for (const args of [
      ['link', 'del', hostIf],
      ['netns', 'del', name],
    ]) {
      try {
        ip(...args);
      } catch {
        // already gone (or never made: a failed setup)
      }
    }
  };
  live.add(removeNet);
  if (!exitHook) {
    exitHook = true;
    process.once('exit', () => {
      for (const r of [...live]) r();
    });
  }
  try {
    ip('netns', 'add', name);
    ip('link', 'add', hostIf, 'type', 'veth', 'peer', 'name', nsIf);
    ip('link', 'set', nsIf, 'netns', name);
    ip('addr', 'add', `${host}/30`, 'dev', hostIf);
    ip('link', 'set', hostIf, 'up');
    ip('netns', 'exec', name, 'ip', 'addr', 'add', `${ns}/30`, 'dev', nsIf);
    ip('netns', 'exec', name, 'ip', 'link', 'set', nsIf, 'up');
    ip('netns', 'exec', name, 'ip', 'link', 'set', 'lo', 'up');
  } catch (e) {
    removeNet();
    throw new Error(`could not create network namespace ${name}: ${(e as Error).message}`);
  }

  const listen = (server: Server) =>
    new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, host, () => {
        servers.push(server);
        const a = server.address();
        resolve(typeof a === 'object' && a ? a.port : 0);
      });
    });
  /** Pipes each accepted connection to `port` on loopback. */
  const pipeTo = (port: number) => (client: Socket) => {
    const upstream = connect(port, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.once('close', () => sockets.delete(s));
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  };

  return {
    name,
    hostAddress: host,
    nsAddress: ns,
    async route({ controllerPort, actionsUrl }) {
      const key = join(dir, `${name}.key`);
      const cert = join(dir, `${name}.crt`);
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'ec',
          '-pkeyopt',
          'ec_paramgen_curve:prime256v1',
          '-nodes',
          '-days',
          '1',
          '-subj',
          '/CN=spark-controller-test',
          '-addext',
          `subjectAltName=IP:${host}`,
          '-keyout',
          key,
          '-out',
          cert,
        ],
        { stdio: 'ignore' },
      );
      const tlsPort = await listen(
        createTlsServer({ key: readFileSync(key), cert: readFileSync(cert) }, pipeTo(controllerPort)),
      );
      const actionsPort = await listen(createServer(pipeTo(Number(new URL(actionsUrl).port))));
      return {
        launch: ['ip', 'netns', 'exec', name],
        controllerUrl: `https://${host}:${tlsPort}`,
        actionsUrl: `http://${host}:${actionsPort}`,
        env: { NODE_EXTRA_CA_CERTS: cert },
        passEnv: ['NODE_EXTRA_CA_CERTS'],
      };
    },
    cut() {
      ip('link', 'set', hostIf, 'down');
    },
    restore() {
      ip('link', 'set', hostIf, 'up');
    },
    linkUp() {
      const out = ip('netns', 'exec', name, 'ip', '-o', 'link', 'show', nsIf);
      return !out.includes('NO-CARRIER') && /state UP/.test(out);
    },
    async close() {
      for (const s of sockets) s.destroy();
      await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
      servers.length = 0;
      removeNet();
    },
  };
}
