#!/usr/bin/env node
// `npx sparkctl` from a checkout (package.json "bin"). tsx is resolved next to this file, so the
// command works from any directory; the self-contained bundle is cli/dist/sparkctl.mjs.
import { register } from 'tsx/esm/api';

register();
const { runProcess } = await import('./main.ts');
await runProcess();
