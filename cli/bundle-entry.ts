// Entry of the single-file bundle cli/dist/sparkctl.mjs (scripts/build.ts target "sparkctl").
import { runProcess } from './main.ts';

await runProcess();
