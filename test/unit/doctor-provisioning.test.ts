import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  checkAttentionBackend,
  checkPins,
  compareVersions,
  ProvisioningSpecSchema,
  parseFreeze,
  satisfies,
} from '../../agent/preflight/provisioning.ts';

/** The pure rules of the provisioning spec: PEP 440 ordering and specifiers, pins, attention by SM. */

describe('PEP 440 versions and specifiers', () => {
  it('orders releases, pre-releases, post and dev releases as PEP 440 does', () => {
    const ordered = ['2.8.0.dev1', '2.8.0rc1', '2.8.0', '2.8.0.post1', '2.8.1', '2.9.0', '2.10.0'];
    for (let i = 0; i < ordered.length - 1; i++)
      expect(compareVersions(ordered[i]!, ordered[i + 1]!)).toBe(-1);
    expect(compareVersions('0.11', '0.11.0')).toBe(0);
    expect(compareVersions('2.9.0+cu130', '2.9.0')).toBe(0);
    expect(compareVersions('not-a-version', '1.0')).toBeNull();
  });

  it('is antisymmetric on generated versions', () => {
    const v = fc
      .tuple(
        fc.array(fc.nat(30), { minLength: 1, maxLength: 4 }),
        fc.constantFrom('', 'rc1', 'a2', '.post1', '.dev3'),
      )
      .map(([r, s]) => r.join('.') + s);
    fc.assert(
      fc.property(v, v, (a, b) => {
        expect(compareVersions(a, b)).toBe(-(compareVersions(b, a) ?? Number.NaN) || 0);
      }),
    );
  });

  it('evaluates specifier sets', () => {
    expect(satisfies('4.57.1', '>=4.57,<5')).toBe(true);
    expect(satisfies('4.49.0', '>=4.57,<5')).toBe(false);
    expect(satisfies('5.0.0rc1', '<5')).toBe(true);
    expect(satisfies('2.9.3', '==2.9.*')).toBe(true);
    expect(satisfies('2.10.0', '==2.9.*')).toBe(false);
    expect(satisfies('4.58.2', '~=4.57')).toBe(true);
    expect(satisfies('5.0', '~=4.57')).toBe(false);
    expect(satisfies('2.9.0+cu130', '==2.9.0+cu130')).toBe(true);
    expect(satisfies('2.9.0+cpu', '==2.9.0+cu130')).toBe(false);
    expect(satisfies('1.0', '=>1.0')).toBeNull();
  });
});

describe('pins and guidelines', () => {
  const spec = ProvisioningSpecSchema.parse({
    venv: '/opt/spark/butter-venv',
    pins: { torch: '2.9.0+cu130', Transformers: '4.49.0' },
    guidelines: { Transformers: '>=4.57' },
    forced: { Transformers: 'the NVFP4 loader regressed in 4.57' },
  });

  it('matches pip freeze names case- and separator-insensitively and lists forced pins', () => {
    const r = checkPins(
      spec,
      parseFreeze(['torch==2.9.0+cu130', 'transformers==4.49.0', '-e git+https://x#egg=y']),
    );
    expect(r.checks.map((c) => [c.name, c.ok, c.fatal])).toEqual([
      ['pin:torch', true, true],
      ['pin:Transformers', true, true],
      ['guideline:Transformers', false, false],
    ]);
    expect(r.forced).toEqual([
      {
        package: 'Transformers',
        pin: '4.49.0',
        guideline: '>=4.57',
        reason: 'the NVFP4 loader regressed in 4.57',
      },
    ]);
  });

  it('refuses a forced entry without a guideline and an unpinned serving backend', () => {
    const bad = ProvisioningSpecSchema.safeParse({
      venv: '/v',
      pins: {},
      servingBackend: 'vllm',
      forced: { numpy: 'because we always did it this way' },
    });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues.map((i) => i.message)).toEqual([
      'the serving backend must be pinned',
      'no guideline for numpy to force against',
    ]);
  });
});

describe('attention backend by device capability', () => {
  it('runs FlashAttention 3 only on SM 8.0–9.0 and sends GB10 (SM 12.1) to flashinfer', () => {
    expect(checkAttentionBackend('flash-attn-3', [9, 0], 'H100').ok).toBe(true);
    expect(checkAttentionBackend('flash-attn-3', [8, 0], 'A100').ok).toBe(true);
    const gb10 = checkAttentionBackend('flash-attn-3', [12, 1], 'NVIDIA GB10');
    expect(gb10).toEqual({
      name: 'attention-backend',
      ok: false,
      fatal: true,
      detail: 'FlashAttention 3 needs SM 8.0–9.0; NVIDIA GB10 is SM 12.1: pin flashinfer instead',
    });
    expect(checkAttentionBackend('flashinfer', [12, 1], 'NVIDIA GB10').ok).toBe(true);
    expect(checkAttentionBackend('flashinfer', null, null).detail).toContain('no device capability');
  });
});
