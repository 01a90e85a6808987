/**
 * The App's private key in the form every runtime can sign with.
 *
 * GitHub hands out an App's key as PKCS#1 (`-----BEGIN RSA PRIVATE KEY-----`, both the file the
 * App settings page downloads and the manifest conversion's `pem`). Node's crypto reads PKCS#1, but
 * WebCrypto — the only crypto on Cloudflare Workers — imports RSA keys as PKCS#8 only
 * (https://developer.mozilla.org/en-US/docs/Web/API/SubtleCrypto/importKey#pkcs_8;
 * universal-github-app-jwt's README, "About Private Key formats"). So a PKCS#1 key is wrapped into
 * a PKCS#8 `PrivateKeyInfo` here, with plain byte work that runs on both runtimes:
 *
 *   PrivateKeyInfo ::= SEQUENCE { version INTEGER 0,
 *                                 algorithm SEQUENCE { rsaEncryption OID, NULL },
 *                                 privateKey OCTET STRING (the PKCS#1 RSAPrivateKey DER) }
 * (RFC 5208 section 5; rsaEncryption 1.2.840.113549.1.1.1, RFC 8017 appendix A.1).
 */

const PKCS1 = /-----BEGIN RSA PRIVATE KEY-----([\s\S]*?)-----END RSA PRIVATE KEY-----/;

/** DER length octets (X.690 8.1.3: short form below 128, else long form). */
function derLength(n: number): number[] {
  if (n < 0x80) return [n];
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v % 256);
  return [0x80 | bytes.length, ...bytes];
}

function der(tag: number, body: Uint8Array): Uint8Array {
  const len = derLength(body.length);
  const out = new Uint8Array(1 + len.length + body.length);
  out[0] = tag;
  out.set(len, 1);
  out.set(body, 1 + len.length);
  return out;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const VERSION_0 = Uint8Array.of(0x02, 0x01, 0x00);
// SEQUENCE { OID 1.2.840.113549.1.1.1, NULL }
const RSA_ALGORITHM = Uint8Array.of(
  0x30,
  0x0d,
  0x06,
  0x09,
  0x2a,
  0x86,
  0x48,
  0x86,
  0xf7,
  0x0d,
  0x01,
  0x01,
  0x01,
  0x05,
  0x00,
);

function toBase64(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

function fromBase64(text: string): Uint8Array {
  const s = atob(text.replace(/\s+/g, ''));
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

/**
 * The key as PEM that WebCrypto and Node both read: a PKCS#1 key becomes PKCS#8, anything else is
 * returned as it is (a PKCS#8 key already fits; another format fails later with the library's own
 * message). Secrets stored with literal `\n` (wrangler secret put, .env files) are unescaped first.
 */
export function signingKey(pem: string): string {
  const text = pem.includes('\\n') ? pem.replace(/\\n/g, '\n') : pem;
  const m = PKCS1.exec(text);
  if (!m) return text;
  const info = der(0x30, concat([VERSION_0, RSA_ALGORITHM, der(0x04, fromBase64(m[1]!))]));
  const lines = toBase64(info).match(/.{1,64}/g) ?? [];
  return `-----BEGIN PRIVATE KEY-----\n${lines.join('\n')}\n-----END PRIVATE KEY-----\n`;
}
