import { createPrivateKey, generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { signingKey } from '../../functions/github/private-key.ts';

/**
 * GitHub hands out App keys as PKCS#1; WebCrypto (the Worker's only crypto) imports RSA keys as
 * PKCS#8 only. signingKey() must turn one into the other without changing the key.
 */

const { privateKey: pkcs1 } = generateKeyPairSync('rsa', {
  modulusLength: 2048,
  privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
  publicKeyEncoding: { type: 'spki', format: 'pem' },
});

const derOf = (pem: string) =>
  Buffer.from(pem.replace(/-----[A-Z ]+-----/g, '').replace(/\s+/g, ''), 'base64');

const importPkcs8 = (der: Buffer) =>
  crypto.subtle.importKey(
    'pkcs8',
    new Uint8Array(der),
    { name: 'RSASSA-PKCS1-v1_5', hash: 'SHA-256' },
    false,
    ['sign'],
  );

describe('the App private key for signing', () => {
  it('a PKCS#1 key from GitHub becomes the same key as PKCS#8, which WebCrypto imports', async () => {
    expect(pkcs1).toMatch(/^-----BEGIN RSA PRIVATE KEY-----/);
    // WebCrypto refuses GitHub's format as it is
    await expect(importPkcs8(derOf(pkcs1))).rejects.toThrow();
    const pem = signingKey(pkcs1);
    expect(pem).toMatch(/^-----BEGIN PRIVATE KEY-----\n/);
    expect(pem.split('\n').every((l) => l.length <= 64)).toBe(true);
    await expect(importPkcs8(derOf(pem))).resolves.toBeTruthy();
    // byte for byte what Node's own PKCS#8 export makes of the same key
    const node = createPrivateKey(pkcs1).export({ type: 'pkcs8', format: 'der' });
    expect(derOf(pem).equals(node)).toBe(true);
  });

  it('reads a key stored with literal \\n escapes, and leaves a PKCS#8 key as it is', () => {
    const escaped = pkcs1.replace(/\n/g, '\\n');
    expect(signingKey(escaped)).toBe(signingKey(pkcs1));
    const pkcs8 = createPrivateKey(pkcs1).export({ type: 'pkcs8', format: 'pem' }).toString();
    expect(signingKey(pkcs8)).toBe(pkcs8);
  });
});
