import { run } from './main.ts';

await run();
