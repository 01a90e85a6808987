import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseComputeApps, queryGpu } from '../../agent/gpu.ts';
import { FAKE_BIN_DIR, FakeGpu } from '../../scripts/sim/doubles/index.ts';
import { tempDir } from '../../scripts/sim/ledger.ts';

describe('nvidia-smi compute-apps parsing', () => {
  it('parses real csv,noheader,nounits output', () => {
    const out = '12345, /usr/bin/python3, 1024\n678, /opt/deckard/bin/deckard-server, 98304\n';
    expect(parseComputeApps(out)).toEqual([
      { pid: 12345, name: '/usr/bin/python3', usedMemoryMiB: 1024 },
      { pid: 678, name: '/opt/deckard/bin/deckard-server', usedMemoryMiB: 98304 },
    ]);
  });

  it('reads no output as no processes, and [N/A] memory (unified memory on GB10) as 0', () => {
    expect(parseComputeApps('')).toEqual([]);
    expect(parseComputeApps('\n')).toEqual([]);
    expect(parseComputeApps('No running processes found\n')).toEqual([]);
    expect(parseComputeApps('4242, python3, [N/A]')).toEqual([
      { pid: 4242, name: 'python3', usedMemoryMiB: 0 },
    ]);
  });

  it('keeps commas inside a process name', () => {
    expect(parseComputeApps('7, /srv/a,b/worker, 10')).toEqual([
      { pid: 7, name: '/srv/a,b/worker', usedMemoryMiB: 10 },
    ]);
  });

  it('rejects output that is not the queried format, naming the line', () => {
    expect(() => parseComputeApps('GPU 0: NVIDIA GB10 (UUID: GPU-1234)')).toThrow(
      /unexpected nvidia-smi line/,
    );
    expect(() => parseComputeApps('abc, python3, 10')).toThrow(/pid is not a number/);
    expect(() => parseComputeApps('12, python3, lots')).toThrow(/memory is not a number/);
  });
});

describe('queryGpu against the fake nvidia-smi', () => {
  const withFake = async (fn: (gpu: FakeGpu) => Promise<void>) => {
    const { dir, cleanup } = tempDir();
    const gpu = new FakeGpu(join(dir, 'gpu'));
    const saved = { PATH: process.env.PATH, FAKE_NVIDIA_SMI_STATE: process.env.FAKE_NVIDIA_SMI_STATE };
    Object.assign(process.env, gpu.env());
    try {
      await fn(gpu);
    } finally {
      process.env.PATH = saved.PATH;
      if (saved.FAKE_NVIDIA_SMI_STATE === undefined) delete process.env.FAKE_NVIDIA_SMI_STATE;
      else process.env.FAKE_NVIDIA_SMI_STATE = saved.FAKE_NVIDIA_SMI_STATE;
      cleanup();
    }
  };

  it('lists processes, and an idle GPU as an empty list', async () => {
    await withFake(async (gpu) => {
      expect(await queryGpu('nvidia-smi', 5000)).toEqual({ ok: true, processes: [] });
      gpu.setProcesses([{ pid: 99, name: '/usr/bin/python3', usedMemoryMiB: 512 }]);
      expect(await queryGpu('nvidia-smi', 5000)).toEqual({
        ok: true,
        processes: [{ pid: 99, name: '/usr/bin/python3', usedMemoryMiB: 512 }],
      });
    });
  });

  it('reports a driver failure as a named failure, never as idle', async () => {
    await withFake(async (gpu) => {
      gpu.fail();
      const q = await queryGpu('nvidia-smi', 5000);
      expect(q.ok).toBe(false);
      expect(!q.ok && q.error).toMatch(
        /^nvidia-smi failed \(exit 9\): NVIDIA-SMI has failed because it couldn't communicate/,
      );
    });
  });

  it('reports a missing nvidia-smi as a named failure', async () => {
    const q = await queryGpu(join(FAKE_BIN_DIR, 'no-such-nvidia-smi'), 5000);
    expect(q).toEqual({ ok: false, error: expect.stringMatching(/^nvidia-smi missing/) });
  });
});
